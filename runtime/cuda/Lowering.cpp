//===- Lowering.cpp - Plan steps as CUDA launches --------------------------===//
//
// One function per op family reads the step's operands and attributes (with
// the CPU kernels' checks and ONNX defaults) and appends launches. Shapes are
// static, so everything — grid sizes, strides, GEMM dimensions, workspace
// offsets — is fixed here; running a program only enqueues the list.
//
//===----------------------------------------------------------------------===//

#include "Lowering.h"

#include "ampc/rt/FusedDecode.h"
#include "ampc/rt/FusedOps.h"
#include "ampc/rt/MatMulShape.h"
#include "ampc/rt/PlanFile.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace ampc::rt::cuda {

static_assert(static_cast<int>(plan::F32) == FusedElem::F32 &&
                  static_cast<int>(plan::F16) == FusedElem::F16 &&
                  static_cast<int>(plan::BF16) == FusedElem::BF16 &&
                  static_cast<int>(plan::F64) == FusedElem::F64 &&
                  static_cast<int>(plan::I64) == FusedElem::I64 &&
                  static_cast<int>(plan::I32) == FusedElem::I32 &&
                  static_cast<int>(plan::I8) == FusedElem::I8 &&
                  static_cast<int>(plan::U8) == FusedElem::U8 &&
                  static_cast<int>(plan::BOOL) == FusedElem::BOOL,
              "FusedElem mirrors plan::ElemType");

GemmCall rowMajorGemm(int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, bool transA,
                      const void *B, int64_t ldb, bool transB, void *Y, int64_t ldy) {
  // Row-major X with leading dimension ld is the column-major X^T with the
  // same ld, so Y^T (N x M) = op(B)^T (N x K) * op(A)^T (K x M).
  GemmCall g;
  g.transA = transB;
  g.transB = transA;
  g.m = N;
  g.n = M;
  g.k = K;
  g.A = B;
  g.lda = ldb;
  g.B = A;
  g.ldb = lda;
  g.C = Y;
  g.ldc = ldy;
  return g;
}

//===----------------------------------------------------------------------===//
// Memory layout
//===----------------------------------------------------------------------===//

namespace {
constexpr size_t kAlign = 256;
size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
} // namespace

MemoryLayout MemoryLayout::of(const plan::Plan &p) {
  MemoryLayout m;
  m.arenaBytes = p.memory().arena_bytes();
  m.offset.assign(p.tensors_size(), 0);
  for (int i = 0; i < p.tensors_size(); ++i) {
    const plan::Tensor &t = p.tensors(i);
    if (t.has_view_of())
      continue;
    size_t bytes = alignUp(planTensorBytes(t));
    if (t.storage() == plan::STATE) {
      m.offset[i] = m.stateBytes;
      m.stateBytes += bytes;
    } else if (t.storage() == plan::CONSTANT) {
      m.offset[i] = m.constantBytes;
      m.constantBytes += bytes;
    }
  }
  return m;
}

void *MemoryLayout::address(const plan::Plan &p, int id, uint8_t *arena, uint8_t *state,
                            uint8_t *constants) const {
  if (id < 0 || id >= p.tensors_size())
    return nullptr;
  const plan::Tensor &t = p.tensors(id);
  if (t.has_view_of())
    return address(p, t.view_of(), arena, state, constants);
  switch (t.storage()) {
  case plan::ARENA:
    return arena + t.offset();
  case plan::STATE:
    return state + offset[id];
  case plan::CONSTANT:
    return constants + offset[id];
  default:
    return nullptr;
  }
}

bool checkDeviceMemory(uint64_t needed, const std::string &breakdown, uint64_t deviceTotal,
                       double fraction, uint64_t limit, std::string &error) {
  if (!(fraction > 0 && fraction <= 1)) {
    error = "--memory-fraction must be in (0, 1], got " + std::to_string(fraction);
    return false;
  }
  uint64_t share = static_cast<uint64_t>(std::floor(fraction * static_cast<double>(deviceTotal)));
  uint64_t available = limit ? std::min(share, limit) : share;
  if (needed <= available)
    return true;
  std::string why = limit && limit < share
                        ? "--memory-limit " + std::to_string(limit) + " bytes"
                        : "--memory-fraction " + std::to_string(fraction).substr(0, 6) + " of the " +
                              std::to_string(deviceTotal) + " bytes of the device";
  error = "the plan needs " + std::to_string(needed) + " bytes of device memory (" + breakdown +
          "), more than the " + std::to_string(available) + " bytes available under " + why;
  return false;
}

//===----------------------------------------------------------------------===//
// Step lowering
//===----------------------------------------------------------------------===//

namespace {

/// A step operand as the lowering sees it.
struct Operand {
  void *p = nullptr;
  uint8_t type = 0;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int id = -1;
  bool present() const { return id >= 0; }
  int rank() const { return static_cast<int>(shape.size()); }
  size_t elemBytes() const { return planElemSize(static_cast<plan::ElemType>(type)); }
  /// The address of element `i`.
  template <typename T = void> T *at(int64_t i) const {
    return reinterpret_cast<T *>(static_cast<uint8_t *>(p) + i * static_cast<int64_t>(elemBytes()));
  }
};

int64_t product(const std::vector<int64_t> &v, size_t begin = 0, size_t end = SIZE_MAX) {
  int64_t n = 1;
  for (size_t i = begin; i < std::min(end, v.size()); ++i)
    n *= v[i];
  return n;
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    s[d - 1] = s[d] * shape[d];
  return s;
}

int64_t normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < 0)
    axis += rank;
  return axis >= 0 && axis < rank ? axis : -1;
}

bool isFloat(uint8_t t) { return t == FusedElem::F32 || t == FusedElem::F16 || t == FusedElem::BF16; }

const char *typeName(uint8_t t) {
  static const char *names[] = {"float", "float16", "bfloat16", "double", "int64",
                                "int32", "int8",    "uint8",    "bool"};
  return t < 9 ? names[t] : "?";
}

std::string argString(const Operand &o) {
  std::string s = typeName(o.type);
  s += "[";
  for (size_t i = 0; i < o.shape.size(); ++i) {
    if (i)
      s += ",";
    s += std::to_string(o.shape[i]);
  }
  return s + "]";
}

/// Workspace of one step, bump-allocated from the shared workspace.
class Scratch {
public:
  explicit Scratch(uint8_t *base) : base_(base) {}
  template <typename T> T *alloc(int64_t count) {
    size_t off = used_;
    used_ += alignUp(static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T));
    // Integer arithmetic: the sizing pass runs with a null base, and offsetting
    // a null pointer is undefined (UBSan).
    return reinterpret_cast<T *>(reinterpret_cast<uintptr_t>(base_) + off);
  }
  size_t used() const { return used_; }

private:
  uint8_t *base_;
  size_t used_ = 0;
};

class StepLowering {
public:
  StepLowering(const plan::Plan &p, const plan::Step &step, const DeviceMemory &mem,
               std::vector<Launch> &out, int index)
      : p_(p), step_(step), mem_(mem), out_(out), index_(index), ws_(mem.workspace) {
    for (int id : step.inputs())
      in_.push_back(operand(id));
    for (int id : step.outputs())
      outs_.push_back(operand(id));
  }

  bool lower(std::string &error);
  size_t workspaceUsed() const { return ws_.used(); }

private:
  Operand operand(int id) const {
    Operand o;
    if (id < 0 || id >= p_.tensors_size())
      return o;
    const plan::Tensor &t = p_.tensors(id);
    o.id = id;
    o.p = mem_.tensor(id);
    o.type = static_cast<uint8_t>(t.type());
    o.shape.assign(t.shape().begin(), t.shape().end());
    o.numel = planNumElements(t);
    return o;
  }
  bool has(size_t i) const { return i < in_.size() && in_[i].present(); }
  Operand input(size_t i) const { return i < in_.size() ? in_[i] : Operand(); }
  Operand output(size_t i) const { return i < outs_.size() ? outs_[i] : Operand(); }

  const plan::Attribute *attr(const std::string &name) const {
    for (const plan::Attribute &a : step_.attrs())
      if (a.name() == name)
        return &a;
    return nullptr;
  }
  int64_t attrInt(const std::string &name, int64_t dflt) const {
    const plan::Attribute *a = attr(name);
    return a && a->value_case() == plan::Attribute::kI ? a->i() : dflt;
  }
  double attrFloat(const std::string &name, double dflt) const {
    const plan::Attribute *a = attr(name);
    if (!a)
      return dflt;
    if (a->value_case() == plan::Attribute::kF)
      return a->f();
    if (a->value_case() == plan::Attribute::kI)
      return static_cast<double>(a->i());
    return dflt;
  }
  std::string attrString(const std::string &name, const std::string &dflt) const {
    const plan::Attribute *a = attr(name);
    return a && a->value_case() == plan::Attribute::kS ? a->s() : dflt;
  }
  std::vector<int64_t> attrInts(const std::string &name, std::vector<int64_t> dflt = {}) const {
    const plan::Attribute *a = attr(name);
    if (!a || a->value_case() != plan::Attribute::kInts)
      return dflt;
    return std::vector<int64_t>(a->ints().values().begin(), a->ints().values().end());
  }
  /// The values of a CONSTANT integer operand.
  bool constantInts(size_t i, std::vector<int64_t> &v, std::string &error) const {
    if (!has(i)) {
      error = "missing operand " + std::to_string(i);
      return false;
    }
    const plan::Tensor *t = &p_.tensors(in_[i].id);
    if (t->has_view_of())
      t = &p_.tensors(t->view_of());
    if (t->storage() != plan::CONSTANT) {
      error = "operand " + std::to_string(i) + " must be a constant";
      return false;
    }
    const std::string &d = t->data();
    int64_t n = in_[i].numel;
    v.resize(n);
    for (int64_t k = 0; k < n; ++k) {
      switch (in_[i].type) {
      case FusedElem::I64:
        std::memcpy(&v[k], d.data() + 8 * k, 8);
        break;
      case FusedElem::I32: {
        int32_t x;
        std::memcpy(&x, d.data() + 4 * k, 4);
        v[k] = x;
        break;
      }
      default:
        error = "operand " + std::to_string(i) + " must hold integers";
        return false;
      }
    }
    return true;
  }
  bool requireFloat(std::initializer_list<int> ins, std::initializer_list<int> outs,
                    std::string &error) const {
    for (int i : ins)
      if (has(i) && !isFloat(in_[i].type)) {
        error = "expects float, float16 or bfloat16 operands, got " + argString(in_[i]);
        return false;
      }
    for (int i : outs)
      if (i < static_cast<int>(outs_.size()) && outs_[i].present() && !isFloat(outs_[i].type)) {
        error = "expects float, float16 or bfloat16 results, got " + argString(outs_[i]);
        return false;
      }
    return true;
  }

  template <typename A> void kernel(KernelKind k, const A &a, int64_t threads) {
    if (threads <= 0)
      return;
    Launch l = Launch::kernelOf(k, a, threads);
    l.step = index_;
    out_.push_back(l);
  }  /// One strided copy kernel (addCopy); false above kMaxRank.
  bool copyKernel(const std::vector<int64_t> &shape, const std::vector<int64_t> &srcStrides,
                  const std::vector<int64_t> &dstStrides, const void *src, void *dst,
                  size_t elemBytes, std::string &error);

  void gemm(const GemmCall &g) {
    if (g.m <= 0 || g.n <= 0 || g.batch <= 0)
      return;
    Launch l;
    l.kind = Launch::Gemm;
    l.gemm = g;
    l.step = index_;
    out_.push_back(l);
  }
  void memset0(void *dst, size_t bytes) {
    if (!bytes)
      return;
    Launch l;
    l.kind = Launch::Memset;
    l.dst = dst;
    l.bytes = bytes;
    l.step = index_;
    out_.push_back(l);
  }
  void memcpy(void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src)
      return;
    Launch l;
    l.kind = Launch::Memcpy;
    l.dst = dst;
    l.src = src;
    l.bytes = bytes;
    l.step = index_;
    out_.push_back(l);
  }

  /// A fused program converting `src` (any type, strided over the result's
  /// dims) into `dst`: the building block of epilogues.
  FusedArgs convertArgs(const void *src, uint8_t srcType, const Operand &dst) const {
    FusedArgs f;
    f.rank = 1;
    f.shape[0] = dst.numel;
    f.numInputs = 1;
    f.in[0] = {src, srcType, FusedArgs::Contiguous, {}};
    f.numOutputs = 1;
    f.out[0] = {dst.p, dst.type, 0};
    return f;
  }

public:
  bool lowerFused(std::string &error);
  bool lowerCopyLike(std::string &error);
  bool lowerTranspose(std::string &error);
  bool lowerExpand(std::string &error);
  bool lowerConcat(std::string &error);
  bool lowerSplit(std::string &error);
  bool lowerSlice(std::string &error);
  bool lowerSliceGrad(std::string &error);
  bool lowerPad(std::string &error);
  bool lowerGatherGrad(std::string &error);
  bool lowerTile(std::string &error);
  bool sliceGeometry(const std::vector<int64_t> &shape, int64_t &offset,
                     std::vector<int64_t> &strides, std::string &error) const;
  bool requireIndices(const Operand &ind, std::string &error) const;
  bool lowerGather(std::string &error);
  bool lowerGatherElements(std::string &error);
  bool lowerElementwise(FusedOp op, std::string &error);
  bool lowerMatMul(std::string &error);
  bool lowerGemm(std::string &error);
  bool lowerReduce(ReduceOp op, std::string &error);
  bool lowerGlobalPool(bool isMax, std::string &error);
  bool lowerSoftmax(SoftOp op, std::string &error);
  bool lowerLayerNorm(std::string &error);
  bool lowerLayerNormGrad(std::string &error);
  bool lowerBatchNorm(bool grad, std::string &error);
  bool lowerLoss(bool softmax, std::string &error);
  bool lossGeometry(const Operand &scores, const Operand &target, LossArgs &l,
                    std::string &error);
  bool lowerLossGrad(bool softmax, std::string &error);
  bool lowerPool(bool isMax, std::string &error);
  bool lowerMaxPoolGrad(std::string &error);
  bool lowerAveragePoolGrad(std::string &error);
  bool lowerConv(std::string &error);
  bool lowerConvGrad(std::string &error);
  bool lowerAllFinite(std::string &error);
  bool lowerAdamW(std::string &error);
  bool lowerDropout(std::string &error);
  bool lowerDropoutGrad(std::string &error);
  bool constantScalar(size_t i, double dflt, double &v, std::string &error) const;
  bool isConstantOperand(size_t i) const;
  bool dropoutParams(size_t ratioAt, DropoutArgs &a, std::string &error) const;

private:
  bool window(const std::vector<int64_t> &xShape, const std::vector<int64_t> &yShape,
              const std::vector<int64_t> &kernel, Window &w, std::string &error) const;
  void reduce(const Operand &src, const std::vector<bool> &reduced, ReduceOp op, void *dst,
              uint8_t dstType);

  const plan::Plan &p_;
  const plan::Step &step_;
  const DeviceMemory &mem_;
  std::vector<Launch> &out_;
  int index_;
  Scratch ws_;
  std::vector<Operand> in_, outs_;
};

//===----------------------------------------------------------------------===//
// Fused elementwise programs
//===----------------------------------------------------------------------===//

bool StepLowering::lowerFused(std::string &error) {
  const plan::FusedProgram &fp = step_.fused();
  if (outs_.empty() || fp.results_size() != static_cast<int>(outs_.size()) ||
      fp.num_inputs() != static_cast<int>(in_.size())) {
    error = "malformed fused program";
    return false;
  }
  const std::vector<int64_t> &shape = outs_.front().shape;
  for (const Operand &o : outs_)
    if (o.shape != shape) {
      error = "fused outputs differ in shape";
      return false;
    }
  if (static_cast<int>(in_.size()) > FusedArgs::kMaxInputs ||
      fp.instructions_size() > FusedArgs::kMaxInstrs ||
      static_cast<int>(outs_.size()) > FusedArgs::kMaxOutputs ||
      static_cast<int>(shape.size()) > FusedArgs::kRank) {
    error = "the fused step exceeds the CUDA kernel's limits (" +
            std::to_string(FusedArgs::kMaxInputs) + " inputs, " +
            std::to_string(FusedArgs::kMaxInstrs) + " instructions, " +
            std::to_string(FusedArgs::kMaxOutputs) + " outputs, rank " +
            std::to_string(FusedArgs::kRank) + ")";
    return false;
  }
  FusedArgs f;
  f.rank = static_cast<int>(shape.size());
  for (int d = 0; d < f.rank; ++d)
    f.shape[d] = shape[d];
  f.numInputs = static_cast<int>(in_.size());
  for (size_t i = 0; i < in_.size(); ++i) {
    const Operand &x = in_[i];
    if (!x.present() || x.shape.size() > shape.size()) {
      error = "input " + std::to_string(i) + " does not broadcast to the result";
      return false;
    }
    FusedArgs::Input &fi = f.in[i];
    fi.p = x.p;
    fi.type = x.type;
    f.wide = f.wide || x.type == FusedElem::F64;
    if (x.shape == shape) {
      fi.kind = FusedArgs::Contiguous;
    } else if (x.numel == 1) {
      fi.kind = FusedArgs::Scalar;
    } else {
      fi.kind = FusedArgs::Strided;
      for (int64_t &st : fi.strides)
        st = 0; // broadcast over the leading dims
      size_t lead = shape.size() - x.shape.size();
      int64_t stride = 1;
      for (size_t d = x.shape.size(); d-- > 0;) {
        if (x.shape[d] != 1 && x.shape[d] != shape[d + lead]) {
          error = "input " + std::to_string(i) + " does not broadcast to the result";
          return false;
        }
        fi.strides[d + lead] = x.shape[d] == 1 ? 0 : stride;
        stride *= x.shape[d];
      }
    }
  }
  int regs = fp.num_inputs();
  f.numInstrs = fp.instructions_size();
  for (int j = 0; j < fp.instructions_size(); ++j) {
    const plan::Instruction &pi = fp.instructions(j);
    FusedArgs::Instr &in = f.ins[j];
    DecodedInstruction d;
    if (!decodeFusedInstruction(pi, regs, d, error))
      return false;
    in.op = d.op;
    in.a = static_cast<uint8_t>(d.args[0]);
    in.b = static_cast<uint8_t>(d.args[1]);
    in.c = static_cast<uint8_t>(d.args[2]);
    in.type = static_cast<uint8_t>(pi.type());
    in.params = d.params;
    f.wide = f.wide || pi.type() == plan::F64;
    ++regs;
  }
  f.numOutputs = static_cast<int>(outs_.size());
  for (size_t o = 0; o < outs_.size(); ++o) {
    int r = fp.results(static_cast<int>(o));
    if (r < 0 || r >= regs) {
      error = "fused result names an undefined register";
      return false;
    }
    f.out[o] = {outs_[o].present() ? outs_[o].p : nullptr, outs_[o].type, static_cast<uint8_t>(r)};
  }
  kernel(KernelKind::Fused, f, outs_.front().numel);
  return true;
}

/// An elementwise op left unfused (Cast, Where, Clip, ...): a fused program
/// of one instruction. Integer arithmetic would go through fp32 registers, so
/// only float and bool operands are taken, and Cast between a float type and
/// an integer type (exactly what the CPU's conversions do).
bool StepLowering::lowerElementwise(FusedOp op, std::string &error) {
  Operand y = output(0);
  if (!y.present() || outs_.size() != 1) {
    error = "expects one result";
    return false;
  }
  auto isInt = [](uint8_t t) { return t != FusedElem::BOOL && !isFloat(t) && t != FusedElem::F64; };
  bool intIn = false;
  for (const Operand &x : in_)
    intIn = intIn || (x.present() && isInt(x.type));
  if ((op == FusedOp::Cast && intIn && isInt(y.type)) ||
      (op != FusedOp::Cast && (intIn || isInt(y.type)))) {
    error = "integer elementwise steps are not supported by the CUDA backend";
    return false;
  }
  FusedArgs f;
  if (y.rank() > FusedArgs::kRank || in_.size() > 3) {
    error = "rank above " + std::to_string(FusedArgs::kRank);
    return false;
  }
  f.rank = y.rank();
  for (int d = 0; d < f.rank; ++d)
    f.shape[d] = y.shape[d];
  uint8_t args[3] = {0, 0, 0};
  for (size_t i = 0; i < in_.size(); ++i) {
    const Operand &x = in_[i];
    if (!x.present())
      continue;
    if (x.shape.size() > y.shape.size()) {
      error = "operand " + std::to_string(i) + " does not broadcast to the result";
      return false;
    }
    FusedArgs::Input &fi = f.in[f.numInputs];
    fi.p = x.p;
    fi.type = x.type;
    f.wide = f.wide || x.type == FusedElem::F64;
    if (x.shape == y.shape) {
      fi.kind = FusedArgs::Contiguous;
    } else if (x.numel == 1) {
      fi.kind = FusedArgs::Scalar;
    } else {
      fi.kind = FusedArgs::Strided;
      size_t lead = y.shape.size() - x.shape.size();
      int64_t stride = 1;
      for (size_t d = x.shape.size(); d-- > 0;) {
        if (x.shape[d] != 1 && x.shape[d] != y.shape[d + lead]) {
          error = "operand " + std::to_string(i) + " does not broadcast to the result";
          return false;
        }
        fi.strides[d + lead] = x.shape[d] == 1 ? 0 : stride;
        stride *= x.shape[d];
      }
    }
    args[i] = static_cast<uint8_t>(f.numInputs++);
  }
  if (f.numInputs == 0) {
    error = "missing operands";
    return false;
  }
  FusedArgs::Instr &in = f.ins[0];
  f.numInstrs = 1;
  in.op = op;
  in.type = y.type;
  in.a = args[0];
  in.b = args[1];
  in.c = args[2];
  f.wide = f.wide || y.type == FusedElem::F64;
  in.params = fused::fusedDefaults(op);
  in.params.alpha = static_cast<float>(attrFloat("alpha", in.params.alpha));
  in.params.beta = static_cast<float>(attrFloat("beta", in.params.beta));
  in.params.gamma = static_cast<float>(attrFloat("gamma", in.params.gamma));
  in.params.detectPos = attrInt("detect_positive", 1) != 0;
  in.params.detectNeg = attrInt("detect_negative", 1) != 0;
  in.params.hasMin = has(1);
  in.params.hasMax = has(2);
  f.numOutputs = 1;
  f.out[0] = {y.p, y.type, static_cast<uint8_t>(f.numInputs)};
  kernel(KernelKind::Fused, f, y.numel);
  return true;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

/// Reshape-like steps that are not views: the bytes, unchanged.
bool StepLowering::lowerCopyLike(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.numel != y.numel || x.type != y.type) {
    error = "expects one operand and a result of the same type and size";
    return false;
  }
  memcpy(y.p, x.p, static_cast<size_t>(y.numel) * y.elemBytes());
  return true;
}

/// Fills a strided copy; dims of size 1 are dropped. Rank above kMaxRank
/// leaves c.rank = kMaxRank + 1 (callers report it).
void addCopy(std::vector<int64_t> shape, std::vector<int64_t> srcStrides,
             std::vector<int64_t> dstStrides, const void *src, void *dst, int elemBytes,
             CopyArgs &c) {
  c.src = src;
  c.dst = dst;
  c.elemBytes = elemBytes;
  c.rank = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    if (c.rank == kMaxRank) {
      c.rank = kMaxRank + 1;
      return;
    }
    c.shape[c.rank] = shape[d];
    c.srcStrides[c.rank] = srcStrides[d];
    c.dstStrides[c.rank] = dstStrides[d];
    ++c.rank;
  }
}

bool StepLowering::copyKernel(const std::vector<int64_t> &shape,
                              const std::vector<int64_t> &srcStrides,
                              const std::vector<int64_t> &dstStrides, const void *src, void *dst,
                              size_t elemBytes, std::string &error) {
  CopyArgs c;
  addCopy(shape, srcStrides, dstStrides, src, dst, static_cast<int>(elemBytes), c);
  if (c.rank > kMaxRank) {
    error = "rank above " + std::to_string(kMaxRank);
    return false;
  }
  int64_t numel = 1;
  for (int64_t d : shape)
    numel *= d;
  kernel(KernelKind::Copy, c, numel);
  return true;
}

bool StepLowering::lowerTranspose(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.type != y.type || x.numel != y.numel) {
    error = "Transpose takes one operand and a result of its type";
    return false;
  }
  int r = x.rank();
  std::vector<int64_t> perm = attrInts("perm");
  if (perm.empty())
    for (int d = r - 1; d >= 0; --d)
      perm.push_back(d);
  if (static_cast<int>(perm.size()) != r || y.rank() != r) {
    error = "perm does not match the rank";
    return false;
  }
  std::vector<int64_t> xs = stridesOf(x.shape), src(r);
  for (int d = 0; d < r; ++d) {
    int64_t a = normalizeAxis(perm[d], r);
    if (a < 0 || y.shape[d] != x.shape[a]) {
      error = "perm does not match the shapes";
      return false;
    }
    src[d] = xs[a];
  }
  return copyKernel(y.shape, src, stridesOf(y.shape), x.p, y.p, x.elemBytes(), error);
}

bool StepLowering::lowerExpand(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.type != y.type || x.rank() > y.rank()) {
    error = "Expand: the operand does not broadcast to the result";
    return false;
  }
  size_t lead = y.shape.size() - x.shape.size();
  std::vector<int64_t> xs = stridesOf(x.shape), src(y.shape.size(), 0);
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (x.shape[d] != 1 && x.shape[d] != y.shape[d + lead]) {
      error = "Expand: " + argString(x) + " does not broadcast to " + argString(y);
      return false;
    }
    src[d + lead] = x.shape[d] == 1 ? 0 : xs[d];
  }
  return copyKernel(y.shape, src, stridesOf(y.shape), x.p, y.p, x.elemBytes(), error);
}

bool StepLowering::lowerConcat(std::string &error) {
  Operand y = output(0);
  if (!y.present() || in_.empty()) {
    error = "Concat takes operands and a result";
    return false;
  }
  int64_t axis = normalizeAxis(attrInt("axis", 0), y.rank());
  if (axis < 0) {
    error = "axis out of range";
    return false;
  }
  std::vector<int64_t> ys = stridesOf(y.shape);
  int64_t at = 0;
  for (const Operand &x : in_) {
    if (!x.present() || x.type != y.type || x.rank() != y.rank()) {
      error = "Concat operands must share the result's type and rank";
      return false;
    }
    if (!copyKernel(x.shape, stridesOf(x.shape), ys, x.p, y.at(at * ys[axis]), x.elemBytes(),
                    error))
      return false;
    at += x.shape[axis];
  }
  if (at != y.shape[axis]) {
    error = "operand sizes do not add up to the result";
    return false;
  }
  return true;
}

bool StepLowering::lowerSplit(std::string &error) {
  Operand x = input(0);
  if (!x.present() || outs_.empty()) {
    error = "Split takes an operand and results";
    return false;
  }
  int64_t axis = normalizeAxis(attrInt("axis", 0), x.rank());
  if (axis < 0) {
    error = "axis out of range";
    return false;
  }
  std::vector<int64_t> xs = stridesOf(x.shape);
  int64_t at = 0;
  for (const Operand &y : outs_) {
    if (!y.present()) {
      error = "Split results must all be present";
      return false;
    }
    if (y.type != x.type || y.rank() != x.rank()) {
      error = "Split results must share the operand's type and rank";
      return false;
    }
    if (!copyKernel(y.shape, xs, stridesOf(y.shape), x.at(at * xs[axis]), y.p, x.elemBytes(),
                    error))
      return false;
    at += y.shape[axis];
  }
  if (at != x.shape[axis]) {
    error = "result sizes do not add up to the operand";
    return false;
  }
  return true;
}

/// Slice with constant starts, ends, axes and steps (ONNX clamping rules).
/// Where a Slice (or its gradient) reads in the sliced tensor of shape
/// `shape`: the first element's offset and each axis's stride there.
bool StepLowering::sliceGeometry(const std::vector<int64_t> &shape, int64_t &offset,
                                 std::vector<int64_t> &strides, std::string &error) const {
  std::vector<int64_t> starts, ends, axes, steps;
  if (!constantInts(1, starts, error) || !constantInts(2, ends, error))
    return false;
  if (has(3)) {
    if (!constantInts(3, axes, error))
      return false;
  } else {
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(static_cast<int64_t>(i));
  }
  if (has(4)) {
    if (!constantInts(4, steps, error))
      return false;
  } else {
    steps.assign(starts.size(), 1);
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    error = "starts, ends, axes and steps differ in length";
    return false;
  }
  int r = static_cast<int>(shape.size());
  std::vector<int64_t> xs = stridesOf(shape), begin(r, 0), step(r, 1);
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = normalizeAxis(axes[i], r);
    if (a < 0 || steps[i] == 0) {
      error = "bad axis or zero step";
      return false;
    }
    int64_t dim = shape[a], s = starts[i];
    if (s < 0)
      s += dim;
    s = steps[i] > 0 ? std::clamp<int64_t>(s, 0, dim) : std::clamp<int64_t>(s, 0, dim - 1);
    begin[a] = s;
    step[a] = steps[i];
  }
  offset = 0;
  strides.assign(r, 0);
  for (int d = 0; d < r; ++d) {
    offset += begin[d] * xs[d];
    strides[d] = xs[d] * step[d];
  }
  return true;
}

bool StepLowering::lowerSlice(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.type != y.type || x.rank() != y.rank()) {
    error = "Slice takes an operand and a result of its type and rank";
    return false;
  }
  int64_t offset;
  std::vector<int64_t> src;
  if (!sliceGeometry(x.shape, offset, src, error))
    return false;
  return copyKernel(y.shape, src, stridesOf(y.shape), x.at(offset), y.p, x.elemBytes(), error);
}

/// Tile: one strided copy over Y viewed as [r0, d0, r1, d1, ...], reading X
/// with stride 0 along the repeat axes.
bool StepLowering::lowerTile(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.type != y.type || x.rank() != y.rank()) {
    error = "Tile takes an operand and a result of its type and rank";
    return false;
  }
  std::vector<int64_t> repeats;
  if (!constantInts(1, repeats, error))
    return false;
  if (static_cast<int>(repeats.size()) != x.rank()) {
    error = "repeats must hold one entry per axis";
    return false;
  }
  std::vector<int64_t> xs = stridesOf(x.shape), ys = stridesOf(y.shape), shape, src, dst;
  for (int d = 0; d < x.rank(); ++d) {
    if (repeats[d] < 0 || x.shape[d] * repeats[d] != y.shape[d]) {
      error = "the result's shape is not the operand's times repeats";
      return false;
    }
    shape.insert(shape.end(), {repeats[d], x.shape[d]});
    src.insert(src.end(), {0, xs[d]});
    dst.insert(dst.end(), {x.shape[d] * ys[d], ys[d]});
  }
  if (y.numel == 0)
    return true;
  return copyKernel(shape, src, dst, x.p, y.p, x.elemBytes(), error);
}

/// dX of a Slice: zeros, and dY copied to the elements the slice read (a
/// slice never reads an element twice).
bool StepLowering::lowerSliceGrad(std::string &error) {
  Operand dy = input(0), dx = output(0);
  if (!dy.present() || !dx.present() || dy.type != dx.type || dy.rank() != dx.rank()) {
    error = "SliceGrad takes dY and a result of its type and rank";
    return false;
  }
  int64_t offset;
  std::vector<int64_t> dst;
  if (!sliceGeometry(dx.shape, offset, dst, error))
    return false;
  memset0(dx.p, static_cast<size_t>(dx.numel) * dx.elemBytes());
  if (dy.numel == 0)
    return true;
  return copyKernel(dy.shape, stridesOf(dy.shape), dst, dy.p, dx.at(offset), dx.elemBytes(),
                    error);
}

/// Pad, mode constant, pads >= 0: the constant everywhere, then X copied
/// into the interior.
bool StepLowering::lowerPad(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.type != y.type || x.rank() != y.rank()) {
    error = "Pad takes an operand and a result of its type and rank";
    return false;
  }
  math::PadMode mode;
  if (!math::padModeByName(attrString("mode", "constant"), mode)) {
    error = "unknown mode '" + attrString("mode", "constant") + "'";
    return false;
  }
  int r = x.rank();
  if (r > kMaxRank) {
    error = "rank above " + std::to_string(kMaxRank);
    return false;
  }
  std::vector<int64_t> pads;
  if (!constantInts(1, pads, error))
    return false;
  std::vector<int64_t> axes(r);
  for (int d = 0; d < r; ++d)
    axes[d] = d;
  if (has(3) && !constantInts(3, axes, error))
    return false;
  if (pads.size() != 2 * axes.size()) {
    error = "pads do not match the axes";
    return false;
  }
  std::vector<int64_t> before(r, 0), after(r, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t d = normalizeAxis(axes[i], r);
    if (d < 0) {
      error = "axis out of range";
      return false;
    }
    before[d] = pads[i];
    after[d] = pads[axes.size() + i];
  }
  bool cropsOrCopies = mode != math::PadMode::Constant;
  for (int d = 0; d < r; ++d) {
    if (x.shape[d] + before[d] + after[d] != y.shape[d]) {
      error = "result " + argString(y) + " does not match the pads";
      return false;
    }
    cropsOrCopies = cropsOrCopies || before[d] < 0 || after[d] < 0;
  }
  Operand value = has(2) ? input(2) : Operand();
  if (value.present() && (value.type != y.type || value.numel != 1)) {
    error = "the pad value must be a scalar of the result's type";
    return false;
  }
  std::vector<int64_t> ys = stridesOf(y.shape);
  if (!cropsOrCopies) {
    // Constant padding: fill, then one strided copy of X into the middle.
    if (value.present()) {
      if (!copyKernel(y.shape, std::vector<int64_t>(r, 0), ys, value.p, y.p, y.elemBytes(), error))
        return false;
    } else {
      memset0(y.p, static_cast<size_t>(y.numel) * y.elemBytes());
    }
    if (x.numel == 0)
      return true;
    int64_t offset = 0;
    for (int d = 0; d < r; ++d)
      offset += before[d] * ys[d];
    return copyKernel(x.shape, stridesOf(x.shape), ys, x.p, y.at(offset), y.elemBytes(), error);
  }
  // Edge, reflect, wrap, or cropping: every result element finds its source.
  PadArgs p;
  p.x = x.p;
  p.value = value.present() ? value.p : nullptr;
  p.y = y.p;
  p.elemBytes = static_cast<int>(y.elemBytes());
  p.rank = r;
  p.mode = mode;
  std::vector<int64_t> xs = stridesOf(x.shape);
  for (int d = 0; d < r; ++d) {
    p.yShape[d] = y.shape[d];
    p.xShape[d] = x.shape[d];
    p.xStrides[d] = xs[d];
    p.before[d] = before[d];
  }
  if (y.numel > 0)
    kernel(KernelKind::Pad, p, y.numel);
  return true;
}

/// Gather, GatherElements and GatherGrad take int64 or int32 indices.
bool StepLowering::requireIndices(const Operand &ind, std::string &error) const {
  if (ind.type == FusedElem::I64 || ind.type == FusedElem::I32)
    return true;
  error = "indices must be int64 or int32";
  return false;
}

bool StepLowering::lowerGather(std::string &error) {
  Operand x = input(0), ind = input(1), y = output(0);
  if (!x.present() || !ind.present() || !y.present() || x.type != y.type) {
    error = "Gather takes data and indices and a result of the data's type";
    return false;
  }
  if (!requireIndices(ind, error))
    return false;
  int64_t axis = normalizeAxis(attrInt("axis", 0), x.rank());
  if (axis < 0) {
    error = "axis out of range";
    return false;
  }
  GatherArgs g;
  g.x = x.p;
  g.indices = ind.p;
  g.y = y.p;
  g.indexType = ind.type;
  g.elemBytes = static_cast<int>(x.elemBytes());
  g.n = ind.numel;
  g.dim = x.shape[axis];
  g.inner = product(x.shape, axis + 1);
  if (y.numel != product(x.shape, 0, axis) * g.n * g.inner) {
    error = "result does not match the indices";
    return false;
  }
  kernel(KernelKind::Gather, g, y.numel);
  return true;
}

bool StepLowering::lowerGatherElements(std::string &error) {
  Operand x = input(0), ind = input(1), y = output(0);
  if (!x.present() || !ind.present() || !y.present() || x.type != y.type ||
      ind.shape != y.shape || ind.rank() != x.rank()) {
    error = "GatherElements takes data and indices of its rank, and a result shaped like the "
            "indices";
    return false;
  }
  if (!requireIndices(ind, error))
    return false;
  int64_t axis = normalizeAxis(attrInt("axis", 0), x.rank());
  if (axis < 0 || x.rank() > kMaxRank) {
    error = "axis out of range or rank above " + std::to_string(kMaxRank);
    return false;
  }
  for (int d = 0; d < x.rank(); ++d)
    if (d != axis && ind.shape[d] > x.shape[d]) {
      error = "the indices reach beyond the data off the gathered axis";
      return false;
    }
  GatherElementsArgs g;
  g.x = x.p;
  g.indices = ind.p;
  g.y = y.p;
  g.indexType = ind.type;
  g.elemBytes = static_cast<int>(x.elemBytes());
  g.rank = x.rank();
  g.axis = static_cast<int>(axis);
  g.dim = x.shape[axis];
  std::vector<int64_t> strides = stridesOf(x.shape);
  for (int d = 0; d < g.rank; ++d) {
    g.yShape[d] = y.shape[d];
    g.xStrides[d] = strides[d];
  }
  kernel(KernelKind::GatherElements, g, y.numel);
  return true;
}

bool StepLowering::lowerGatherGrad(std::string &error) {
  Operand dy = input(0), ind = input(1), dx = output(0);
  if (!dy.present() || !ind.present() || !dx.present()) {
    error = "GatherGrad takes dY and indices";
    return false;
  }
  if (!requireFloat({0}, {0}, error))
    return false;
  if (!requireIndices(ind, error))
    return false;
  int64_t axis = normalizeAxis(attrInt("axis", 0), dx.rank());
  if (axis < 0) {
    error = "axis out of range";
    return false;
  }
  GatherGradArgs g;
  g.dy = dy.p;
  g.indices = ind.p;
  g.dx = dx.p;
  g.indexType = ind.type;
  g.dyType = dy.type;
  g.dxType = dx.type;
  g.n = ind.numel;
  g.dim = dx.shape[axis];
  g.inner = product(dx.shape, axis + 1);
  int64_t outer = product(dx.shape, 0, axis);
  if (dy.numel != outer * g.n * g.inner) {
    error = "dY does not match the indices and shape";
    return false;
  }
  g.acc = dx.type == FusedElem::F32 ? static_cast<float *>(dx.p) : ws_.alloc<float>(dx.numel);
  if (outer * g.inner == 0) {
    memset0(dx.p, static_cast<size_t>(dx.numel) * dx.elemBytes());
    return true;
  }
  // Zeroing and narrowing are launches of their own: inside the per-column
  // threads they were serial over the whole table (V rows for an Embedding).
  memset0(g.acc, static_cast<size_t>(dx.numel) * sizeof(float));
  kernel(KernelKind::GatherGrad, g, outer * g.inner);
  if (static_cast<void *>(g.acc) != dx.p) {
    g.convert = true;
    kernel(KernelKind::GatherGrad, g, dx.numel);
  }
  return true;
}

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

bool sameFloatTypes(const std::vector<Operand> &ops, const Operand &y, std::string &error) {
  if (!isFloat(y.type)) {
    error = "expects float, float16 or bfloat16 results, got " + argString(y);
    return false;
  }
  for (const Operand &o : ops)
    if (o.present() && o.type != y.type) {
      error = "operand types differ: " + argString(o) + " and result " + argString(y);
      return false;
    }
  return true;
}

bool StepLowering::lowerMatMul(std::string &error) {
  Operand a = input(0), b = input(1), y = output(0);
  if (!a.present() || !b.present() || !y.present()) {
    error = "MatMul takes two operands";
    return false;
  }
  if (!sameFloatTypes({a, b}, y, error))
    return false;
  // transA / transB: the operand is stored with its last two axes exchanged
  // (the lowering folded a Transpose into the MatMul); cuBLAS reads it so.
  bool ta = attrInt("transA", 0) != 0, tb = attrInt("transB", 0) != 0;
  if ((ta && a.rank() < 2) || (tb && b.rank() < 2)) {
    error = "a transposed MatMul operand needs rank 2 or more";
    return false;
  }
  auto swapLastTwo = [](std::vector<int64_t> s) {
    if (s.size() >= 2)
      std::swap(s[s.size() - 1], s[s.size() - 2]);
    return s;
  };
  MatMulShape shape;
  if (!matMulShape(ta ? swapLastTwo(a.shape) : a.shape, tb ? swapLastTwo(b.shape) : b.shape,
                   y.numel, argString(a), argString(b), argString(y), shape, error))
    return false;
  int64_t M = shape.M, K = shape.K, N = shape.N, nb = product(shape.batch);
  const std::vector<int64_t> &ba = shape.batchA, &bb = shape.batchB, &batch = shape.batch;
  size_t r = batch.size();
  if (y.numel == 0)
    return true;
  if (K == 0) {
    memset0(y.p, static_cast<size_t>(y.numel) * y.elemBytes());
    return true;
  }
  auto call = [&](int64_t rows, const void *A, const void *B, void *Y, int64_t count,
                  int64_t sA, int64_t sB, int64_t sY) {
    GemmCall g = rowMajorGemm(rows, N, K, A, ta ? rows : K, ta, B, tb ? K : N, tb, Y, N);
    g.batch = count;
    g.strideA = sB; // operands swap in the column-major call
    g.strideB = sA;
    g.strideC = sY;
    g.abType = y.type;
    g.cType = y.type;
    gemm(g);
  };
  int64_t pa = product(ba), pb = product(bb);
  if (pb == 1 && !(ta && pa != 1)) {
    // B has no batch: fold A's batch into the rows (one GEMM).
    call(pa * M, a.p, b.p, y.p, 1, 0, 0, 0);
    return true;
  }
  if ((pa == 1 || ba == batch) && bb == batch) {
    call(M, a.p, b.p, y.p, nb, pa == 1 ? 0 : M * K, K * N, M * N);
    return true;
  }
  // Mixed broadcasting: one GEMM per result batch index.
  std::vector<int64_t> sa = stridesOf(ba), sb = stridesOf(bb), idx(r, 0);
  for (int64_t i = 0; i < nb; ++i) {
    int64_t rem = i, offA = 0, offB = 0;
    for (size_t d = r; d-- > 0;) {
      int64_t x = rem % batch[d];
      rem /= batch[d];
      offA += (ba[d] == 1 ? 0 : x) * sa[d];
      offB += (bb[d] == 1 ? 0 : x) * sb[d];
    }
    call(M, a.at(offA * M * K), b.at(offB * K * N), y.at(i * M * N), 1, 0, 0, 0);
  }
  return true;
}

bool StepLowering::lowerGemm(std::string &error) {
  Operand a = input(0), b = input(1), c = input(2), y = output(0);
  if (!a.present() || !b.present() || !y.present()) {
    error = "Gemm takes two or three operands";
    return false;
  }
  if (!sameFloatTypes({a, b, c}, y, error))
    return false;
  if (a.rank() != 2 || b.rank() != 2) {
    error = "Gemm operands must be matrices: " + argString(a) + ", " + argString(b);
    return false;
  }
  bool ta = attrInt("transA", 0) != 0, tb = attrInt("transB", 0) != 0;
  int64_t M = ta ? a.shape[1] : a.shape[0], K = ta ? a.shape[0] : a.shape[1];
  int64_t N = tb ? b.shape[0] : b.shape[1];
  if ((tb ? b.shape[1] : b.shape[0]) != K) {
    error = "inner dimensions differ: " + argString(a) + " x " + argString(b);
    return false;
  }
  if (y.numel != M * N) {
    error = "result " + argString(y) + " does not match the operands";
    return false;
  }
  float alpha = static_cast<float>(attrFloat("alpha", 1.0));
  float beta = static_cast<float>(attrFloat("beta", 1.0));
  if (y.numel == 0)
    return true;
  if (c.present()) {
    // C broadcast into Y, then Y = alpha * AB + beta * Y (one rounding).
    std::vector<int64_t> cs = c.shape;
    if (cs.size() > 2) {
      error = "C must have rank <= 2: " + argString(c);
      return false;
    }
    cs.insert(cs.begin(), 2 - cs.size(), 1);
    if ((cs[0] != 1 && cs[0] != M) || (cs[1] != 1 && cs[1] != N)) {
      error = "C " + argString(c) + " does not broadcast to [" + std::to_string(M) + "," +
              std::to_string(N) + "]";
      return false;
    }
    CopyArgs cp;
    addCopy({M, N}, {cs[0] == 1 ? 0 : cs[1], cs[1] == 1 ? 0 : 1}, {N, 1}, c.p, y.p,
            static_cast<int>(y.elemBytes()), cp);
    kernel(KernelKind::Copy, cp, M * N);
  } else {
    beta = 0;
  }
  if (K == 0) {
    // alpha * 0 + beta * C.
    if (!c.present()) {
      memset0(y.p, static_cast<size_t>(y.numel) * y.elemBytes());
    } else if (beta != 1.0f) {
      error = "Gemm with an empty inner dimension and beta != 1 is not supported on CUDA";
      return false;
    }
    return true;
  }
  GemmCall g = rowMajorGemm(M, N, K, a.p, ta ? M : K, ta, b.p, tb ? K : N, tb, y.p, N);
  g.abType = y.type;
  g.cType = y.type;
  g.alpha = alpha;
  g.beta = beta;
  gemm(g);
  return true;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

void StepLowering::reduce(const Operand &src, const std::vector<bool> &reduced, ReduceOp op,
                          void *dst, uint8_t dstType) {
  ReduceArgs r;
  if (op == ReduceOp::LogSumExp) {
    // Shifted by each result's maximum, as the CPU kernel does, so that the
    // exponentials cannot overflow.
    int64_t outputs = 1;
    for (size_t d = 0; d < src.shape.size(); ++d)
      if (!reduced[d])
        outputs *= src.shape[d];
    float *maxima = ws_.alloc<float>(std::max<int64_t>(outputs, 1));
    reduce(src, reduced, ReduceOp::Max, maxima, FusedElem::F32);
    r.shift = maxima;
  }
  r.src = src.p;
  r.srcType = src.type;
  r.dst = dst;
  r.dstType = dstType;
  r.op = op;
  std::vector<int64_t> st = stridesOf(src.shape);
  int64_t outputs = 1;
  for (size_t d = 0; d < src.shape.size(); ++d) {
    if (src.shape[d] == 1)
      continue;
    if (reduced[d]) {
      r.redShape[r.redRank] = src.shape[d];
      r.redStrides[r.redRank++] = st[d];
      r.count *= src.shape[d];
    } else {
      r.keptShape[r.keptRank] = src.shape[d];
      r.keptStrides[r.keptRank++] = st[d];
      outputs *= src.shape[d];
    }
  }
  // Long reductions with few results: per-chunk partials, then a combine.
  constexpr int64_t kChunk = 4096;
  if (r.count > 2 * kChunk && outputs < 65536) {
    r.chunk = kChunk;
    r.chunks = (r.count + kChunk - 1) / kChunk;
    r.partial = ws_.alloc<float>(outputs * r.chunks);
  } else {
    r.chunk = std::max<int64_t>(r.count, 1);
    r.chunks = 1;
  }
  kernel(KernelKind::Reduce, r, outputs * r.chunks);
  if (r.chunks > 1) {
    r.phase = 1;
    kernel(KernelKind::Reduce, r, outputs);
  }
}

bool StepLowering::lowerReduce(ReduceOp op, std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || !isFloat(x.type) || !isFloat(y.type)) {
    error = "the CUDA reductions take float, float16 or bfloat16 operands";
    return false;
  }
  std::vector<int64_t> axes;
  bool fromInput = has(1);
  if (fromInput) {
    if (!constantInts(1, axes, error))
      return false;
  } else {
    axes = attrInts("axes");
  }
  int r = x.rank();
  if (r > kMaxRank) {
    error = "rank above " + std::to_string(kMaxRank);
    return false;
  }
  std::vector<bool> reduced(r, false);
  if (axes.empty()) {
    if (attrInt("noop_with_empty_axes", 0) != 0) {
      // The identity (with the op's elementwise part: squares, abs, ...).
      if (op == ReduceOp::Sum || op == ReduceOp::Mean || op == ReduceOp::Max ||
          op == ReduceOp::Min || op == ReduceOp::Prod) {
        FusedArgs f = convertArgs(x.p, x.type, y);
        kernel(KernelKind::Fused, f, y.numel);
        return true;
      }
      reduce(x, reduced, op, y.p, y.type); // count 1: v^2, |v|, sqrt(v^2)
      return true;
    }
    reduced.assign(r, true);
  }
  for (int64_t a : axes) {
    int64_t n = normalizeAxis(a, r);
    if (n < 0) {
      error = "axis " + std::to_string(a) + " out of range for " + argString(x);
      return false;
    }
    reduced[n] = true;
  }
  int64_t outputs = 1;
  for (int d = 0; d < r; ++d)
    if (!reduced[d])
      outputs *= x.shape[d];
  if (outputs != y.numel) {
    error = "result " + argString(y) + " does not match the reduction of " + argString(x);
    return false;
  }
  reduce(x, reduced, op, y.p, y.type);
  return true;
}

bool StepLowering::lowerGlobalPool(bool isMax, std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !y.present() || x.rank() < 2 || !isFloat(x.type) || x.type != y.type ||
      y.numel != x.shape[0] * x.shape[1]) {
    error = "global pooling takes X [N, C, ...] and Y [N, C, 1...] of its type";
    return false;
  }
  std::vector<bool> reduced(x.rank(), true);
  reduced[0] = reduced[1] = false;
  reduce(x, reduced, isMax ? ReduceOp::Max : ReduceOp::Mean, y.p, y.type);
  return true;
}

//===----------------------------------------------------------------------===//
// Softmax, normalization, losses
//===----------------------------------------------------------------------===//

bool StepLowering::lowerSoftmax(SoftOp op, std::string &error) {
  bool grad = op == SoftOp::SoftmaxGrad || op == SoftOp::LogSoftmaxGrad;
  Operand x = input(0), yv = grad ? input(1) : Operand(), y = output(0);
  if (!x.present() || (grad && !yv.present()) || !y.present()) {
    error = "missing operands";
    return false;
  }
  if (!requireFloat({0, 1}, {0}, error))
    return false;
  if (y.shape != x.shape || (grad && yv.shape != x.shape)) {
    error = "operands and result must share their shape";
    return false;
  }
  int64_t axis = normalizeAxis(attrInt("axis", -1), x.rank());
  if (axis < 0) {
    error = "axis out of range for " + argString(x);
    return false;
  }
  SoftmaxArgs s;
  s.x = x.p;
  s.xType = x.type;
  s.y = yv.p;
  s.yType = yv.type;
  s.out = y.p;
  s.outType = y.type;
  s.op = op;
  s.len = x.shape[axis];
  s.inner = product(x.shape, axis + 1);
  int64_t outer = s.len * s.inner != 0 ? x.numel / (s.len * s.inner) : 0;
  kernel(KernelKind::Softmax, s, outer * s.inner);
  return true;
}

bool normParam(const Operand &o, const std::vector<int64_t> &normShape, NormParam &np,
               std::string &error) {
  np.p = o.p;
  np.type = o.type;
  if (o.shape == normShape || o.numel == product(normShape)) {
    np.contiguous = true;
    return true;
  }
  if (o.shape.size() > normShape.size() || normShape.size() > static_cast<size_t>(kMaxRank)) {
    error = argString(o) + " does not broadcast to the normalized shape";
    return false;
  }
  np.contiguous = false;
  np.rank = static_cast<int>(normShape.size());
  size_t lead = normShape.size() - o.shape.size();
  std::vector<int64_t> src = stridesOf(o.shape);
  for (size_t d = 0; d < normShape.size(); ++d) {
    np.shape[d] = normShape[d];
    np.strides[d] = 0;
  }
  for (size_t d = 0; d < o.shape.size(); ++d) {
    if (o.shape[d] != 1 && o.shape[d] != normShape[lead + d]) {
      error = argString(o) + " does not broadcast to the normalized shape";
      return false;
    }
    np.strides[lead + d] = o.shape[d] == 1 ? 0 : src[d];
  }
  return true;
}

bool StepLowering::lowerLayerNorm(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !has(1) || !y.present()) {
    error = "LayerNormalization takes X and Scale";
    return false;
  }
  if (!requireFloat({0, 1, 2}, {0, 1, 2}, error))
    return false;
  int64_t axis = normalizeAxis(attrInt("axis", -1), x.rank());
  if (axis < 0 || y.shape != x.shape) {
    error = "axis out of range or Y not shaped like X";
    return false;
  }
  LayerNormArgs l;
  l.rows = product(x.shape, 0, axis);
  l.inner = product(x.shape, axis);
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  if (!normParam(input(1), normShape, l.scale, error) ||
      (has(2) && !normParam(input(2), normShape, l.bias, error)))
    return false;
  Operand mean = output(1), inv = output(2);
  if ((mean.present() && mean.numel != l.rows) || (inv.present() && inv.numel != l.rows)) {
    error = "Mean and InvStdDev must hold one value per row";
    return false;
  }
  l.x = x.p;
  l.xType = x.type;
  l.y = y.p;
  l.yType = y.type;
  l.mean = mean.p;
  l.meanType = mean.type;
  l.inv = inv.p;
  l.invType = inv.type;
  l.eps = static_cast<float>(attrFloat("epsilon", 1e-5));
  l.phase = 0;
  kernel(KernelKind::LayerNorm, l, l.rows);
  return true;
}

bool StepLowering::lowerLayerNormGrad(std::string &error) {
  for (size_t i = 0; i < 5; ++i)
    if (!has(i)) {
      error = "LayerNormalizationGrad takes dY, X, Scale, Mean and InvStdDev";
      return false;
    }
  if (!requireFloat({0, 1, 2, 3, 4}, {0, 1, 2}, error))
    return false;
  Operand dy = input(0), x = input(1), mean = input(3), inv = input(4);
  int64_t axis = normalizeAxis(attrInt("axis", -1), x.rank());
  if (axis < 0 || dy.shape != x.shape) {
    error = "axis out of range or dY not shaped like X";
    return false;
  }
  LayerNormArgs l;
  l.rows = product(x.shape, 0, axis);
  l.inner = product(x.shape, axis);
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  if (!normParam(input(2), normShape, l.scale, error))
    return false;
  if (mean.numel != l.rows || inv.numel != l.rows) {
    error = "Mean and InvStdDev must hold one value per normalized group";
    return false;
  }
  Operand dx = output(0), dScale = output(1), dBias = output(2);
  if ((dx.present() && dx.shape != x.shape) || (dScale.present() && dScale.numel != l.inner) ||
      (dBias.present() && dBias.numel != l.inner)) {
    error = "gradient shapes do not match";
    return false;
  }
  l.x = x.p;
  l.xType = x.type;
  l.dy = dy.p;
  l.dyType = dy.type;
  l.meanIn = mean.p;
  l.meanInType = mean.type;
  l.invIn = inv.p;
  l.invInType = inv.type;
  l.y = dx.p;
  l.yType = dx.type;
  l.dScale = dScale.p;
  l.dScaleType = dScale.type;
  l.dBias = dBias.p;
  l.dBiasType = dBias.type;
  if (dx.present()) {
    l.phase = 1;
    kernel(KernelKind::LayerNorm, l, l.rows);
  }
  if (dScale.present() || dBias.present()) {
    l.phase = 2;
    kernel(KernelKind::LayerNorm, l, l.inner);
  }
  return true;
}

bool StepLowering::lowerBatchNorm(bool grad, std::string &error) {
  BatchNormArgs b;
  Operand x, y;
  if (!grad) {
    for (size_t i = 0; i < 5; ++i)
      if (!has(i)) {
        error = "BatchNormalization takes X, scale, B, mean and var";
        return false;
      }
    if (!requireFloat({0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, error))
      return false;
    x = input(0);
    y = output(0);
    b.training = attr("training_mode") ? attrInt("training_mode", 0) != 0 : outs_.size() > 1;
    b.bias = input(2).p;
    b.biasType = input(2).type;
    b.runMean = input(3).p;
    b.runMeanType = input(3).type;
    b.runVar = input(4).p;
    b.runVarType = input(4).type;
    if (b.training) {
      Operand o1 = output(1), o2 = output(2), o3 = output(3), o4 = output(4);
      b.outMean = o1.p;
      b.outMeanType = o1.type;
      b.outVar = o2.p;
      b.outVarType = o2.type;
      b.savedMean = o3.p;
      b.savedMeanType = o3.type;
      b.savedInv = o4.p;
      b.savedInvType = o4.type;
    }
    b.momentum = static_cast<float>(attrFloat("momentum", 0.9));
  } else {
    if (!has(0) || !has(1) || !has(2)) {
      error = "BatchNormalizationGrad takes dY, X and Scale";
      return false;
    }
    if (!requireFloat({0, 1, 2, 3, 4}, {0, 1, 2}, error))
      return false;
    x = input(1);
    y = output(0);
    Operand dy = input(0);
    if (dy.shape != x.shape) {
      error = "X must be [N, C, ...] and dY shaped like it";
      return false;
    }
    b.dy = dy.p;
    b.dyType = dy.type;
    b.training = attrInt("training_mode", 1) != 0;
    if (!b.training) {
      if (!has(3) || !has(4)) {
        error = "inference mode needs the running mean and variance";
        return false;
      }
      b.runMean = input(3).p;
      b.runMeanType = input(3).type;
      b.runVar = input(4).p;
      b.runVarType = input(4).type;
    }
    Operand dScale = output(1), dBias = output(2);
    b.dScale = dScale.p;
    b.dScaleType = dScale.type;
    b.dBias = dBias.p;
    b.dBiasType = dBias.type;
  }
  Operand scale = grad ? input(2) : input(1);
  if (x.rank() < 2 || (y.present() && y.shape != x.shape)) {
    error = "X must be [N, C, ...] and the result shaped like it";
    return false;
  }
  b.N = x.shape[0];
  b.C = x.shape[1];
  b.pix = b.N * b.C != 0 ? x.numel / (b.N * b.C) : 0;
  if (scale.numel != b.C) {
    error = "scale and statistics must have C elements";
    return false;
  }
  b.x = x.p;
  b.xType = x.type;
  b.scale = scale.p;
  b.scaleType = scale.type;
  b.y = y.p;
  b.yType = y.type;
  b.eps = static_cast<float>(attrFloat("epsilon", 1e-5));
  int64_t count = b.N * b.pix;
  b.chunk = 4096;
  b.chunks = std::max<int64_t>(1, (count + b.chunk - 1) / b.chunk);
  b.ws = ws_.alloc<float>(2 * b.C * b.chunks + 4 * b.C);
  auto phase = [&](BatchNormArgs::Phase ph, int64_t threads) {
    b.phase = ph;
    kernel(KernelKind::BatchNorm, b, threads);
  };
  if (b.training) {
    phase(BatchNormArgs::SumX, b.C * b.chunks);
    phase(BatchNormArgs::Mean, b.C);
    phase(BatchNormArgs::SumSqDiff, b.C * b.chunks);
  }
  phase(BatchNormArgs::Variance, b.C);
  if (!grad) {
    if (y.present())
      phase(BatchNormArgs::Apply, x.numel);
    return true;
  }
  phase(BatchNormArgs::SumGrad, b.C * b.chunks);
  phase(BatchNormArgs::CombineGrad, b.C);
  if (y.present())
    phase(BatchNormArgs::ApplyGrad, x.numel);
  return true;
}

/// The attributes and geometry both loss directions share: reduction,
/// ignore_index, N, C and D from the scores (or their gradient), and
/// targets of an integer type shaped [N, d...].
bool StepLowering::lossGeometry(const Operand &scores, const Operand &target, LossArgs &l,
                                std::string &error) {
  std::string r = attrString("reduction", "mean");
  if (r == "none")
    l.reduction = LossArgs::None;
  else if (r == "sum")
    l.reduction = LossArgs::Sum;
  else if (r == "mean")
    l.reduction = LossArgs::Mean;
  else {
    error = "unknown reduction '" + r + "'";
    return false;
  }
  l.hasIgnore = attr("ignore_index") != nullptr;
  l.ignore = attrInt("ignore_index", 0);
  if (scores.rank() < 2) {
    error = "scores must be [N, C, ...]";
    return false;
  }
  l.N = scores.shape[0];
  l.C = scores.shape[1];
  l.D = l.N * l.C != 0 ? scores.numel / (l.N * l.C) : 0;
  if ((target.type != FusedElem::I64 && target.type != FusedElem::I32) ||
      target.numel != l.N * l.D) {
    error = "targets must be int64/int32 shaped [N, d...]: " + argString(target);
    return false;
  }
  return true;
}

bool StepLowering::lowerLoss(bool softmax, std::string &error) {
  Operand x = input(0), target = input(1), weight = input(2), loss = output(0);
  Operand logProb = softmax ? output(1) : Operand();
  if (!x.present() || !target.present() || !loss.present()) {
    error = "the loss takes scores and targets";
    return false;
  }
  if (!requireFloat({0, 2}, {0, 1}, error))
    return false;
  LossArgs l;
  if (!lossGeometry(x, target, l, error))
    return false;
  if ((weight.present() && weight.numel != l.C) ||
      (logProb.present() && logProb.shape != x.shape) ||
      loss.numel != (l.reduction == LossArgs::None ? l.N * l.D : 1)) {
    error = "weights, loss or log_prob shapes do not match";
    return false;
  }
  l.softmax = softmax;
  l.x = x.p;
  l.xType = x.type;
  l.target = target.p;
  l.targetType = target.type;
  l.weight = weight.p;
  l.weightType = weight.type;
  l.loss = loss.p;
  l.lossType = loss.type;
  l.logProb = logProb.p;
  l.logProbType = logProb.type;
  int64_t samples = l.N * l.D;
  l.ws = ws_.alloc<float>(samples + 1);
  l.phase = LossArgs::PerSample;
  kernel(KernelKind::Loss, l, samples);
  if (l.reduction != LossArgs::None) {
    l.phase = LossArgs::Reduce;
    kernel(KernelKind::Loss, l, 1);
  }
  return true;
}

bool StepLowering::lowerLossGrad(bool softmax, std::string &error) {
  size_t targetIn = softmax ? 2 : 1, weightIn = softmax ? 3 : 2;
  Operand dLoss = input(0), target = input(targetIn), weight = input(weightIn), dx = output(0);
  Operand logp = softmax ? input(1) : Operand();
  if (!dLoss.present() || !target.present() || (softmax && !logp.present()) || !dx.present()) {
    error = "missing operands";
    return false;
  }
  if (!requireFloat({0, static_cast<int>(weightIn)}, {0}, error) ||
      (softmax && !requireFloat({1}, {}, error)))
    return false;
  LossArgs l;
  if (!lossGeometry(dx, target, l, error))
    return false;
  if ((softmax && logp.shape != dx.shape) || (weight.present() && weight.numel != l.C) ||
      dLoss.numel != (l.reduction == LossArgs::None ? l.N * l.D : 1)) {
    error = "dLoss, log_prob or weight shapes do not match";
    return false;
  }
  l.softmax = softmax;
  l.x = logp.p;
  l.xType = logp.type;
  l.target = target.p;
  l.targetType = target.type;
  l.weight = weight.p;
  l.weightType = weight.type;
  l.dLoss = dLoss.p;
  l.dLossType = dLoss.type;
  l.dx = dx.p;
  l.dxType = dx.type;
  l.ws = ws_.alloc<float>(1);
  l.phase = LossArgs::GradScale;
  kernel(KernelKind::Loss, l, 1);
  l.phase = LossArgs::Grad;
  kernel(KernelKind::Loss, l, l.N * l.D);
  return true;
}

//===----------------------------------------------------------------------===//
// Pooling and convolution
//===----------------------------------------------------------------------===//

/// Window geometry as the CPU kernels resolve it (KernelHelpers.cpp
/// windowGeometry), padded to three axes.
bool StepLowering::window(const std::vector<int64_t> &xShape, const std::vector<int64_t> &yShape,
                          const std::vector<int64_t> &kernel, Window &w,
                          std::string &error) const {
  size_t s = kernel.size();
  if (xShape.size() < 3 || xShape.size() > 5 || yShape.size() != xShape.size() ||
      s != xShape.size() - 2) {
    error = "needs [N, C, 1 to 3 spatial axes] operands and a kernel_shape per spatial axis";
    return false;
  }
  std::vector<int64_t> strides = attrInts("strides", std::vector<int64_t>(s, 1));
  std::vector<int64_t> dilations = attrInts("dilations", std::vector<int64_t>(s, 1));
  std::vector<int64_t> pads = attrInts("pads", std::vector<int64_t>(2 * s, 0));
  if (strides.size() != s || dilations.size() != s || pads.size() != 2 * s) {
    error = "strides, dilations or pads do not match the spatial rank";
    return false;
  }
  std::string autoPad = attrString("auto_pad", "NOTSET");
  std::vector<int64_t> padBegin(pads.begin(), pads.begin() + s);
  for (size_t i = 0; i < s; ++i) {
    int64_t in = xShape[2 + i], out = yShape[2 + i];
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      int64_t eff = (kernel[i] - 1) * dilations[i] + 1;
      int64_t total = std::max<int64_t>(0, (out - 1) * strides[i] + eff - in);
      padBegin[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
    } else if (autoPad == "VALID") {
      padBegin[i] = 0;
    }
    if (strides[i] <= 0 || dilations[i] <= 0 || kernel[i] <= 0) {
      error = "strides, dilations and kernel_shape must be positive";
      return false;
    }
    size_t a = 3 - s + i;
    w.in[a] = in;
    w.out[a] = out;
    w.k[a] = kernel[i];
    w.stride[a] = strides[i];
    w.dil[a] = dilations[i];
    w.padBegin[a] = padBegin[i];
    w.padEnd[a] = pads[s + i];
  }
  return true;
}

bool StepLowering::lowerPool(bool isMax, std::string &error) {
  Operand x = input(0), y = output(0), ind = isMax ? output(1) : Operand();
  if (!x.present() || !y.present()) {
    error = "pooling takes X and produces Y";
    return false;
  }
  if (!requireFloat({0}, {0}, error))
    return false;
  if (x.type != y.type) {
    error = "X and Y must share their element type";
    return false;
  }
  if (ind.present() && (ind.type != FusedElem::I64 || ind.shape != y.shape)) {
    error = "Indices must be int64 shaped like Y";
    return false;
  }
  PoolArgs a;
  if (!window(x.shape, y.shape, attrInts("kernel_shape"), a.w, error))
    return false;
  if (x.shape[0] != y.shape[0] || x.shape[1] != y.shape[1]) {
    error = "X and Y differ in N or C";
    return false;
  }
  a.mode = isMax ? PoolArgs::MaxPool : PoolArgs::AveragePool;
  a.x = x.p;
  a.xType = x.type;
  a.y = y.p;
  a.yType = y.type;
  a.indices = static_cast<int64_t *>(ind.p);
  a.countPad = attrInt("count_include_pad", 0) != 0;
  a.columnMajor = attrInt("storage_order", 0) != 0;
  a.inPix = a.w.inPix();
  a.outPix = a.w.outPix();
  kernel(KernelKind::Pool, a, y.numel);
  return true;
}

bool StepLowering::lowerMaxPoolGrad(std::string &error) {
  Operand dy = input(0), x = input(1), dx = output(0);
  if (!dy.present() || !x.present() || !dx.present()) {
    error = "MaxPoolGrad takes dY and X";
    return false;
  }
  if (!requireFloat({0, 1}, {0}, error))
    return false;
  if (x.shape != dx.shape) {
    error = "X and dX must have the same shape";
    return false;
  }
  PoolArgs a;
  if (!window(dx.shape, dy.shape, attrInts("kernel_shape"), a.w, error))
    return false;
  if (dx.shape[0] != dy.shape[0] || dx.shape[1] != dy.shape[1]) {
    error = "dX and dY differ in N or C";
    return false;
  }
  a.mode = PoolArgs::MaxPoolGrad;
  int64_t NC = dy.shape[0] * dy.shape[1];
  a.outPix = a.w.outPix();
  a.inPix = a.w.inPix();
  a.x = dy.p;
  a.xType = dy.type;
  a.fwdX = x.p;
  a.fwdXType = x.type;
  a.y = dx.p;
  a.yType = dx.type;
  if (dx.type != FusedElem::F32)
    a.acc = ws_.alloc<float>(dx.numel);
  kernel(KernelKind::Pool, a, NC);
  return true;
}

bool StepLowering::lowerAveragePoolGrad(std::string &error) {
  Operand dy = input(0), dx = output(0);
  if (!dy.present() || !dx.present()) {
    error = "AveragePoolGrad takes dY";
    return false;
  }
  if (!requireFloat({0}, {0}, error))
    return false;
  PoolArgs a;
  if (!window(dx.shape, dy.shape, attrInts("kernel_shape"), a.w, error))
    return false;
  a.mode = PoolArgs::AveragePoolGrad;
  a.countPad = attrInt("count_include_pad", 0) != 0;
  a.x = dy.p;
  a.xType = dy.type;
  a.y = dx.p;
  a.yType = dx.type;
  a.inPix = a.w.inPix();
  a.outPix = a.w.outPix();
  kernel(KernelKind::Pool, a, dx.numel);
  return true;
}

/// Samples per chunk of a convolution: as many as fit the workspace budget.
int64_t convChunk(int64_t N, size_t perSample) {
  constexpr size_t kBudget = size_t(256) << 20;
  return std::clamp<int64_t>(static_cast<int64_t>(kBudget / std::max<size_t>(perSample, 1)), 1,
                             std::max<int64_t>(N, 1));
}

struct ConvDims {
  int64_t N, C, M, G, Cg, Mg, KK, P, rows; // rows = Cg * KK
};

bool StepLowering::lowerConv(std::string &error) {
  Operand x = input(0), w = input(1), bias = input(2), y = output(0);
  if (!x.present() || !w.present() || !y.present()) {
    error = "Conv takes X and W";
    return false;
  }
  if (!sameFloatTypes({x, w, bias}, y, error))
    return false;
  if (x.rank() < 3 || x.rank() > 5 || w.rank() != x.rank() || y.rank() != x.rank()) {
    error = "convolution needs 1 to 3 spatial axes: X " + argString(x) + ", W " + argString(w);
    return false;
  }
  ConvDims d;
  d.N = x.shape[0];
  d.C = x.shape[1];
  d.M = w.shape[0];
  d.G = attrInt("group", 1);
  if (d.G <= 0 || d.C % d.G || d.M % d.G || w.shape[1] * d.G != d.C || y.shape[1] != d.M ||
      y.shape[0] != d.N || (bias.present() && bias.numel != d.M)) {
    error = "shapes do not match: X " + argString(x) + ", W " + argString(w) + ", Y " +
            argString(y);
    return false;
  }
  std::vector<int64_t> kernelShape(w.shape.begin() + 2, w.shape.end());
  Window win;
  if (!window(x.shape, y.shape, kernelShape, win, error))
    return false;
  d.Cg = d.C / d.G;
  d.Mg = d.M / d.G;
  d.KK = win.kernelSize();
  d.P = win.outPix();
  d.rows = d.Cg * d.KK;
  if (y.numel == 0)
    return true;
  size_t es = x.elemBytes();
  size_t perSample = static_cast<size_t>(d.G * d.rows * d.P) * es + static_cast<size_t>(d.M * d.P) * 4;
  int64_t nb = convChunk(d.N, perSample);
  void *col = ws_.alloc<uint8_t>(static_cast<int64_t>(d.G * d.rows * nb * d.P * es));
  float *acc = ws_.alloc<float>(d.M * nb * d.P);
  for (int64_t n0 = 0; n0 < d.N; n0 += nb) {
    int64_t nbc = std::min(nb, d.N - n0), cols = nbc * d.P;
    ConvArgs im;
    im.mode = ConvArgs::Im2Col;
    im.src = x.p;
    im.dst = col;
    im.type = x.type;
    im.elemBytes = static_cast<int>(es);
    im.C = d.C;
    im.Cg = d.Cg;
    im.nb = nbc;
    im.n0 = n0;
    im.w = win;
    kernel(KernelKind::Conv, im, d.G * d.rows * cols);
    // acc[g] (Mg x cols) = W[g] (Mg x rows) * col[g] (rows x cols), per group.
    GemmCall g = rowMajorGemm(d.Mg, cols, d.rows, w.p, d.rows, false, col, cols, false, acc, cols);
    g.batch = d.G;
    g.strideA = d.rows * cols;   // col (the column-major call's A)
    g.strideB = d.Mg * d.rows;   // W
    g.strideC = d.Mg * cols;
    g.abType = x.type;
    g.cType = FusedElem::F32;
    gemm(g);
    // Y[n0 + nn][c][p] = acc[c][nn][p] (+ bias[c]), rounded once.
    FusedArgs f;
    f.rank = 3;
    f.shape[0] = nbc;
    f.shape[1] = d.M;
    f.shape[2] = d.P;
    f.numInputs = 1;
    f.in[0] = {acc, FusedElem::F32, FusedArgs::Strided, {d.P, cols, 1}};
    uint8_t result = 0;
    if (bias.present()) {
      f.numInputs = 2;
      f.in[1] = {bias.p, bias.type, FusedArgs::Strided, {0, 1, 0}};
      f.numInstrs = 1;
      f.ins[0] = {FusedOp::Add, FusedElem::F32, 0, 1, 0, {}};
      result = 2;
    }
    f.numOutputs = 1;
    f.out[0] = {y.at(n0 * d.M * d.P), y.type, result};
    kernel(KernelKind::Fused, f, nbc * d.M * d.P);
  }
  return true;
}

bool StepLowering::lowerConvGrad(std::string &error) {
  Operand dy = input(0), x = input(1), w = input(2);
  Operand dx = output(0), dw = output(1), db = output(2);
  if (!dy.present() || !x.present() || !w.present()) {
    error = "ConvGrad takes dY, X and W";
    return false;
  }
  if (!sameFloatTypes({x, w}, dy, error))
    return false;
  if (x.rank() < 3 || x.rank() > 5 || w.rank() != x.rank() || dy.rank() != x.rank()) {
    error = "convolution needs 1 to 3 spatial axes: X " + argString(x) + ", W " + argString(w);
    return false;
  }
  ConvDims d;
  d.N = x.shape[0];
  d.C = x.shape[1];
  d.M = w.shape[0];
  d.G = attrInt("group", 1);
  if (d.G <= 0 || d.C % d.G || d.M % d.G || w.shape[1] * d.G != d.C || dy.shape[1] != d.M ||
      dy.shape[0] != d.N) {
    error = "shapes do not match: dY " + argString(dy) + ", X " + argString(x) + ", W " +
            argString(w);
    return false;
  }
  if ((dx.present() && (dx.shape != x.shape || !isFloat(dx.type))) ||
      (dw.present() && (dw.shape != w.shape || !isFloat(dw.type))) ||
      (db.present() && (db.numel != d.M || !isFloat(db.type)))) {
    error = "gradient shapes do not match the operands";
    return false;
  }
  std::vector<int64_t> kernelShape(w.shape.begin() + 2, w.shape.end());
  Window win;
  if (!window(x.shape, dy.shape, kernelShape, win, error))
    return false;
  d.Cg = d.C / d.G;
  d.Mg = d.M / d.G;
  d.KK = win.kernelSize();
  d.P = win.outPix();
  d.rows = d.Cg * d.KK;
  int64_t inPix = win.inPix();
  if (db.present()) {
    // dB[c] = sum over n and p of dY[n][c][p].
    std::vector<bool> reduced(dy.rank(), true);
    reduced[1] = false;
    reduce(dy, reduced, ReduceOp::Sum, db.p, db.type);
  }
  if (!dx.present() && !dw.present())
    return true;
  if (dy.numel == 0) {
    if (dx.present())
      memset0(dx.p, static_cast<size_t>(dx.numel) * dx.elemBytes());
    if (dw.present())
      memset0(dw.p, static_cast<size_t>(dw.numel) * dw.elemBytes());
    return true;
  }
  size_t es = x.elemBytes();
  size_t perSample = static_cast<size_t>(d.M * d.P) * es +
                     static_cast<size_t>(d.G * d.rows * d.P) * (es + 4);
  int64_t nb = convChunk(d.N, perSample);
  void *dyT = ws_.alloc<uint8_t>(static_cast<int64_t>(d.M * nb * d.P * es));
  void *col = dw.present() ? ws_.alloc<uint8_t>(static_cast<int64_t>(d.G * d.rows * nb * d.P * es))
                           : nullptr;
  float *dcol = dx.present() ? ws_.alloc<float>(d.G * d.rows * nb * d.P) : nullptr;
  float *accW = dw.present() ? ws_.alloc<float>(d.M * d.rows) : nullptr;
  for (int64_t n0 = 0; n0 < d.N; n0 += nb) {
    int64_t nbc = std::min(nb, d.N - n0), cols = nbc * d.P;
    // dyT[c][nn][p] = dY[n0 + nn][c][p].
    CopyArgs cp;
    addCopy({d.M, nbc, d.P}, {d.P, d.M * d.P, 1}, {cols, d.P, 1}, dy.at(n0 * d.M * d.P), dyT,
            static_cast<int>(es), cp);
    kernel(KernelKind::Copy, cp, d.M * cols);
    if (dw.present()) {
      ConvArgs im;
      im.mode = ConvArgs::Im2Col;
      im.src = x.p;
      im.dst = col;
      im.type = x.type;
      im.elemBytes = static_cast<int>(es);
      im.C = d.C;
      im.Cg = d.Cg;
      im.nb = nbc;
      im.n0 = n0;
      im.w = win;
      kernel(KernelKind::Conv, im, d.G * d.rows * cols);
      // accW[g] (Mg x rows) (+)= dyT[g] (Mg x cols) * col[g]^T (cols x rows).
      GemmCall g = rowMajorGemm(d.Mg, d.rows, cols, dyT, cols, false, col, cols, true, accW, d.rows);
      g.batch = d.G;
      g.strideA = d.rows * cols; // col
      g.strideB = d.Mg * cols;   // dyT
      g.strideC = d.Mg * d.rows;
      g.abType = x.type;
      g.cType = FusedElem::F32;
      g.beta = n0 == 0 ? 0.0f : 1.0f;
      gemm(g);
    }
    if (dx.present()) {
      // dcol[g] (rows x cols) = W[g]^T (rows x Mg) * dyT[g] (Mg x cols).
      GemmCall g = rowMajorGemm(d.rows, cols, d.Mg, w.p, d.rows, true, dyT, cols, false, dcol, cols);
      g.batch = d.G;
      g.strideA = d.Mg * cols;   // dyT
      g.strideB = d.Mg * d.rows; // W
      g.strideC = d.rows * cols;
      g.abType = x.type;
      g.cType = FusedElem::F32;
      gemm(g);
      ConvArgs c2;
      c2.mode = ConvArgs::Col2Im;
      c2.src = dcol;
      c2.dst = dx.p;
      c2.type = dx.type;
      c2.C = d.C;
      c2.Cg = d.Cg;
      c2.nb = nbc;
      c2.n0 = n0;
      c2.w = win;
      kernel(KernelKind::Conv, c2, nbc * d.C * inPix);
    }
  }
  if (dw.present())
    kernel(KernelKind::Fused, convertArgs(accW, FusedElem::F32, dw), dw.numel);
  return true;
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

/// Whether operand i is absent or a constant of the plan (seen through a view).
bool StepLowering::isConstantOperand(size_t i) const {
  if (!has(i))
    return true;
  const plan::Tensor *t = &p_.tensors(in_[i].id);
  if (t->has_view_of())
    t = &p_.tensors(t->view_of());
  return t->storage() == plan::CONSTANT;
}

/// A scalar operand that must be a constant (the kernel takes it as an
/// argument); `dflt` when absent.
bool StepLowering::constantScalar(size_t i, double dflt, double &v, std::string &error) const {
  if (!has(i)) {
    v = dflt;
    return true;
  }
  const plan::Tensor *t = &p_.tensors(in_[i].id);
  if (t->has_view_of())
    t = &p_.tensors(t->view_of());
  if (t->storage() != plan::CONSTANT || in_[i].numel != 1) {
    error = "operand " + std::to_string(i) + " must be a constant scalar on the CUDA backend";
    return false;
  }
  if (t->data().size() < planElemSize(t->type())) {
    error = "operand " + std::to_string(i) + " has no data";
    return false;
  }
  v = fused::fusedLoad<double>(in_[i].type, t->data().data(), 0);
  return true;
}

/// The ratio and training operands of a Dropout or DropoutGrad step,
/// `ratioAt` and `ratioAt + 1`: constants are passed as values, other
/// scalars (fed or computed at run time) are read by the kernel.
bool StepLowering::dropoutParams(size_t ratioAt, DropoutArgs &a, std::string &error) const {
  auto scalar = [&](size_t i, double dflt, double &value, const void *&at, uint8_t &type) {
    if (isConstantOperand(i))
      return constantScalar(i, dflt, value, error);
    if (in_[i].numel != 1 || in_[i].type == FusedElem::F64 ||
        (!isFloat(in_[i].type) && in_[i].type != FusedElem::BOOL)) {
      error = "operand " + std::to_string(i) + " must be a float or bool scalar";
      return false;
    }
    at = in_[i].p;
    type = in_[i].type;
    return true;
  };
  double training = 0.0;
  if (!scalar(ratioAt, 0.5, a.ratio, a.ratioAt, a.ratioType) ||
      !scalar(ratioAt + 1, 0.0, training, a.trainingAt, a.trainingType))
    return false;
  a.training = training != 0.0;
  return true;
}

bool StepLowering::lowerDropout(std::string &error) {
  Operand x = input(0), y = output(0), mask = output(1);
  if (!x.present() || !y.present() || x.type != y.type || x.numel != y.numel ||
      (mask.present() && mask.numel != x.numel)) {
    error = "Dropout takes X and gives Y of its type (and a mask of its shape)";
    return false;
  }
  if (!requireFloat({0}, {0}, error))
    return false;
  DropoutArgs a;
  if (!dropoutParams(1, a, error))
    return false;
  Operand counter = input(3);
  if (!counter.present() || counter.type != FusedElem::I64 || counter.numel != 1) {
    error = "Dropout needs its run counter (an int64 state, operand 3; recompile the model)";
    return false;
  }
  a.mode = DropoutArgs::Forward;
  a.x = x.p;
  a.xType = x.type;
  a.y = y.p;
  a.yType = y.type;
  a.mask = static_cast<uint8_t *>(mask.p);
  a.counter = static_cast<int64_t *>(counter.p);
  a.seed = static_cast<uint64_t>(attrInt("seed", 0));
  kernel(KernelKind::Dropout, a, x.numel);
  DropoutArgs advance = a;
  advance.mode = DropoutArgs::Advance;
  kernel(KernelKind::Dropout, advance, 1);
  return true;
}

bool StepLowering::lowerDropoutGrad(std::string &error) {
  Operand dy = input(0), mask = input(1), dx = output(0);
  if (!dy.present() || !mask.present() || !dx.present() || mask.numel != dy.numel ||
      dx.numel != dy.numel || mask.elemBytes() != 1) {
    error = "DropoutGrad takes dY and a bool mask of its shape";
    return false;
  }
  if (!requireFloat({0}, {0}, error))
    return false;
  DropoutArgs a;
  if (!dropoutParams(2, a, error))
    return false;
  a.mode = DropoutArgs::Grad;
  a.x = dy.p;
  a.xType = dy.type;
  a.y = dx.p;
  a.yType = dx.type;
  a.mask = static_cast<uint8_t *>(mask.p);
  kernel(KernelKind::Dropout, a, dy.numel);
  return true;
}

bool StepLowering::lowerAllFinite(std::string &error) {
  Operand out = output(0);
  if (outs_.size() != 1 || !out.present() || out.type != FusedElem::BOOL) {
    error = "AllFinite produces one bool";
    return false;
  }
  std::vector<Operand> inputs;
  for (const Operand &t : in_) {
    if (!t.present())
      continue;
    if (!isFloat(t.type) && t.type != FusedElem::F64) {
      error = "AllFinite checks float tensors";
      return false;
    }
    if (t.numel > 0)
      inputs.push_back(t);
  }
  AllFiniteArgs a;
  int64_t total = 0;
  for (const Operand &t : inputs)
    total += (t.numel + a.chunk - 1) / a.chunk;
  a.flags = ws_.alloc<uint8_t>(total);
  a.out = static_cast<uint8_t *>(out.p);
  a.totalFlags = total;
  int64_t base = 0;
  for (size_t first = 0; first < inputs.size(); first += AllFiniteArgs::kMaxInputs) {
    AllFiniteArgs part = a;
    part.phase = 0;
    part.flagBase = base;
    part.count = static_cast<int>(std::min<size_t>(AllFiniteArgs::kMaxInputs, inputs.size() - first));
    int64_t chunks = 0;
    for (int k = 0; k < part.count; ++k) {
      const Operand &t = inputs[first + k];
      part.p[k] = t.p;
      part.type[k] = t.type;
      part.n[k] = t.numel;
      part.firstChunk[k] = chunks;
      chunks += (t.numel + a.chunk - 1) / a.chunk;
    }
    part.firstChunk[part.count] = chunks;
    kernel(KernelKind::AllFinite, part, chunks);
    base += chunks;
  }
  a.phase = 1;
  kernel(KernelKind::AllFinite, a, 1);
  return true;
}

bool StepLowering::lowerAdamW(std::string &error) {
  Operand p = input(0), g = input(1), m = input(2), v = input(3), lr = input(4), t = input(5),
          found = input(6);
  bool operandsOk = p.present() && g.present() && m.present() && v.present() && lr.present() &&
                    t.present() && (outs_.size() == 3 || outs_.size() == 4);
  for (const Operand &o : {p, m, v, lr, t, output(0), output(1), output(2)})
    operandsOk = operandsOk && o.present() && o.type == FusedElem::F32;
  operandsOk = operandsOk && isFloat(g.type) &&
               (!found.present() || (found.type == FusedElem::BOOL && found.numel == 1));
  for (const Operand &o : {g, m, v, output(0), output(1), output(2)})
    operandsOk = operandsOk && o.numel == p.numel;
  Operand copy = output(3);
  if (copy.present())
    operandsOk = operandsOk && copy.numel == p.numel &&
                 (copy.type == FusedElem::F16 || copy.type == FusedElem::BF16);
  if (!operandsOk || lr.numel != 1 || t.numel != 1) {
    error = "AdamW takes fp32 param, moments, scalar lr and step, a float gradient of the "
            "parameter's size and an optional bool found_inf, and produces 3 fp32 results and an "
            "optional fp16/bf16 copy of the parameter";
    return false;
  }
  AdamWArgs a;
  double beta1 = attrFloat("beta1", 0.9), beta2 = attrFloat("beta2", 0.999);
  a.c = math::adamwConstants(beta1, attrFloat("one_minus_beta1", 1 - beta1), beta2,
                             attrFloat("one_minus_beta2", 1 - beta2), attrFloat("epsilon", 1e-8),
                             attrFloat("weight_decay", 0.0));
  a.p = static_cast<const float *>(p.p);
  a.m = static_cast<const float *>(m.p);
  a.v = static_cast<const float *>(v.p);
  a.lr = static_cast<const float *>(lr.p);
  a.t = static_cast<const float *>(t.p);
  a.g = g.p;
  a.gType = g.type;
  a.found = found.present() ? static_cast<const uint8_t *>(found.p) : nullptr;
  a.pOut = static_cast<float *>(output(0).p);
  a.mOut = static_cast<float *>(output(1).p);
  a.vOut = static_cast<float *>(output(2).p);
  a.copy = copy.present() ? copy.p : nullptr;
  a.copyType = copy.type;
  kernel(KernelKind::AdamW, a, p.numel);
  return true;
}

//===----------------------------------------------------------------------===//
// Dispatch
//===----------------------------------------------------------------------===//

using Lower = bool (StepLowering::*)(std::string &);
using LowerFn = std::function<bool(StepLowering &, std::string &)>;

const std::map<std::string, LowerFn> &table() {
  static const std::map<std::string, LowerFn> t = [] {
    std::map<std::string, LowerFn> m;
    auto simple = [&](const char *name, Lower fn) {
      m[name] = [fn](StepLowering &s, std::string &e) { return (s.*fn)(e); };
    };
    simple("ampc.Fused", &StepLowering::lowerFused);
    for (const char *n : {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"})
      simple(n, &StepLowering::lowerCopyLike);
    simple("Transpose", &StepLowering::lowerTranspose);
    simple("Expand", &StepLowering::lowerExpand);
    simple("Concat", &StepLowering::lowerConcat);
    simple("Split", &StepLowering::lowerSplit);
    simple("Slice", &StepLowering::lowerSlice);
    simple("ampc.SliceGrad", &StepLowering::lowerSliceGrad);
    simple("Pad", &StepLowering::lowerPad);
    simple("Tile", &StepLowering::lowerTile);
    simple("Gather", &StepLowering::lowerGather);
    simple("GatherElements", &StepLowering::lowerGatherElements);
    simple("ampc.GatherGrad", &StepLowering::lowerGatherGrad);
    simple("MatMul", &StepLowering::lowerMatMul);
    simple("Gemm", &StepLowering::lowerGemm);
    simple("LayerNormalization", &StepLowering::lowerLayerNorm);
    simple("ampc.LayerNormalizationGrad", &StepLowering::lowerLayerNormGrad);
    simple("ampc.MaxPoolGrad", &StepLowering::lowerMaxPoolGrad);
    simple("ampc.AveragePoolGrad", &StepLowering::lowerAveragePoolGrad);
    simple("Conv", &StepLowering::lowerConv);
    simple("ampc.ConvGrad", &StepLowering::lowerConvGrad);
    simple("ampc.AllFinite", &StepLowering::lowerAllFinite);
    simple("ampc.AdamW", &StepLowering::lowerAdamW);
    simple("Dropout", &StepLowering::lowerDropout);
    simple("ampc.DropoutGrad", &StepLowering::lowerDropoutGrad);
    const std::pair<const char *, ReduceOp> reductions[] = {
        {"ReduceSum", ReduceOp::Sum},         {"ReduceMean", ReduceOp::Mean},
        {"ReduceSumSquare", ReduceOp::SumSquare}, {"ReduceL1", ReduceOp::L1},
        {"ReduceL2", ReduceOp::L2},           {"ReduceMax", ReduceOp::Max},
        {"ReduceMin", ReduceOp::Min},         {"ReduceProd", ReduceOp::Prod},
        {"ReduceLogSum", ReduceOp::LogSum},   {"ReduceLogSumExp", ReduceOp::LogSumExp}};
    for (const auto &[name, op] : reductions) {
      ReduceOp r = op;
      m[name] = [r](StepLowering &s, std::string &e) { return s.lowerReduce(r, e); };
    }
    const std::pair<const char *, SoftOp> soft[] = {
        {"Softmax", SoftOp::Softmax},
        {"LogSoftmax", SoftOp::LogSoftmax},
        {"Hardmax", SoftOp::Hardmax},
        {"ampc.SoftmaxGrad", SoftOp::SoftmaxGrad},
        {"ampc.LogSoftmaxGrad", SoftOp::LogSoftmaxGrad}};
    for (const auto &[name, op] : soft) {
      SoftOp o = op;
      m[name] = [o](StepLowering &s, std::string &e) { return s.lowerSoftmax(o, e); };
    }
    auto flag = [&](const char *name, bool (StepLowering::*fn)(bool, std::string &), bool v) {
      m[name] = [fn, v](StepLowering &s, std::string &e) { return (s.*fn)(v, e); };
    };
    flag("BatchNormalization", &StepLowering::lowerBatchNorm, false);
    flag("ampc.BatchNormalizationGrad", &StepLowering::lowerBatchNorm, true);
    flag("SoftmaxCrossEntropyLoss", &StepLowering::lowerLoss, true);
    flag("NegativeLogLikelihoodLoss", &StepLowering::lowerLoss, false);
    flag("ampc.SoftmaxCrossEntropyLossGrad", &StepLowering::lowerLossGrad, true);
    flag("ampc.NegativeLogLikelihoodLossGrad", &StepLowering::lowerLossGrad, false);
    flag("MaxPool", &StepLowering::lowerPool, true);
    flag("AveragePool", &StepLowering::lowerPool, false);
    flag("GlobalMaxPool", &StepLowering::lowerGlobalPool, true);
    flag("GlobalAveragePool", &StepLowering::lowerGlobalPool, false);
    return m;
  }();
  return t;
}

bool StepLowering::lower(std::string &error) {
  auto it = table().find(step_.op());
  if (it == table().end()) {
    FusedOp op = fusedOpByName(step_.op());
    if (op != FusedOp::Count)
      return lowerElementwise(op, error);
    error = "the CUDA backend has no kernel for '" + step_.op() + "'";
    return false;
  }
  return it->second(*this, error);
}

} // namespace

std::vector<std::string> cudaKernelOps() {
  std::vector<std::string> ops;
  for (const auto &[name, fn] : table())
    ops.push_back(name);
  for (const FusedOpInfo &info : kFusedOps)
    if (!table().count(info.name))
      ops.push_back(info.name);
  std::sort(ops.begin(), ops.end());
  return ops;
}

bool lowerProgram(const plan::Plan &p, int index, const DeviceMemory &mem,
                  std::vector<Launch> &out, size_t &workspaceBytes, std::string &error) {
  if (index < 0 || index >= p.programs_size()) {
    error = "no program " + std::to_string(index);
    return false;
  }
  const plan::Program &prog = p.programs(index);
  out.clear();
  for (int s = 0; s < prog.steps_size(); ++s) {
    const plan::Step &step = prog.steps(s);
    StepLowering lowering(p, step, mem, out, s);
    std::string why;
    if (!lowering.lower(why)) {
      error = "program '" + prog.name() + "' step " + std::to_string(s) + " (" + step.op() +
              " '" + step.name() + "'): " + why;
      return false;
    }
    workspaceBytes = std::max(workspaceBytes, lowering.workspaceUsed());
  }
  // State updates that the planner could not make in place.
  for (const plan::StateUpdate &u : prog.updates()) {
    void *dst = mem.tensor(u.state()), *src = mem.tensor(u.updated());
    if (dst == src)
      continue;
    Launch l;
    l.kind = Launch::Memcpy;
    l.dst = dst;
    l.src = src;
    l.bytes = planTensorBytes(p.tensors(u.state()));
    out.push_back(l);
  }
  return true;
}

std::string describeLaunch(const Launch &l) {
  switch (l.kind) {
  case Launch::Gemm: {
    const GemmCall &g = l.gemm;
    std::string s = "gemm " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                    std::to_string(g.k);
    if (g.batch > 1)
      s += " x" + std::to_string(g.batch);
    return s;
  }
  case Launch::Memset:
    return "memset " + std::to_string(l.bytes) + " bytes";
  case Launch::Memcpy:
    return "memcpy " + std::to_string(l.bytes) + " bytes";
  case Launch::Kernel:
    break;
  }
  static const char *names[] = {
#define AMPC_KERNEL_NAME(NAME, ARGS) #NAME,
      AMPC_CUDA_KERNELS(AMPC_KERNEL_NAME)
#undef AMPC_KERNEL_NAME
  };
  return std::string(names[static_cast<int>(l.kernel)]) + " kernel, " +
         std::to_string(l.threads) + " threads";
}

} // namespace ampc::rt::cuda
