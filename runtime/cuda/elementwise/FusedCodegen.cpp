//===- elementwise/FusedCodegen.cpp - Fused programs as CUDA C source -----===//
//
// A generated kernel is the interpreter (FusedArgs::element) unrolled for
// one program: each instruction is one call of fusedScalar<Op, R> with the
// instruction's registers and attributes, rounded with fusedRound<R> to its
// type, then passed through fusedKeep (FusedKernel.h) where that rounding
// leaves the register as it is, so no FMA forms across instructions — as in
// the interpreter. Loads and stores are fusedLoad / fusedStore, which for a
// vector group read the group's bytes copied with 16-byte loads.
//
//===----------------------------------------------------------------------===//

#include "FusedCodegen.h"

#include "ampc/rt/PlanFile.h"

#include <cstdio>

namespace ampc::rt::cuda {

static_assert(sizeof(FusedKernelArgs) <= kMaxArgBytes, "a Launch holds FusedKernelArgs");
static_assert(FusedKernelArgs::kMaxInputs == FusedArgs::kMaxInputs &&
              FusedKernelArgs::kMaxOutputs == FusedArgs::kMaxOutputs &&
              FusedKernelArgs::kRank == FusedArgs::kRank);

namespace {

const char *opName(FusedOp op) {
  switch (op) {
#define AMPC_FUSED_NAME(NAME)                                                                      \
  case FusedOp::NAME:                                                                              \
    return #NAME;
    AMPC_FUSED_OPS(AMPC_FUSED_NAME)
#undef AMPC_FUSED_NAME
  default:
    return nullptr;
  }
}

std::string hex32(float f) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08Xu", math::floatBits(f));
  return buf;
}

std::string params(const fused::FusedParams &p) {
  fused::FusedParams d;
  if (math::floatBits(p.alpha) == math::floatBits(d.alpha) &&
      math::floatBits(p.beta) == math::floatBits(d.beta) &&
      math::floatBits(p.gamma) == math::floatBits(d.gamma) && p.hasMin == d.hasMin &&
      p.hasMax == d.hasMax && p.detectPos == d.detectPos && p.detectNeg == d.detectNeg)
    return "FusedParams()";
  auto b = [](bool v) { return v ? "true" : "false"; };
  return "fusedParams(" + hex32(p.alpha) + ", " + hex32(p.beta) + ", " + hex32(p.gamma) + ", " +
         b(p.hasMin) + ", " + b(p.hasMax) + ", " + b(p.detectPos) + ", " + b(p.detectNeg) + ")";
}

/// Whether fusedRound<R>(type, v) returns v itself (then fusedKeep hides it).
bool roundKeepsRegister(uint8_t type, bool wide) {
  switch (type) {
  case FusedElem::F16:
  case FusedElem::BF16:
  case FusedElem::BOOL:
    return false;
  case FusedElem::F32:
    return !wide;
  default:
    return true;
  }
}

bool present(const FusedArgs &f, int o) { return f.out[o].p != nullptr; }

} // namespace

int fusedElemBytes(uint8_t type) {
  // FusedElem mirrors plan::ElemType (Lowering.cpp checks it).
  return static_cast<int>(planElemSize(static_cast<plan::ElemType>(type)));
}

int fusedKernelWidth(const FusedArgs &f) {
  int narrowest = 0;
  auto see = [&](uint8_t type) {
    int b = fusedElemBytes(type);
    narrowest = narrowest == 0 || b < narrowest ? b : narrowest;
  };
  // Strided inputs (a broadcast bias, a per-row scale) load element by
  // element at offsets a group shares; they do not set the width.
  for (int k = 0; k < f.numInputs; ++k)
    if (f.in[k].kind == FusedArgs::Contiguous)
      see(f.in[k].type);
  for (int o = 0; o < f.numOutputs; ++o)
    if (present(f, o))
      see(f.out[o].type);
  if (narrowest == 0)
    return 1;
  int w = 16 / narrowest;
  return w > 8 ? 8 : w;
}

std::string fusedKernelSource(const FusedArgs &f) {
  const int width = fusedKernelWidth(f);
  const int numIn = f.numInputs > 0 ? f.numInputs : 1;
  const int numOut = f.numOutputs > 0 ? f.numOutputs : 1;
  std::string s;
  auto line = [&](const std::string &text) { s += text + "\n"; };
  auto num = [](int64_t v) { return std::to_string(v); };

  line("// An ampc.Fused program as a kernel of its own (runtime/cuda/elementwise/"
       "FusedCodegen.cpp):");
  line("// " + num(f.numInputs) + " inputs, " + num(f.numInstrs) + " instructions, " +
       num(f.numOutputs) + " outputs, " + (f.wide ? "fp64" : "fp32") + " registers, " +
       num(width) + " elements a thread when aligned.");
  line("#include \"FusedKernel.h\"");
  line("#ifndef AMPC_FUSED_NS");
  line("#define AMPC_FUSED_NS ampc_fused");
  line("#endif");
  line("namespace AMPC_FUSED_NS {");
  line("using namespace ::ampc::rt;");
  line("using namespace ::ampc::rt::fused;");
  line("using namespace ::ampc::rt::cuda;");
  line(std::string("typedef ") + (f.wide ? "double" : "float") + " R;");
  line("");

  // The instructions on one element.
  line("AMPC_FUSED_FN void program(const R *x, R *y, uint32_t zero) {");
  line("  (void)zero;");
  for (int k = 0; k < f.numInputs; ++k)
    line("  const R r" + num(k) + " = x[" + num(k) + "];");
  for (int j = 0; j < f.numInstrs; ++j) {
    const FusedArgs::Instr &in = f.ins[j];
    const char *name = opName(in.op);
    std::string call = std::string("fusedScalar<FusedOp::") + (name ? name : "Identity") +
                       ", R>(" + params(in.params) + ", r" + num(in.a) + ", r" + num(in.b) +
                       ", r" + num(in.c) + ")";
    std::string value = "fusedRound<R>(" + num(in.type) + ", " + call + ")";
    if (roundKeepsRegister(in.type, f.wide))
      value = "fusedKeep<R>(" + value + ", zero)";
    line("  const R r" + num(f.numInputs + j) + " = " + value + ";");
  }
  for (int o = 0; o < f.numOutputs; ++o)
    line("  y[" + num(o) + "] = r" + num(f.out[o].reg) + ";");
  line("}");
  line("");

  // One element, any layout of the operands.
  line("AMPC_FUSED_FN void element(const FusedKernelArgs &a, int64_t i) {");
  line("  R x[" + num(numIn) + "];");
  for (int k = 0; k < f.numInputs; ++k) {
    const FusedArgs::Input &in = f.in[k];
    std::string at = in.kind == FusedArgs::Contiguous ? "i"
                     : in.kind == FusedArgs::Scalar   ? "0"
                                                      : "fusedOffset(a, " + num(k) + ", i)";
    line("  x[" + num(k) + "] = fusedLoad<R>(" + num(in.type) + ", a.in[" + num(k) + "], " + at +
         ");");
  }
  line("  R y[" + num(numOut) + "];");
  line("  program(x, y, a.zero);");
  for (int o = 0; o < f.numOutputs; ++o)
    if (present(f, o))
      line("  fusedStore<R>(" + num(f.out[o].type) + ", a.out[" + num(o) + "], i, y[" + num(o) +
           "]);");
  line("}");
  line("");

  // Thread t: a group of `width` elements, loaded and stored 16 bytes at a
  // time, or (unaligned operands, the last partial group) element by element.
  line("AMPC_FUSED_FN void thread(const FusedKernelArgs &a, int64_t t) {");
  if (width == 1) {
    line("  element(a, t);");
  } else {
    const std::string w = num(width);
    line("  if (!a.vector) {");
    line("    element(a, t);");
    line("    return;");
    line("  }");
    line("  const int64_t i0 = t * " + w + ";");
    line("  if (i0 + " + w + " > a.n) {");
    line("    for (int64_t i = i0; i < a.n; ++i)");
    line("      element(a, i);");
    line("    return;");
    line("  }");
    for (int k = 0; k < f.numInputs; ++k) {
      const FusedArgs::Input &in = f.in[k];
      if (in.kind == FusedArgs::Scalar) {
        line("  const R s" + num(k) + " = fusedLoad<R>(" + num(in.type) + ", a.in[" + num(k) +
             "], 0);");
        continue;
      }
      if (in.kind == FusedArgs::Strided) {
        // The group lies in one row of the result (the launch checks it):
        // its elements are the first's offset plus e times the last stride.
        line("  const int64_t o" + num(k) + " = fusedOffset(a, " + num(k) + ", i0);");
        line("  const int64_t d" + num(k) + " = a.strides[" + num(k) + "][a.rank - 1];");
        continue;
      }
      std::string bytes = num(width * fusedElemBytes(in.type));
      line("  alignas(16) unsigned char in" + num(k) + "[" + bytes + "];");
      line("  fusedCopyBytes<" + bytes + ">(in" + num(k) +
           ", static_cast<const unsigned char *>(a.in[" + num(k) + "]) + i0 * " +
           num(fusedElemBytes(in.type)) + ");");
    }
    for (int o = 0; o < f.numOutputs; ++o)
      if (present(f, o))
        line("  alignas(16) unsigned char out" + num(o) + "[" +
             num(width * fusedElemBytes(f.out[o].type)) + "];");
    line("  AMPC_FUSED_UNROLL");
    line("  for (int e = 0; e < " + w + "; ++e) {");
    line("    R x[" + num(numIn) + "];");
    for (int k = 0; k < f.numInputs; ++k)
      line("    x[" + num(k) + "] = " +
           (f.in[k].kind == FusedArgs::Scalar    ? "s" + num(k)
            : f.in[k].kind == FusedArgs::Strided ? "fusedLoad<R>(" + num(f.in[k].type) + ", a.in[" +
                                                       num(k) + "], o" + num(k) + " + e * d" +
                                                       num(k) + ")"
                                                 : "fusedLoad<R>(" + num(f.in[k].type) + ", in" +
                                                       num(k) + ", e)") +
           ";");
    line("    R y[" + num(numOut) + "];");
    line("    program(x, y, a.zero);");
    for (int o = 0; o < f.numOutputs; ++o)
      if (present(f, o))
        line("    fusedStore<R>(" + num(f.out[o].type) + ", out" + num(o) + ", e, y[" + num(o) +
             "]);");
    line("  }");
    for (int o = 0; o < f.numOutputs; ++o)
      if (present(f, o)) {
        int b = fusedElemBytes(f.out[o].type);
        line("  fusedCopyBytes<" + num(width * b) + ">(static_cast<unsigned char *>(a.out[" +
             num(o) + "]) + i0 * " + num(b) + ", out" + num(o) + ");");
      }
  }
  line("}");
  line("");
  line("} // namespace AMPC_FUSED_NS");
  line("AMPC_FUSED_ENTRY(AMPC_FUSED_NS)");
  return s;
}

std::string fusedHash(const std::string &text) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

FusedKernelArgs fusedKernelArgs(const FusedArgs &f, int64_t elements, int64_t &threads) {
  FusedKernelArgs k{};
  k.n = elements;
  k.rank = f.rank;
  for (int d = 0; d < f.rank; ++d)
    k.shape[d] = f.shape[d];
  const int width = fusedKernelWidth(f);
  bool aligned = width > 1;
  auto check = [&](const void *p, uint8_t type) {
    int64_t bytes = int64_t(width) * fusedElemBytes(type);
    uintptr_t need = static_cast<uintptr_t>(bytes < 16 ? bytes : 16);
    aligned = aligned && reinterpret_cast<uintptr_t>(p) % need == 0;
  };
  for (int i = 0; i < f.numInputs; ++i) {
    k.in[i] = f.in[i].p;
    for (int d = 0; d < FusedArgs::kRank; ++d)
      k.strides[i][d] = f.in[i].strides[d];
    if (f.in[i].kind == FusedArgs::Contiguous)
      check(f.in[i].p, f.in[i].type);
  }
  for (int o = 0; o < f.numOutputs; ++o) {
    k.out[o] = f.out[o].p;
    if (present(f, o))
      check(f.out[o].p, f.out[o].type);
  }
  // Strided inputs find a group's elements from its first one's offset: a
  // group must not cross a row of the result.
  for (int i = 0; i < f.numInputs; ++i)
    if (f.in[i].kind == FusedArgs::Strided)
      aligned = aligned && f.rank >= 1 && f.shape[f.rank - 1] % width == 0;
  k.vector = aligned ? 1 : 0;
  threads = aligned ? (elements + width - 1) / width : elements;
  return k;
}

void runCompiledFusedOnHost(const FusedArgs &program, int width, const FusedKernelArgs &k,
                            int64_t threads) {
  // The program with the compiled launch's addresses, shape and strides.
  FusedArgs f = program;
  f.rank = k.rank;
  for (int d = 0; d < FusedArgs::kRank; ++d)
    f.shape[d] = d < k.rank ? k.shape[d] : 0;
  for (int i = 0; i < f.numInputs; ++i) {
    f.in[i].p = k.in[i];
    for (int d = 0; d < FusedArgs::kRank; ++d)
      f.in[i].strides[d] = k.strides[i][d];
  }
  for (int o = 0; o < f.numOutputs; ++o)
    f.out[o].p = k.out[o];
  int64_t per = k.vector ? width : 1;
  for (int64_t t = 0; t < threads; ++t)
    for (int64_t i = t * per; i < t * per + per && i < k.n; ++i)
      FusedArgs::run(f, i);
}

int FusedKernelTable::use(std::vector<Launch> &launches, const Compile &compile) {
  int used = 0;
  for (Launch &l : launches) {
    if (l.kind != Launch::Kernel || l.kernel != KernelKind::Fused || l.threads <= 0)
      continue;
    const FusedArgs &f = l.as<FusedArgs>();
    std::string source = fusedKernelSource(f);
    auto it = bySource_.find(source);
    if (it == bySource_.end()) {
      CompiledFusedKernel &k = kernels_.emplace_back();
      k.source = source;
      k.program = f;
      k.width = fusedKernelWidth(f);
      k.ok = compile(k);
      it = bySource_.emplace(std::move(source), kernels_.size() - 1).first;
    }
    const CompiledFusedKernel &k = kernels_[it->second];
    if (!k.ok)
      continue;
    int64_t threads = 0;
    FusedKernelArgs args = fusedKernelArgs(f, l.threads, threads);
    int step = l.step;
    l = Launch::kernelOf(KernelKind::Fused, args, threads);
    l.kind = Launch::CompiledFused;
    l.compiled = &k;
    l.step = step;
    ++used;
  }
  return used;
}

} // namespace ampc::rt::cuda
