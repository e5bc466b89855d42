//===- CudaFusedCodegenTest.cpp - Fused programs as kernels of their own --===//
//
// runtime/cuda/elementwise/FusedCodegen.cpp turns each fused program into
// CUDA C source, FusedCompiler.cpp compiles it with NVRTC (which needs no
// GPU; CudaFusedCompilerTest.cpp) and caches the cubin. Here, for every distinct fused program of the
// fixtures' training plans (mlp, cnn, transformer; fp32, fp16, bf16; SGD and
// AdamW):
//   - the source is deterministic and independent of addresses and shapes;
//   - the generated text, compiled by the host's C++ compiler, computes on
//     random inputs exactly the interpreter's bits (FusedArgs; any NaN for a
//     NaN, whose sign the host compiler may pick), on the vector path with a
//     partial last group and on the element-wise path (skipped where no
//     compiler is installed);
//   - the launch records, and the emulator running them through training
//     steps bit for bit as the interpreted launches.
// On a GPU, training steps with compiled kernels match the interpreted
// kernel bit for bit.
//
//===----------------------------------------------------------------------===//

#include "FixtureUtil.h"
#include "FusedProgramsUtil.h"

#include "ampc/rt/Backend.h"
#include "ampc/rt/Session.h"

#include "cuda/Lowering.h"
#include "cuda/elementwise/FusedCodegen.h"
#include "cuda/elementwise/FusedCompiler.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

using namespace ampc;
using namespace ampc::test;
namespace rcuda = ampc::rt::cuda;
namespace fs = std::filesystem;

TEST(CudaFusedCodegen, SourceIsDeterministicAndIndependentOfAddresses) {
  const std::vector<FusedProgram> &programs = fixtureFusedPrograms();
  ASSERT_GT(programs.size(), 10u);
  std::printf("  %zu distinct fused programs in the fixtures' plans\n", programs.size());
  std::map<std::string, std::string> hashes;
  for (const FusedProgram &p : programs) {
    EXPECT_EQ(rcuda::fusedKernelSource(p.args), p.source);
    // Other addresses, another shape: the same kernel.
    rcuda::FusedArgs moved = p.args;
    for (auto &in : moved.in)
      in.p = reinterpret_cast<const void *>(0x1000);
    for (auto &out : moved.out)
      out.p = out.p ? reinterpret_cast<void *>(0x2000) : nullptr;
    moved.shape[0] += 3;
    EXPECT_EQ(rcuda::fusedKernelSource(moved), p.source) << p.where;
    std::string h = rcuda::fusedHash(p.source);
    EXPECT_EQ(h.size(), 16u);
    EXPECT_TRUE(hashes.emplace(h, p.source).second) << "two programs share hash " << h;
  }
  // A different instruction is a different kernel.
  rcuda::FusedArgs a = programs.front().args;
  std::string before = rcuda::fusedKernelSource(a);
  a.ins[0].op = a.ins[0].op == rt::FusedOp::Add ? rt::FusedOp::Sub : rt::FusedOp::Add;
  EXPECT_NE(rcuda::fusedKernelSource(a), before);
  // The cache key: source, architecture and NVRTC version.
  std::string k = rcuda::fusedCacheKey(before, 90, "13.0");
  EXPECT_EQ(k, rcuda::fusedCacheKey(before, 90, "13.0"));
  EXPECT_NE(k, rcuda::fusedCacheKey(before, 80, "13.0"));
  EXPECT_NE(k, rcuda::fusedCacheKey(before, 90, "13.1"));
  EXPECT_NE(k, rcuda::fusedCacheKey(rcuda::fusedKernelSource(a), 90, "13.0"));
}

TEST(CudaFusedCodegen, VectorWidthFollowsTheNarrowestOperand) {
  for (const FusedProgram &p : fixtureFusedPrograms()) {
    const rcuda::FusedArgs &f = p.args;
    // Strided (broadcast) inputs load element by element: no say in the width.
    int narrowest = 8;
    for (int k = 0; k < f.numInputs; ++k)
      if (f.in[k].kind == rcuda::FusedArgs::Contiguous)
        narrowest = std::min(narrowest, rcuda::fusedElemBytes(f.in[k].type));
    for (int o = 0; o < f.numOutputs; ++o)
      narrowest = std::min(narrowest, rcuda::fusedElemBytes(f.out[o].type));
    int expect = std::min(8, 16 / narrowest);
    EXPECT_EQ(rcuda::fusedKernelWidth(f), expect) << p.where << "\n" << p.source;
  }
}


namespace {

/// Random storage of `count` elements of `type`: ordinary values mixed with
/// zeros of both signs, infinities, NaN and tiny and huge ones.
std::vector<uint8_t> randomStorage(uint8_t type, int64_t count, std::mt19937 &rng) {
  std::vector<uint8_t> bytes(static_cast<size_t>(count) * rcuda::fusedElemBytes(type) + 64);
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  std::uniform_int_distribution<int> pick(0, 99), small(-5, 5);
  const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, INFINITY, -INFINITY, NAN,
                           1e-30f, 65504.0f, 7e4f, -3e38f};
  for (int64_t i = 0; i < count; ++i) {
    int r = pick(rng);
    float v = r < 12 ? special[r] : value(rng);
    if (type == rcuda::FusedElem::BOOL)
      v = r & 1;
    else if (type == rcuda::FusedElem::U8)
      v = static_cast<float>(r % 11);
    else if (type != rcuda::FusedElem::F32 && type != rcuda::FusedElem::F16 &&
             type != rcuda::FusedElem::BF16 && type != rcuda::FusedElem::F64)
      v = static_cast<float>(small(rng));
    rt::fused::fusedStore<double>(type, bytes.data(), i, static_cast<double>(v));
  }
  return bytes;
}

/// 64-byte aligned copies of byte vectors, so that the vector path runs.
struct Aligned {
  std::vector<std::unique_ptr<uint8_t[], decltype(&std::free)>> blocks;
  uint8_t *copy(const std::vector<uint8_t> &b) {
    size_t n = (b.size() + 63) / 64 * 64;
    auto *p = static_cast<uint8_t *>(std::aligned_alloc(64, n));
    std::memcpy(p, b.data(), b.size());
    blocks.emplace_back(p, &std::free);
    return p;
  }
};

using HostKernel = void (*)(const rcuda::FusedKernelArgs *, long long);

/// How many comparisons ran the vector path with a strided input.
int &stridedVectorRuns() {
  static int runs = 0;
  return runs;
}

/// Runs program `f` (its shape) on random inputs with the interpreter, the
/// generated code `kernel` (vector path when aligned, then element-wise) and
/// the emulator's CompiledFused path; every output must hold the same bits.
void compareOnRandomInputs(const rcuda::FusedArgs &program, HostKernel kernel, int seed,
                           const std::string &where) {
  std::mt19937 rng(seed);
  rcuda::FusedArgs f = program;
  int64_t n = 1;
  for (int d = 0; d < f.rank; ++d)
    n *= f.shape[d];
  Aligned mem;
  for (int k = 0; k < f.numInputs; ++k) {
    // Contiguous: n elements; a scalar: one; strided: up to the last offset.
    int64_t count = f.in[k].kind == rcuda::FusedArgs::Contiguous ? n : 1;
    if (f.in[k].kind == rcuda::FusedArgs::Strided)
      for (int d = 0; d < f.rank; ++d)
        count += (f.shape[d] - 1) * f.in[k].strides[d];
    f.in[k].p = mem.copy(randomStorage(f.in[k].type, count, rng));
  }
  std::vector<uint8_t> garbage;
  const int width = rcuda::fusedKernelWidth(f);
  auto outputs = [&](rcuda::FusedArgs &g) {
    for (int o = 0; o < g.numOutputs; ++o) {
      garbage.assign(static_cast<size_t>(n) * rcuda::fusedElemBytes(g.out[o].type) + 64, 0xCD);
      g.out[o].p = mem.copy(garbage);
    }
  };
  rcuda::FusedArgs interp = f, compiled = f, scalar = f, emulated = f;
  for (rcuda::FusedArgs *g : {&interp, &compiled, &scalar, &emulated})
    outputs(*g);
  for (int64_t i = 0; i < n; ++i)
    rcuda::FusedArgs::run(interp, i);
  // With a strided input a group of `width` elements must lie in one row.
  bool strided = false;
  for (int i = 0; i < f.numInputs; ++i)
    strided |= f.in[i].kind == rcuda::FusedArgs::Strided;
  bool vector = width > 1 && (!strided || f.shape[f.rank - 1] % width == 0);
  if (vector && strided)
    ++stridedVectorRuns();
  int64_t threads = 0;
  rcuda::FusedKernelArgs k = rcuda::fusedKernelArgs(compiled, n, threads);
  EXPECT_EQ(k.vector, vector ? 1 : 0) << where;
  EXPECT_EQ(threads, vector ? (n + width - 1) / width : n) << where;
  kernel(&k, threads);
  rcuda::FusedKernelArgs e = rcuda::fusedKernelArgs(scalar, n, threads);
  e.vector = 0;
  kernel(&e, n);
  rcuda::FusedKernelArgs h = rcuda::fusedKernelArgs(emulated, n, threads);
  rcuda::runCompiledFusedOnHost(program, width, h, threads);
  // The first element whose bits differ, as both values. A NaN's sign and
  // payload are the one thing the host compiler may choose: x86 propagates
  // an operand's NaN (or makes -NaN), and the compiler may swap the operands
  // of a product or sum. (GPU arithmetic makes the canonical NaN, so the
  // GPU test compares NaNs bit for bit too.)
  auto differ = [&](int o, const void *got) -> std::string {
    uint8_t t = f.out[o].type;
    for (int64_t i = 0; i < n; ++i) {
      double a = rt::fused::fusedLoad<double>(t, interp.out[o].p, i);
      double b = rt::fused::fusedLoad<double>(t, got, i);
      int sz = rcuda::fusedElemBytes(t);
      if (std::memcmp(static_cast<const uint8_t *>(interp.out[o].p) + i * sz,
                      static_cast<const uint8_t *>(got) + i * sz, sz) != 0 &&
          !(std::isnan(a) && std::isnan(b)))
        return "element " + std::to_string(i) + ": " + std::to_string(a) + " against " +
               std::to_string(b);
    }
    return "";
  };
  for (int o = 0; o < f.numOutputs; ++o) {
    const std::string ctx = where + ": output " + std::to_string(o) + ", n = " + std::to_string(n);
    EXPECT_EQ(differ(o, compiled.out[o].p), "") << ctx << " (vector path)";
    EXPECT_EQ(differ(o, scalar.out[o].p), "") << ctx << " (element path)";
    EXPECT_EQ(differ(o, emulated.out[o].p), "") << ctx << " (emulated compiled launch)";
  }
}

} // namespace

TEST(CudaFusedCodegen, GeneratedCodeMatchesTheInterpreterOnTheCpu) {
  const char *cxxEnv = std::getenv("CXX");
  std::string cxx = cxxEnv && *cxxEnv ? cxxEnv : "c++";
  if (std::system((cxx + " --version > /dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "no host C++ compiler (" << cxx << ")";
  const std::vector<FusedProgram> &programs = fixtureFusedPrograms();
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  // All programs in one translation unit, each in its own namespace.
  {
    std::ofstream tu(dir.path / "programs.cpp");
    for (size_t i = 0; i < programs.size(); ++i)
      tu << "#define AMPC_FUSED_NS ampc_fused_" << i << "\n"
         << programs[i].source << "#undef AMPC_FUSED_NS\n";
  }
  // AMPC_SOURCE_DIR in the environment: the GPU kit's copy of the sources.
  const char *rootEnv = std::getenv("AMPC_SOURCE_DIR");
  std::string root = rootEnv && *rootEnv ? rootEnv : AMPC_SOURCE_DIR;
  // The runtime's floating-point flags (runtime/CMakeLists.txt).
  std::string cmd = cxx + " -std=c++17 -O1 -ffp-contract=off -fno-math-errno -fPIC -shared -w" +
                    " -I" + root + "/runtime/include -I" + root + "/runtime/cuda/elementwise " +
                    (dir.path / "programs.cpp").string() + " -o " +
                    (dir.path / "programs.so").string() + " 2> " +
                    (dir.path / "log.txt").string();
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(dir.path / "log.txt");
    FAIL() << "the generated code does not compile:\n" << log.rdbuf();
  }
  void *lib = dlopen((dir.path / "programs.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_TRUE(lib) << dlerror();
  for (size_t i = 0; i < programs.size(); ++i) {
    std::string sym = "ampc_fused_" + std::to_string(i) + "_host";
    auto kernel = reinterpret_cast<HostKernel>(dlsym(lib, sym.c_str()));
    ASSERT_TRUE(kernel) << sym;
    const FusedProgram &p = programs[i];
    compareOnRandomInputs(p.args, kernel, static_cast<int>(i), p.where);
    // Rank 1, a last group one short (with a strided input: the element path).
    if (rcuda::fusedKernelWidth(p.args) > 1) {
      rcuda::FusedArgs flat = p.args;
      flat.rank = 1;
      flat.shape[0] = 125 * rcuda::fusedKernelWidth(p.args) + rcuda::fusedKernelWidth(p.args) - 1;
      compareOnRandomInputs(flat, kernel, static_cast<int>(i) + 7919, p.where + " (flat)");
    }
  }
  dlclose(lib);
  // Broadcast biases and per-row scales take the vector path too.
  EXPECT_GT(stridedVectorRuns(), 5);
}

TEST(CudaFusedCodegen, CompiledLaunchRecords) {
  plan::Plan p;
  ASSERT_TRUE(compileTrainingPlan("mlp", "fp16", "adamw", p));
  std::vector<rcuda::Launch> interpreted = lowerAll(p);
  // Compilation fails: every launch stays interpreted (the fallback).
  {
    std::vector<rcuda::Launch> ls = interpreted;
    rcuda::FusedKernelTable table;
    EXPECT_EQ(table.use(ls, [](rcuda::CompiledFusedKernel &) { return false; }), 0);
    for (size_t i = 0; i < ls.size(); ++i)
      EXPECT_EQ(ls[i].kind, interpreted[i].kind);
  }
  std::vector<rcuda::Launch> ls = interpreted;
  rcuda::FusedKernelTable table;
  int compiles = 0;
  int used = table.use(ls, [&](rcuda::CompiledFusedKernel &) { return ++compiles, true; });
  EXPECT_EQ(compiles, static_cast<int>(table.kernels().size()));
  int fused = 0;
  for (size_t i = 0; i < ls.size(); ++i) {
    const rcuda::Launch &before = interpreted[i], &after = ls[i];
    if (before.kind != rcuda::Launch::Kernel || before.kernel != rcuda::KernelKind::Fused) {
      EXPECT_EQ(after.kind, before.kind);
      continue;
    }
    ++fused;
    ASSERT_EQ(after.kind, rcuda::Launch::CompiledFused);
    ASSERT_TRUE(after.compiled);
    EXPECT_EQ(after.step, before.step);
    const auto &f = before.as<rcuda::FusedArgs>();
    const auto &k = after.as<rcuda::FusedKernelArgs>();
    EXPECT_EQ(after.compiled->source, rcuda::fusedKernelSource(f));
    EXPECT_EQ(k.n, before.threads);
    int w = after.compiled->width;
    // The placeholder addresses are 64-byte aligned: vector groups.
    EXPECT_EQ(after.threads, w > 1 ? (before.threads + w - 1) / w : before.threads);
    EXPECT_EQ(k.in[0], f.in[0].p);
    EXPECT_NE(rcuda::describeLaunch(after).find("compiled"), std::string::npos);
  }
  EXPECT_EQ(used, fused);
  EXPECT_GT(fused, static_cast<int>(table.kernels().size())) << "programs are shared";

  // An operand off its group's alignment: one element a thread.
  for (const FusedProgram &prog : fixtureFusedPrograms()) {
    int w = rcuda::fusedKernelWidth(prog.args);
    if (w == 1)
      continue;
    alignas(64) static uint8_t block[256];
    rcuda::FusedArgs f = prog.args;
    for (int i = 0; i < f.numInputs; ++i)
      f.in[i].p = block;
    for (int o = 0; o < f.numOutputs; ++o)
      f.out[o].p = block;
    int64_t threads = 0;
    EXPECT_EQ(rcuda::fusedKernelArgs(f, 1000, threads).vector, 1);
    EXPECT_EQ(threads, (1000 + w - 1) / w);
    f.out[f.numOutputs - 1].p = block + rcuda::fusedElemBytes(f.out[f.numOutputs - 1].type);
    EXPECT_EQ(rcuda::fusedKernelArgs(f, 1000, threads).vector, 0) << prog.where;
    EXPECT_EQ(threads, 1000);
  }
}


namespace {

/// Every state tensor and output after `steps` training steps on `backend`.
std::map<std::string, rt::HostArray> train(const plan::Plan &p, const std::string &fixture,
                                           std::unique_ptr<rt::Backend> backend, int steps) {
  std::map<std::string, rt::HostArray> out;
  std::string error;
  auto session = rt::Session::fromPlan(p, std::move(backend), error);
  if (!session) {
    ADD_FAILURE() << error;
    return out;
  }
  int step = session->program("step");
  for (const auto &[name, t] : test::loadFixtureInputs(fixture))
    EXPECT_TRUE(session->feed(step, name, test::toHostArray(t), "fixture", error)) << error;
  for (int s = 0; s < steps; ++s)
    EXPECT_TRUE(session->run(step, error)) << error;
  for (int i = 0; i < p.tensors_size(); ++i) {
    if (p.tensors(i).storage() != plan::STATE || p.tensors(i).has_view_of())
      continue;
    EXPECT_TRUE(session->readTensor(i, out["state " + p.tensors(i).name()], error)) << error;
  }
  for (const plan::Binding &b : p.programs(step).outputs())
    EXPECT_TRUE(session->output(step, b.name(), out["output " + b.name()], error)) << error;
  return out;
}

void expectSameBits(const std::map<std::string, rt::HostArray> &a,
                    const std::map<std::string, rt::HostArray> &b, const std::string &what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  std::printf("  %s: %zu tensors\n", what.c_str(), a.size());
  for (const auto &[name, x] : a)
    EXPECT_EQ(x.bytes, b.at(name).bytes) << what << ": " << name;
}

} // namespace

TEST(CudaFusedCodegen, EmulatedTrainingWithCompiledLaunchesIsBitwiseTheInterpreted) {
  rcuda::EmulatorOptions compiled;
  compiled.compiledFused = true;
  for (const char *f : {"mlp", "cnn", "transformer"})
    for (const char *prec : {"fp32", "fp16", "bf16"})
      for (const char *opt : {"sgd", "adamw"}) {
        plan::Plan p;
        ASSERT_TRUE(compileTrainingPlan(f, prec, opt, p));
        expectSameBits(train(p, f, rcuda::createCudaEmulatorBackend(), 2),
                       train(p, f, rcuda::createCudaEmulatorBackend(compiled), 2),
                       std::string(f) + " " + prec + " " + opt);
      }
}

TEST(CudaDevice, CompiledFusedKernelsMatchTheInterpretedKernel) {
  std::string why;
  if (!rt::cudaAvailable(why))
    GTEST_SKIP() << "no CUDA device available (" << why << ")";
  if (!rcuda::loadNvrtc(why))
    GTEST_SKIP() << why;
  TempDir cache;
  setenv("AMPC_FUSED_CACHE_DIR", cache.path.c_str(), 1);
  for (auto [f, prec, opt] : {std::tuple{"mlp", "fp32", "sgd"}, {"cnn", "fp16", "adamw"},
                              {"transformer", "bf16", "adamw"}}) {
    plan::Plan p;
    ASSERT_TRUE(compileTrainingPlan(f, prec, opt, p));
    std::string error;
    setenv("AMPC_FUSED_INTERPRET", "1", 1);
    auto interpreted = train(p, f, rt::createCudaBackend({}, error), 3);
    unsetenv("AMPC_FUSED_INTERPRET");
    auto compiled = train(p, f, rt::createCudaBackend({}, error), 3);
    // Again, from the disk cache.
    auto cached = train(p, f, rt::createCudaBackend({}, error), 3);
    std::string what = std::string(f) + " " + prec + " " + opt;
    expectSameBits(interpreted, compiled, what + ", compiled");
    expectSameBits(interpreted, cached, what + ", cached");
  }
  EXPECT_FALSE(fs::is_empty(cache.path)) << "no cubin was cached";
  unsetenv("AMPC_FUSED_CACHE_DIR");
}
