//===- CpuKernelTest.cpp - CPU kernels against the reference interpreter ---===//
//
// Every case is a small ONNX model (text, with `T` standing for the element
// type under test) run on random inputs twice: by the reference interpreter
// (double math, one rounding per stored value) and through lowerToPlan and
// the CPU backend, with 1 and 2 threads. Checks:
//   - each result against the interpreter, element by element:
//       |cpu - ref| <= relTol(T) * |ref| + 1e-5 * max|ref| (+ 2^-24 for fp16)
//     relTol: fp32 0 (the 1e-5 term covers fp32 math against double math),
//     fp16 2^-10 and bf16 2^-7: one ulp of the stored result, since both
//     sides round a result that differs only by fp32-vs-double math to
//     nearest even, which can land one ulp apart. Integer and bool results
//     must be equal;
//   - determinism: a second run with the same thread count is bitwise equal;
//   - 1 thread against 2 threads: within the same tolerance.
// A compact table (op, dtype, cases, largest error relative to max|ref|) is
// printed at the end.
//
//===----------------------------------------------------------------------===//

#include "FixtureUtil.h"

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/Lower/Lower.h"
#include "ampc/ONNX/Import.h"
#include "ampc/rt/Backend.h"
#include "ampc/rt/Session.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <cstring>
#include <random>

using namespace ampc;
using ampc::test::toHostArray;

namespace {

//===----------------------------------------------------------------------===//
// Harness
//===----------------------------------------------------------------------===//

struct Row {
  int cases = 0;
  double maxErr = 0;
};

std::map<std::pair<std::string, std::string>, Row> &table() {
  static std::map<std::pair<std::string, std::string>, Row> t;
  return t;
}

const char *typeName(DType t) {
  switch (t) {
  case DType::F32:
    return "float";
  case DType::F16:
    return "float16";
  case DType::BF16:
    return "bfloat16";
  default:
    return "?";
  }
}

/// Generates the value of one graph input.
using Generator = std::function<Tensor(const TensorType &, std::mt19937_64 &)>;

Tensor uniform(const TensorType &type, std::mt19937_64 &rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(type.numElements());
  for (double &x : v)
    x = u(rng);
  return Tensor::fromDoubles(type, v);
}

Generator uniformIn(double lo, double hi) {
  return [=](const TensorType &t, std::mt19937_64 &rng) { return uniform(t, rng, lo, hi); };
}

/// Integers in [lo, hi] (int64/int32 inputs: indices, labels).
Generator intsIn(int64_t lo, int64_t hi) {
  return [=](const TensorType &t, std::mt19937_64 &rng) {
    std::uniform_int_distribution<int64_t> u(lo, hi);
    std::vector<int64_t> v(t.numElements());
    for (int64_t &x : v)
      x = u(rng);
    return Tensor::fromInt64s(t, v);
  };
}

Generator boolsWith(double pTrue) {
  return [=](const TensorType &t, std::mt19937_64 &rng) {
    std::bernoulli_distribution u(pTrue);
    std::vector<int64_t> v(t.numElements());
    for (int64_t &x : v)
      x = u(rng);
    return Tensor::fromInt64s(t, v);
  };
}

/// Integers in [0, n) as floats: few distinct values, so windows and rows
/// hold ties.
Generator levels(int n) {
  return [=](const TensorType &t, std::mt19937_64 &rng) {
    std::uniform_int_distribution<int> u(0, n - 1);
    std::vector<double> v(t.numElements());
    for (double &x : v)
      x = u(rng);
    return Tensor::fromDoubles(t, v);
  };
}

/// A fixed value (shape inputs and the like).
Generator fixed(std::vector<double> values) {
  return [=](const TensorType &t, std::mt19937_64 &) { return Tensor::fromDoubles(t, values); };
}

struct Case {
  std::string op;    ///< row of the table
  std::string model; ///< ONNX text; every standalone `T` becomes the type name
  std::map<std::string, Generator> gens = {};
  /// Multiplies the fp32 term of the tolerance (long reductions).
  double f32Scale = 1.0;
  /// Compare only these outputs (all when empty).
  std::vector<std::string> only = {};
  /// 1 and 2 threads must give the same bits (kernels whose partial sums do
  /// not depend on the thread count).
  bool threadsBitwise = false;
};

std::string substitute(const std::string &text, DType t) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    bool word = text[i] == 'T' && (i == 0 || !std::isalnum(static_cast<unsigned char>(text[i - 1]))) &&
                (i + 1 == text.size() || !std::isalnum(static_cast<unsigned char>(text[i + 1])));
    if (word && i + 1 < text.size() && (text[i + 1] == '[' || text[i + 1] == ' '))
      out += typeName(t);
    else
      out += text[i];
  }
  return out;
}

struct RunResult {
  std::vector<rt::HostArray> outputs;
  bool ok = false;
};

RunResult runOnCpu(const plan::Plan &p, const std::map<std::string, Tensor> &feeds,
                   const std::vector<std::string> &names, int threads, int runs,
                   bool &bitwiseSame) {
  RunResult r;
  std::string error;
  auto session = rt::Session::fromPlan(p, rt::createCpuBackend({threads}), error);
  if (!session) {
    ADD_FAILURE() << "load: " << error;
    return r;
  }
  int prog = session->program("step");
  bitwiseSame = true;
  for (int run = 0; run < runs; ++run) {
    // Fed before every run: the memory planner may reuse an input's buffer
    // after its last read.
    for (const auto &[name, t] : feeds)
      if (!session->feed(prog, name, toHostArray(t), "test", error)) {
        ADD_FAILURE() << error;
        return r;
      }
    if (!session->run(prog, error)) {
      ADD_FAILURE() << "run: " << error;
      return r;
    }
    std::vector<rt::HostArray> outs;
    for (const std::string &n : names) {
      rt::HostArray a;
      if (!session->output(prog, n, a, error)) {
        ADD_FAILURE() << "output: " << error;
        return r;
      }
      outs.push_back(std::move(a));
    }
    if (run > 0)
      for (size_t i = 0; i < outs.size(); ++i)
        bitwiseSame = bitwiseSame && outs[i].bytes == r.outputs[i].bytes;
    r.outputs = std::move(outs);
  }
  r.ok = true;
  return r;
}

bool isFloatElem(rt::ElemType t) {
  return t == rt::ElemType::F32 || t == rt::ElemType::F16 || t == rt::ElemType::BF16 ||
         t == rt::ElemType::F64;
}

/// Largest |a - b| / max|b|, and whether every element is within tolerance.
double compare(const rt::HostArray &a, const std::vector<double> &ref, rt::ElemType type,
               double f32Scale, bool &within, std::string &where) {
  within = true;
  if (static_cast<size_t>(a.numElements()) != ref.size()) {
    within = false;
    where = "size differs";
    return INFINITY;
  }
  double maxRef = 0;
  for (double v : ref)
    if (std::isfinite(v))
      maxRef = std::max(maxRef, std::fabs(v));
  double rel = type == rt::ElemType::F16 ? std::ldexp(1.0, -10)
               : type == rt::ElemType::BF16 ? std::ldexp(1.0, -7)
                                            : 0.0;
  double absTol = 1e-5 * f32Scale * maxRef + (type == rt::ElemType::F16 ? std::ldexp(1.0, -24) : 0);
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double x = a.at(static_cast<int64_t>(i)), y = ref[i];
    if (!isFloatElem(type)) {
      if (x != y && within) {
        within = false;
        where = "element " + std::to_string(i) + ": " + std::to_string(x) + " vs " + std::to_string(y);
      }
      continue;
    }
    if (std::isnan(y) || std::isinf(y)) {
      bool same = std::isnan(y) ? std::isnan(x) : x == y;
      if (!same && within) {
        within = false;
        where = "element " + std::to_string(i) + ": " + std::to_string(x) + " vs " + std::to_string(y);
      }
      continue;
    }
    double d = std::fabs(x - y);
    if (!(d <= rel * std::fabs(y) + absTol) && within) {
      within = false;
      char buf[160];
      std::snprintf(buf, sizeof buf, "element %zu: %.9g vs reference %.9g", i, x, y);
      where = buf;
    }
    if (!(d == d))
      d = INFINITY;
    worst = std::max(worst, maxRef > 0 ? d / maxRef : d);
  }
  return worst;
}

std::vector<double> values(const rt::HostArray &a) {
  std::vector<double> v(a.numElements());
  for (int64_t i = 0; i < a.numElements(); ++i)
    v[i] = a.at(i);
  return v;
}

uint64_t caseSeed(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s)
    h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

/// Runs one case for one element type; returns false on failure (already
/// reported through gtest).
void runCase(const Case &c, DType t) {
  // Imported as fp32 (ONNX's type constraints predate bf16 for many ops),
  // then every fp32 value is retyped; the interpreter and the lowering follow
  // the recorded types.
  std::string text = substitute(c.model, DType::F32);
  SCOPED_TRACE(c.op + " " + typeName(t) + "\n" + text);
  auto g = importModelText(text, c.op);
  if (!g) {
    ADD_FAILURE() << llvm::toString(g.takeError());
    return;
  }
  if (t != DType::F32) {
    for (Value *v : (*g)->inputs())
      if (v->dtype() == DType::F32)
        v->setDType(t);
    for (Value *v : (*g)->initializers())
      if (v->dtype() == DType::F32) {
        Tensor d = v->data()->castTo(t);
        v->setDType(t);
        v->setData(std::move(d));
      }
    for (Node *n : (*g)->nodes())
      for (Value *v : n->outputs())
        if (v && v->dtype() == DType::F32)
          v->setDType(t);
  }
  text = substitute(c.model, t);
  std::mt19937_64 rng(caseSeed(c.op + text));
  std::map<std::string, Tensor> feeds;
  for (const Value *v : (*g)->inputs()) {
    auto it = c.gens.find(v->name());
    if (it != c.gens.end())
      feeds[v->name()] = it->second(v->type(), rng);
    else if (isFloat(v->dtype()))
      feeds[v->name()] = uniform(v->type(), rng);
    else {
      ADD_FAILURE() << "no generator for input " << v->name();
      return;
    }
  }
  Interpreter interp(**g);
  auto ref = interp.run(feeds);
  if (!ref) {
    ADD_FAILURE() << "interpreter: " << llvm::toString(ref.takeError());
    return;
  }
  std::vector<std::string> names;
  for (const Value *v : (*g)->outputs())
    names.push_back(v->name());
  LowerOptions lo;
  auto p = lowerToPlan(**g, lo);
  if (!p) {
    ADD_FAILURE() << "lower: " << llvm::toString(p.takeError());
    return;
  }
  bool same1 = false, same2 = false;
  RunResult r1 = runOnCpu(*p, feeds, names, 1, 2, same1);
  RunResult r2 = runOnCpu(*p, feeds, names, 2, 2, same2);
  if (!r1.ok || !r2.ok)
    return;
  EXPECT_TRUE(same1) << "1 thread: two runs differ";
  EXPECT_TRUE(same2) << "2 threads: two runs differ";
  // Cases without a `T` operand (integers, bool) run once, listed as "int".
  bool typed = substitute(c.model, DType::F16) != substitute(c.model, DType::F32);
  Row &row = table()[{c.op, typed ? typeName(t) : "int"}];
  ++row.cases;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!c.only.empty() && std::find(c.only.begin(), c.only.end(), names[i]) == c.only.end())
      continue;
    std::vector<double> refv = (*ref)[i].toDoubles();
    for (const RunResult *r : {&r2, &r1}) {
      bool within;
      std::string where;
      double e = compare(r->outputs[i], refv, r->outputs[i].type, c.f32Scale, within, where);
      row.maxErr = std::max(row.maxErr, e);
      EXPECT_TRUE(within) << "output '" << names[i] << "' (" << (r == &r1 ? 1 : 2)
                          << " threads): " << where;
    }
    bool within;
    std::string where;
    compare(r1.outputs[i], values(r2.outputs[i]), r1.outputs[i].type, c.f32Scale, within, where);
    EXPECT_TRUE(within) << "output '" << names[i] << "': 1 vs 2 threads: " << where;
    if (c.threadsBitwise) {
      EXPECT_TRUE(r1.outputs[i].bytes == r2.outputs[i].bytes)
          << "output '" << names[i] << "': 1 and 2 threads differ in the bits";
    }
  }
}

void runAllTypes(const Case &c) {
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    runCase(c, t);
}

std::string header(const std::string &extraOpsets = "") {
  return "<ir_version: 8, opset_import: [\"\" : 17" + extraOpsets + "]>\n";
}
const char *kAmpc = ", \"ampc\" : 1";

class PrintTable : public ::testing::Environment {
public:
  void TearDown() override {
    if (table().empty())
      return;
    std::printf("\n%-34s %-9s %6s  %s\n", "op", "dtype", "cases", "max err (rel. to max|ref|)");
    for (const auto &[key, row] : table())
      std::printf("%-34s %-9s %6d  %.3g\n", key.first.c_str(), key.second.c_str(), row.cases,
                  row.maxErr);
  }
};
::testing::Environment *const kTable = ::testing::AddGlobalTestEnvironment(new PrintTable);

} // namespace

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

TEST(CpuKernel, MatMul) {
  struct Shapes {
    const char *a, *b, *y;
  };
  for (Shapes s : std::vector<Shapes>{{"[5,7]", "[7,3]", "[5,3]"},
                                      {"[2,4,16]", "[16,48]", "[2,4,48]"},
                                      {"[2,3,4,5]", "[2,3,5,6]", "[2,3,4,6]"},
                                      {"[3,1,4,5]", "[2,5,6]", "[3,2,4,6]"},
                                      {"[4,5]", "[3,5,2]", "[3,4,2]"},
                                      {"[7]", "[7,3]", "[3]"},
                                      {"[2,3,7]", "[7]", "[2,3]"},
                                      {"[7]", "[7]", ""},
                                      {"[33,65]", "[65,17]", "[33,17]"}})
    runAllTypes({"MatMul", header() + "g (T" + s.a + " a, T" + s.b + " b) => (T" + s.y +
                               (*s.y ? "" : " ") + " y) { y = MatMul (a, b) }"});
}

/// A Transpose of A's last two axes becomes the lowering's transA: oneDNN
/// reads A through exchanged strides, or (native bf16, A of at most 1 MiB)
/// from a plain copy that a reorder makes first (GemmKernels.cpp).
TEST(CpuKernel, MatMulTransposedA) {
  struct Shapes {
    const char *a, *perm, *b, *y;
  };
  for (Shapes s : std::vector<Shapes>{{"[64,24]", "[1,0]", "[64,40]", "[24,40]"},
                                      {"[1,33,17]", "[0,2,1]", "[33,9]", "[1,17,9]"},
                                      {"[2,16,8]", "[0,2,1]", "[2,16,12]", "[2,8,12]"}})
    runAllTypes({"MatMul", header() + "g (T" + s.a + " a, T" + s.b + " b) => (T" + s.y +
                               " y) { t = Transpose <perm = " + s.perm +
                               "> (a)\n y = MatMul (t, b) }"});
}

TEST(CpuKernel, Gemm) {
  struct G {
    const char *a, *b, *c, *attrs, *y;
  };
  for (G s : std::vector<G>{{"[4,6]", "[6,5]", "[5]", "", "[4,5]"},
                            {"[6,4]", "[6,5]", "[4,5]", "<transA = 1>", "[4,5]"},
                            {"[4,6]", "[5,6]", "[1,5]", "<transB = 1>", "[4,5]"},
                            {"[6,4]", "[5,6]", "[4,1]", "<transA = 1, transB = 1, alpha = 0.5, beta = 2.0>", "[4,5]"},
                            {"[8,16]", "[32,16]", "[32]", "<transB = 1>", "[8,32]"},
                            {"[3,6]", "[6,5]", "", "<alpha = 1.5>", "[3,5]"}}) {
    std::string attrs = s.attrs;
    runAllTypes({"Gemm", header() + "g (T" + s.a + " a, T" + s.b + " b, T" + s.c + (*s.c ? "" : " ") + " c) => (T" +
                             s.y + " y) { y = Gemm " + attrs + " (a, b, c) }"});
  }
  runAllTypes({"Gemm", header() + "g (T[4,6] a, T[6,5] b) => (T[4,5] y) { y = Gemm <alpha = 2.0> (a, b) }"});
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

namespace {
struct ConvCase {
  const char *x, *w, *y, *attrs;
};
const std::vector<ConvCase> kConvCases = {
    {"[2,3,8,8]", "[4,3,3,3]", "[2,4,8,8]", "pads = [1,1,1,1]"},
    {"[2,3,8,8]", "[4,3,3,3]", "[2,4,3,3]", "strides = [2,2]"},
    {"[1,4,9,9]", "[6,2,3,3]", "[1,6,9,7]", "group = 2, dilations = [2,2], pads = [2,1,2,1]"},
    {"[2,3,10]", "[5,3,3]", "[2,5,5]", "strides = [2], pads = [1,1]"},
    {"[1,2,7,7]", "[3,2,3,3]", "[1,3,4,4]", "auto_pad = \"SAME_UPPER\", strides = [2,2]"},
    {"[1,2,7,6]", "[3,2,2,3]", "[1,3,4,3]", "auto_pad = \"SAME_LOWER\", strides = [2,2]"},
    {"[2,4,6,6]", "[4,1,3,3]", "[2,4,6,6]", "group = 4, pads = [1,1,1,1]"},
    {"[1,3,5,5]", "[2,3,1,1]", "[1,2,5,5]", "kernel_shape = [1,1]"},
    {"[2,2,4,4,4]", "[3,2,2,2,2]", "[2,3,3,3,3]", "strides = [1,1,1]"},
    // 16 channels in and out: the fp32 forward runs on channels-last layouts.
    {"[2,16,6,6]", "[16,16,3,3]", "[2,16,6,6]", "pads = [1,1,1,1]"},
    {"[2,16,7,7]", "[16,16,3,3]", "[2,16,3,3]", "strides = [2,2]"},
    // 3x3, stride 1, 32 channels and more: Winograd in fp32 (useWinograd).
    {"[2,32,6,6]", "[32,32,3,3]", "[2,32,6,6]", "pads = [1,1,1,1]"},
    {"[3,32,7,5]", "[48,32,3,3]", "[3,48,5,3]", "strides = [1,1]"},
    // Pads of 2, which oneDNN's Winograd does not take: prepared again as a
    // direct convolution (ConvForward::prepare), batch in chunks of 5.
    {"[10,32,6,6]", "[32,32,3,3]", "[10,32,8,8]", "pads = [2,2,2,2]"},
    // Batches the forward pass splits into chunks of images (5 and 6).
    {"[10,3,6,6]", "[8,3,3,3]", "[10,8,6,6]", "pads = [1,1,1,1]"},
    {"[12,16,5,5]", "[16,16,3,3]", "[12,16,5,5]", "pads = [1,1,1,1]"},
};
} // namespace

/// fold-matmul-bias's premise in fp32: a Gemm adding a bias row gives the
/// bits of the MatMul and then the Add (oneDNN adds the bias to the finished
/// fp32 product), with a K long enough for oneDNN to block it.
TEST(CpuKernel, GemmBiasIsMatMulThenAdd) {
  auto g =
      importModelText(header() + "g (float[96,384] x, float[200,384] w, float[200] b) => "
                                 "(float[96,200] y1, float[96,200] y2) {\n"
                                 "  y1 = Gemm <transB = 1> (x, w, b)\n"
                                 "  wt = Transpose (w)\n  m = MatMul (x, wt)\n  y2 = Add (m, b)\n}",
                      "gemmbias");
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  std::mt19937_64 rng(5);
  std::map<std::string, Tensor> feeds;
  for (const Value *v : (*g)->inputs())
    feeds[v->name()] = uniform(v->type(), rng);
  auto p = lowerToPlan(**g, LowerOptions{});
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  for (int threads : {1, 2}) {
    bool same = true;
    RunResult r = runOnCpu(*p, feeds, {"y1", "y2"}, threads, 1, same);
    ASSERT_TRUE(r.ok);
    EXPECT_TRUE(r.outputs[0].bytes == r.outputs[1].bytes) << threads << " threads";
  }
}

TEST(CpuKernel, Conv) {
  for (const ConvCase &c : kConvCases) {
    std::string a = c.attrs;
    runAllTypes({"Conv", header() + "g (T" + c.x + " x, T" + c.w + " w, T[" +
                             std::string(c.w + 1, std::strchr(c.w, ',') - c.w - 1) + "] b) => (T" +
                             c.y + " y) { y = Conv <" + a + "> (x, w, b) }"});
    runAllTypes({"Conv", header() + "g (T" + c.x + " x, T" + c.w + " w) => (T" + c.y +
                             " y) { y = Conv <" + a + "> (x, w) }"});
  }
}

TEST(CpuKernel, ConvGrad) {
  for (const ConvCase &c : kConvCases) {
    std::string a = c.attrs;
    std::string m(c.w + 1, std::strchr(c.w, ',') - c.w - 1);
    runAllTypes({"ampc.ConvGrad", header(kAmpc) + "g (T" + c.y + " dy, T" + c.x + " x, T" + c.w +
                                      " w) => (T" + c.x + " dx, T" + c.w + " dw, T[" + m +
                                      "] db) { dx, dw, db = ampc.ConvGrad <" + a +
                                      "> (dy, x, w) }"});
  }
  // Only some results.
  runAllTypes({"ampc.ConvGrad", header(kAmpc) + "g (T[2,4,3,3] dy, T[2,3,8,8] x, T[4,3,3,3] w) => "
                                                "(T[4,3,3,3] dw) { _, dw = ampc.ConvGrad <strides = "
                                                "[2,2]> (dy, x, w) }"});
  runAllTypes({"ampc.ConvGrad", header(kAmpc) + "g (T[2,4,8,8] dy, T[2,3,8,8] x, T[4,3,3,3] w) => "
                                                "(T[2,3,8,8] dx, T[4] db) { dx, , db = ampc.ConvGrad "
                                                "<pads = [1,1,1,1]> (dy, x, w) }"});
}

/// The documented error bound of the CPU backend's Winograd convolutions
/// (runtime/cpu/ConvKernels.cpp, useWinograd): each result of Conv and of
/// ConvGrad (dX, dW) within 2^-18 of the sum of the absolute products it
/// adds, against double math, with Winograd on and off; and Winograd runs
/// where it should: every pass from 32 channels on, only the weights'
/// gradient at 16 channels (its results alone differ from the direct ones).
static void checkWinogradConv(int C, int M, bool allPasses) {
  SCOPED_TRACE("C = " + std::to_string(C) + ", M = " + std::to_string(M));
  const int N = 4, H = 10, W = 9;
  auto dims = [](std::initializer_list<int> d) {
    std::string s;
    for (int v : d)
      s += (s.empty() ? "" : ",") + std::to_string(v);
    return "float[" + s + "]";
  };
  std::string text = header(kAmpc) + "g (" + dims({N, C, H, W}) + " x, " + dims({M, C, 3, 3}) +
                     " w, " + dims({N, M, H, W}) + " dy) => (" + dims({N, M, H, W}) + " y, " +
                     dims({N, C, H, W}) + " dx, " + dims({M, C, 3, 3}) + " dw) {\n" +
                     "  y = Conv <pads = [1,1,1,1]> (x, w)\n"
                     "  dx, dw = ampc.ConvGrad <pads = [1,1,1,1]> (dy, x, w)\n}";
  auto g = importModelText(text, "winograd");
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  std::map<std::string, std::vector<double>> in;
  std::map<std::string, Tensor> feeds;
  for (const Value *v : (*g)->inputs()) {
    std::vector<double> d(v->type().numElements());
    for (double &e : d) // fp32 values, so that double math is exact on them
      e = static_cast<float>(u(rng));
    in[v->name()] = d;
    feeds[v->name()] = Tensor::fromDoubles(v->type(), d);
  }
  const std::vector<double> &x = in["x"], &w = in["w"], &dy = in["dy"];
  auto X = [&](int n, int c, int i, int j) { return x[((n * C + c) * H + i) * W + j]; };
  auto Wt = [&](int m, int c, int a, int b) { return w[((m * C + c) * 3 + a) * 3 + b]; };
  auto DY = [&](int n, int m, int i, int j) { return dy[((n * M + m) * H + i) * W + j]; };
  // Reference results and the sums of |products| they bound the error by.
  std::vector<double> y(N * M * H * W), ys(y.size()), dx(x.size()), dxs(x.size()), dw(w.size()),
      dws(w.size());
  for (int n = 0; n < N; ++n)
    for (int m = 0; m < M; ++m)
      for (int i = 0; i < H; ++i)
        for (int j = 0; j < W; ++j)
          for (int c = 0; c < C; ++c)
            for (int a = 0; a < 3; ++a)
              for (int b = 0; b < 3; ++b) {
                int ii = i + a - 1, jj = j + b - 1;
                if (ii < 0 || jj < 0 || ii >= H || jj >= W)
                  continue;
                double xv = X(n, c, ii, jj), wv = Wt(m, c, a, b), g = DY(n, m, i, j);
                size_t yi = ((n * M + m) * H + i) * W + j, xi = ((n * C + c) * H + ii) * W + jj,
                       wi = ((m * C + c) * 3 + a) * 3 + b;
                y[yi] += xv * wv, ys[yi] += std::fabs(xv * wv);
                dx[xi] += g * wv, dxs[xi] += std::fabs(g * wv);
                dw[wi] += g * xv, dws[wi] += std::fabs(g * xv);
              }
  LowerOptions lo;
  auto p = lowerToPlan(**g, lo);
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  const std::vector<std::string> names = {"y", "dx", "dw"};
  const std::vector<const std::vector<double> *> refs = {&y, &dx, &dw}, sums = {&ys, &dxs, &dws};
  const char *saved = std::getenv("AMPC_CPU_CONV_WINOGRAD");
  std::string restore = saved ? saved : "";
  std::vector<std::vector<rt::HostArray>> results;
  for (const char *mode : {"on", "off"}) {
    setenv("AMPC_CPU_CONV_WINOGRAD", mode, 1);
    bool same = false;
    RunResult r = runOnCpu(*p, feeds, names, 2, 2, same);
    ASSERT_TRUE(r.ok);
    EXPECT_TRUE(same) << mode << ": two runs differ";
    for (size_t k = 0; k < names.size(); ++k) {
      double worst = 0;
      for (size_t e = 0; e < refs[k]->size(); ++e)
        worst = std::max(worst, std::fabs(r.outputs[k].at(e) - (*refs[k])[e]) / (*sums[k])[e]);
      EXPECT_LE(worst, std::ldexp(1.0, -18)) << names[k] << ", Winograd " << mode;
      std::printf("C %2d M %2d Winograd %-3s %-2s: largest error %.3g of sum |products|\n", C, M,
                  mode, names[k].c_str(), worst);
    }
    results.push_back(std::move(r.outputs));
  }
  if (saved)
    setenv("AMPC_CPU_CONV_WINOGRAD", restore.c_str(), 1);
  else
    unsetenv("AMPC_CPU_CONV_WINOGRAD");
  EXPECT_EQ(results[0][0].bytes != results[1][0].bytes, allPasses) << "Conv";
  EXPECT_EQ(results[0][1].bytes != results[1][1].bytes, allPasses) << "dX";
  EXPECT_NE(results[0][2].bytes, results[1][2].bytes) << "dW did not run as Winograd";
}

TEST(CpuKernel, ConvWinogradErrorBound) {
  checkWinogradConv(32, 48, true);
  checkWinogradConv(16, 16, false);
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

namespace {
struct PoolCase {
  const char *x, *y, *attrs;
};
const std::vector<PoolCase> kPoolCases = {
    {"[2,3,8,8]", "[2,3,4,4]", "kernel_shape = [2,2], strides = [2,2]"},
    {"[2,3,7,7]", "[2,3,4,4]", "kernel_shape = [3,3], strides = [2,2], pads = [1,1,1,1]"},
    {"[1,2,7,7]", "[1,2,3,3]", "kernel_shape = [3,3], strides = [2,2], ceil_mode = 1"},
    {"[1,2,8,8]", "[1,2,4,4]", "kernel_shape = [3,3], strides = [2,2], pads = [1,1,0,0], ceil_mode = 1"},
    {"[2,2,9]", "[2,2,4]", "kernel_shape = [3], strides = [2], pads = [0,1]"},
    {"[1,2,9,9]", "[1,2,5,5]", "kernel_shape = [3,3], dilations = [2,2], pads = [2,2,2,2], strides = [2,2]"},
    {"[1,3,5,6]", "[1,3,3,3]", "kernel_shape = [2,3], auto_pad = \"SAME_UPPER\", strides = [2,2]"},
    {"[1,2,4,5,6]", "[1,2,2,2,3]", "kernel_shape = [2,2,2], strides = [2,2,2]"},
};
} // namespace

TEST(CpuKernel, MaxPool) {
  for (const PoolCase &c : kPoolCases) {
    std::string a = c.attrs;
    runAllTypes({"MaxPool", header() + "g (T" + c.x + " x) => (T" + c.y + " y, int64" + c.y +
                                " i) { y, i = MaxPool <" + a + "> (x) }"});
  }
  runAllTypes({"MaxPool", header() + "g (T[2,3,5,4] x) => (T[2,3,4,3] y, int64[2,3,4,3] i) "
                                     "{ y, i = MaxPool <kernel_shape = [2,2], storage_order = 1> (x) }"});
  runAllTypes({"MaxPool", header() + "g (T[2,3,6,6] x) => (T[2,3,3,3] y) "
                                     "{ y = MaxPool <kernel_shape = [2,2], strides = [2,2]> (x) }"});
}

TEST(CpuKernel, AveragePool) {
  for (const PoolCase &c : kPoolCases) {
    if (std::string(c.attrs).find("dilations") != std::string::npos)
      continue; // AveragePool has dilations from opset 19 only
    for (const char *cip : {"0", "1"}) {
      std::string a = std::string(c.attrs) + ", count_include_pad = " + cip;
      runAllTypes({"AveragePool", header() + "g (T" + c.x + " x) => (T" + c.y +
                                      " y) { y = AveragePool <" + a + "> (x) }"});
    }
  }
}

TEST(CpuKernel, GlobalPool) {
  for (const char *op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    runAllTypes({op, header() + "g (T[2,3,5,7] x) => (T[2,3,1,1] y) { y = " + op + " (x) }"});
    runAllTypes({op, header() + "g (T[3,4,9] x) => (T[3,4,1] y) { y = " + op + " (x) }"});
    runAllTypes({op, header() + "g (T[2,5,40,40] x) => (T[2,5,1,1] y) { y = " + op + " (x) }"});
  }
}

TEST(CpuKernel, PoolGrads) {
  for (const PoolCase &c : kPoolCases) {
    std::string a = c.attrs;
    // MaxPoolGrad from X, on random values and on a few levels (windows
    // with tied maxima, where the first in window order must win).
    for (bool ties : {false, true})
      runAllTypes({"ampc.MaxPoolGrad",
                   header(kAmpc) + "g (T" + c.x + " x, T" + c.y + " dy) => (T" + c.x +
                       " dx) { dx = ampc.MaxPoolGrad <" + a + ", shape = " + std::string(c.x) +
                       "> (dy, x) }",
                   ties ? std::map<std::string, Generator>{{"x", levels(3)}}
                        : std::map<std::string, Generator>{}});
    if (a.find("dilations") != std::string::npos)
      continue;
    for (const char *cip : {"0", "1"})
      runAllTypes({"ampc.AveragePoolGrad",
                   header(kAmpc) + "g (T" + c.y + " dy) => (T" + c.x +
                       " dx) { dx = ampc.AveragePoolGrad <" + a + ", count_include_pad = " + cip +
                       ", shape = " + std::string(c.x) + "> (dy) }"});
  }
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

TEST(CpuKernel, BatchNormalization) {
  std::map<std::string, Generator> g{{"v", uniformIn(0.5, 2.0)}};
  runAllTypes({"BatchNormalization",
               header() + "g (T[2,3,4,5] x, T[3] s, T[3] b, T[3] m, T[3] v) => (T[2,3,4,5] y) "
                          "{ y = BatchNormalization <epsilon = 0.001> (x, s, b, m, v) }",
               g});
  runAllTypes({"BatchNormalization",
               header() + "g (T[4,3,6,5] x, T[3] s, T[3] b, T[3] m, T[3] v) => (T[4,3,6,5] y, T[3] rm, "
                          "T[3] rv) { y, rm, rv = BatchNormalization <training_mode = 1, momentum = "
                          "0.8> (x, s, b, m, v) }",
               g});
  runAllTypes({"BatchNormalization",
               header() + "g (T[8,5] x, T[5] s, T[5] b, T[5] m, T[5] v) => (T[8,5] y, T[5] rm, "
                          "T[5] rv) { y, rm, rv = BatchNormalization <training_mode = 1> (x, s, b, m, v) }",
               g});
  // Enough rows for two ranges of rows (the row passes split rows over the
  // threads), rows of 39 * 41 elements (a tail after the 16 lanes).
  runAllTypes({"BatchNormalization",
               header() + "g (T[4,6,39,41] x, T[6] s, T[6] b, T[6] m, T[6] v) => (T[4,6,39,41] y, "
                          "T[6] rm, T[6] rv) { y, rm, rv = BatchNormalization <training_mode = 1> "
                          "(x, s, b, m, v) }",
               g, 1.0, {}, true});
  // The opset-9 form: training when the statistics are asked for.
  runAllTypes({"BatchNormalization",
               "<ir_version: 8, opset_import: [\"\" : 9]>\n"
               "g (T[2,3,4,4] x, T[3] s, T[3] b, T[3] m, T[3] v) => (T[2,3,4,4] y, T[3] rm, T[3] rv, "
               "T[3] sm, T[3] sv) { y, rm, rv, sm, sv = BatchNormalization (x, s, b, m, v) }",
               g});
}

TEST(CpuKernel, LayerNormalization) {
  runAllTypes({"LayerNormalization",
               header() + "g (T[4,6,8] x, T[8] s, T[8] b) => (T[4,6,8] y, T[4,6,1] mu, T[4,6,1] inv) "
                          "{ y, mu, inv = LayerNormalization (x, s, b) }"});
  runAllTypes({"LayerNormalization",
               header() + "g (T[4,6,8] x, T[6,8] s) => (T[4,6,8] y) "
                          "{ y = LayerNormalization <axis = 1, epsilon = 0.01> (x, s) }"});
  runAllTypes({"LayerNormalization",
               header() + "g (T[3,300] x, T[300] s, T[300] b) => (T[3,300] y) "
                          "{ y = LayerNormalization <axis = -1> (x, s, b) }"});
}

TEST(CpuKernel, NormalizationGrads) {
  runAllTypes({"ampc.LayerNormalizationGrad",
               header(kAmpc) + "g (T[4,6,8] x, T[8] s, T[8] b, T[4,6,8] dy) => (T[4,6,8] dx, T[8] ds, "
                               "T[8] db) { y, mu, inv = LayerNormalization (x, s, b)\n dx, ds, db = "
                               "ampc.LayerNormalizationGrad (dy, x, s, mu, inv) }"});
  runAllTypes({"ampc.LayerNormalizationGrad",
               header(kAmpc) + "g (T[5,3,40] x, T[3,40] s, T[5,3,40] dy) => (T[5,3,40] dx, T[3,40] ds) "
                               "{ y, mu, inv = LayerNormalization <axis = 1> (x, s)\n dx, ds = "
                               "ampc.LayerNormalizationGrad <axis = 1> (dy, x, s, mu, inv) }"});
  std::map<std::string, Generator> g{{"v", uniformIn(0.5, 2.0)}};
  runAllTypes({"ampc.BatchNormalizationGrad",
               header(kAmpc) + "g (T[4,3,5,5] dy, T[4,3,5,5] x, T[3] s) => (T[4,3,5,5] dx, T[3] ds, "
                               "T[3] db) { dx, ds, db = ampc.BatchNormalizationGrad <epsilon = 0.001> "
                               "(dy, x, s) }"});
  runAllTypes({"ampc.BatchNormalizationGrad",
               header(kAmpc) + "g (T[4,6,39,41] dy, T[4,6,39,41] x, T[6] s) => (T[4,6,39,41] dx, "
                               "T[6] ds, T[6] db) { dx, ds, db = ampc.BatchNormalizationGrad (dy, x, s) }",
               {}, 1.0, {}, true});
  runAllTypes({"ampc.BatchNormalizationGrad",
               header(kAmpc) + "g (T[4,6,39,41] dy, T[4,6,39,41] x, T[6] s, T[6] m, T[6] v) => "
                               "(T[4,6,39,41] dx, T[6] ds, T[6] db) { dx, ds, db = "
                               "ampc.BatchNormalizationGrad <training_mode = 0> (dy, x, s, m, v) }",
               g, 1.0, {}, true});
  runAllTypes({"ampc.BatchNormalizationGrad",
               header(kAmpc) + "g (T[6,4] dy, T[6,4] x, T[4] s, T[4] m, T[4] v) => (T[6,4] dx, T[4] ds, "
                               "T[4] db) { dx, ds, db = ampc.BatchNormalizationGrad <training_mode = 0> "
                               "(dy, x, s, m, v) }",
               g});
}

//===----------------------------------------------------------------------===//
// Softmax family
//===----------------------------------------------------------------------===//

TEST(CpuKernel, Softmax) {
  struct S {
    const char *shape;
    int axis;
  };
  for (const char *op : {"Softmax", "LogSoftmax", "Hardmax"})
    for (S s : std::vector<S>{{"[4,10]", -1}, {"[2,3,5]", 1}, {"[2,3,4,5]", 0}, {"[3,1000]", 1},
                              {"[2,3,4]", -2}, {"[5,37]", -1}, {"[2,2,64]", 2}}) {
      std::string a = "<axis = " + std::to_string(s.axis) + ">";
      runAllTypes({op, header() + "g (T" + s.shape + " x) => (T" + s.shape + " y) { y = " + op +
                           " " + a + " (x) }",
                   {{"x", uniformIn(-4, 4)}}});
    }
}

TEST(CpuKernel, SoftmaxGrads) {
  for (const char *op : {"Softmax", "LogSoftmax"})
    for (std::pair<const char *, int> s : std::vector<std::pair<const char *, int>>{
             {"[4,10]", -1}, {"[2,3,5]", 1}, {"[3,2,4]", 0}, {"[5,37]", -1}, {"[2,300]", 1}}) {
      std::string a = "<axis = " + std::to_string(s.second) + ">";
      runAllTypes({std::string("ampc.") + op + "Grad",
                   header(kAmpc) + "g (T" + s.first + " x, T" + s.first + " dy) => (T" + s.first +
                       " dx) { y = " + op + " " + a + " (x)\n dx = ampc." + op + "Grad " + a +
                       " (dy, y) }"});
    }
}

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

TEST(CpuKernel, SoftmaxCrossEntropyLoss) {
  std::map<std::string, Generator> g{{"t", intsIn(0, 9)}, {"w", uniformIn(0.5, 1.5)},
                                     {"x", uniformIn(-3, 3)}};
  for (const char *red : {"mean", "sum", "none"}) {
    std::string r = red, lossShape = r == "none" ? "[8]" : " ";
    runAllTypes({"SoftmaxCrossEntropyLoss",
                 header() + "g (T[8,10] x, int64[8] t) => (T" + lossShape + "l, T[8,10] lp) "
                            "{ l, lp = SoftmaxCrossEntropyLoss <reduction = \"" + r + "\"> (x, t) }",
                 g});
    runAllTypes({"SoftmaxCrossEntropyLoss",
                 header() + "g (T[8,10] x, int64[8] t, T[10] w) => (T" + lossShape + "l) "
                            "{ l = SoftmaxCrossEntropyLoss <reduction = \"" + r + "\", ignore_index = 3> (x, t, w) }",
                 {{"t", intsIn(0, 4)}, {"w", uniformIn(0.5, 1.5)}}});
    std::string hd = r == "none" ? "[4,3,2]" : " ";
    runAllTypes({"SoftmaxCrossEntropyLoss",
                 header() + "g (T[4,5,3,2] x, int64[4,3,2] t) => (T" + hd + "l, T[4,5,3,2] lp) "
                            "{ l, lp = SoftmaxCrossEntropyLoss <reduction = \"" + r + "\", ignore_index = -1> (x, t) }",
                 {{"t", intsIn(-1, 4)}}});
    // A vocabulary's row (the contiguous-row path, 16 lanes and a tail).
    std::string vl = r == "none" ? "[3]" : " ";
    runAllTypes({"SoftmaxCrossEntropyLoss",
                 header() + "g (T[3,1001] x, int64[3] t) => (T" + vl + "l, T[3,1001] lp) "
                            "{ l, lp = SoftmaxCrossEntropyLoss <reduction = \"" + r + "\"> (x, t) }",
                 {{"t", intsIn(0, 1000)}, {"x", uniformIn(-8, 8)}}});
  }
}

TEST(CpuKernel, NegativeLogLikelihoodLoss) {
  for (const char *red : {"mean", "sum", "none"}) {
    std::string r = red;
    runAllTypes({"NegativeLogLikelihoodLoss",
                 header() + "g (T[8,10] x, int64[8] t, T[10] w) => (T" + (r == "none" ? "[8]" : " ") +
                     "l) { l = NegativeLogLikelihoodLoss <reduction = \"" + r + "\", ignore_index = 2> (x, t, w) }",
                 {{"t", intsIn(0, 9)}, {"w", uniformIn(0.5, 1.5)}}});
    runAllTypes({"NegativeLogLikelihoodLoss",
                 header() + "g (T[3,4,5] x, int32[3,5] t) => (T" + (r == "none" ? "[3,5]" : " ") +
                     "l) { l = NegativeLogLikelihoodLoss <reduction = \"" + r + "\"> (x, t) }",
                 {{"t", intsIn(0, 3)}}});
  }
}

TEST(CpuKernel, LossGrads) {
  for (const char *red : {"mean", "sum", "none"}) {
    std::string r = red, ls = r == "none" ? "[8]" : " ";
    runAllTypes({"ampc.SoftmaxCrossEntropyLossGrad",
                 header(kAmpc) + "g (T[8,10] x, int64[8] t, T[10] w, T" + ls + "dl) => (T[8,10] dx) "
                     "{ l, lp = SoftmaxCrossEntropyLoss <reduction = \"" + r + "\", ignore_index = 1> (x, t, w)\n"
                     " dx = ampc.SoftmaxCrossEntropyLossGrad <reduction = \"" + r + "\", ignore_index = 1> (dl, lp, t, w) }",
                 {{"t", intsIn(0, 5)}, {"w", uniformIn(0.5, 1.5)}}});
    std::string hs = r == "none" ? "[2,3]" : " ";
    runAllTypes({"ampc.SoftmaxCrossEntropyLossGrad",
                 header(kAmpc) + "g (T[2,4,3] x, int64[2,3] t, T" + hs + "dl) => (T[2,4,3] dx) "
                     "{ l, lp = SoftmaxCrossEntropyLoss <reduction = \"" + r + "\"> (x, t)\n"
                     " dx = ampc.SoftmaxCrossEntropyLossGrad <reduction = \"" + r + "\"> (dl, lp, t) }",
                 {{"t", intsIn(0, 3)}}});
    std::string vs = r == "none" ? "[3]" : " ";
    runAllTypes({"ampc.SoftmaxCrossEntropyLossGrad",
                 header(kAmpc) + "g (T[3,1001] x, int64[3] t, T" + vs + "dl) => (T[3,1001] dx) "
                     "{ l, lp = SoftmaxCrossEntropyLoss <reduction = \"" + r + "\"> (x, t)\n"
                     " dx = ampc.SoftmaxCrossEntropyLossGrad <reduction = \"" + r + "\"> (dl, lp, t) }",
                 {{"t", intsIn(0, 1000)}, {"x", uniformIn(-8, 8)}}});
    runAllTypes({"ampc.NegativeLogLikelihoodLossGrad",
                 header(kAmpc) + "g (int64[8] t, T[10] w, T" + ls + "dl) => (T[8,10] dx) "
                     "{ dx = ampc.NegativeLogLikelihoodLossGrad <reduction = \"" + r +
                     "\", ignore_index = 2, shape = [8,10]> (dl, t, w) }",
                 {{"t", intsIn(0, 9)}, {"w", uniformIn(0.5, 1.5)}}});
  }
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

TEST(CpuKernel, Reduce) {
  struct R {
    const char *x, *y, *axes;
    int keep;
  };
  std::vector<R> cases = {{"[3,4,5]", "[3,1,5]", "[1]", 1},
                          {"[3,4,5]", "[4]", "[0,2]", 0},
                          {"[3,4,5]", "[3,4,1]", "[-1]", 1},
                          {"[3,4,5]", "[1,1,1]", "", 1},
                          {"[2,3,4,5]", "[3,5]", "[0,2]", 0},
                          {"[64,33]", "[1,33]", "[0]", 1},
                          {"[4,1000]", "[4]", "[1]", 0},
                          {"[2,1,3]", "[2,3]", "[1]", 0},
                          {"[300,3,40]", "[3]", "[0,2]", 0},
                          // Columns of more than kColumnSumBlockRows rows:
                          // summed by blocks, the last one partial.
                          {"[200,33]", "[33]", "[0]", 0},
                          {"[3,150,20]", "[1,1,20]", "[0,1]", 1}};
  for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare",
                         "ReduceL1", "ReduceL2", "ReduceProd", "ReduceLogSum", "ReduceLogSumExp"}) {
    std::string o = op;
    for (const R &c : cases) {
      std::string axes = c.axes, keep = "keepdims = " + std::to_string(c.keep);
      std::string model;
      if (o == "ReduceSum") {
        std::string n = axes.empty() ? "0" : std::to_string(std::count(axes.begin(), axes.end(), ',') + 1);
        std::string init = axes.empty() ? "" : " <int64[" + n + "] ax = {" + axes.substr(1, axes.size() - 2) + "}>";
        model = header() + "g (T" + c.x + " x) => (T" + c.y + " y)" + init + " { y = ReduceSum <" + keep +
                "> (x" + (axes.empty() ? "" : ", ax") + ") }";
      } else {
        std::string attrs = keep + (axes.empty() ? "" : ", axes = " + axes);
        model = header() + "g (T" + c.x + " x) => (T" + c.y + " y) { y = " + o + " <" + attrs + "> (x) }";
      }
      std::map<std::string, Generator> g;
      if (o == "ReduceLogSum")
        g["x"] = uniformIn(0.1, 1.0);
      if (o == "ReduceProd")
        g["x"] = uniformIn(0.9, 1.1);
      // Long fp32 sums: the fp32 partial sums differ from double by more.
      runAllTypes({o, model, g, 4.0});
    }
  }
  runAllTypes({"ReduceSum", header() + "g (T[3,4] x) => (T[3,4] y) <int64[0] ax = {}> "
                                       "{ y = ReduceSum <noop_with_empty_axes = 1> (x, ax) }"});
  // Integers.
  for (const char *op : {"ReduceSum", "ReduceMax", "ReduceMin"})
    runCase({op, header() + "g (int64[3,4,5] x) => (int64[3,5] y) <int64[1] ax = {1}> { y = " +
                     std::string(op) + " <keepdims = 0" +
                     (std::string(op) == "ReduceSum" ? std::string("> (x, ax) }") : ", axes = [1]> (x) }"),
             {{"x", intsIn(-50, 50)}}},
            DType::F32);
}

/// Column sums over more than kColumnSumBlockRows rows, in fp32 and bf16:
/// the bits of adding the rows in blocks of 64 (each from zero, in row order)
/// and then the blocks in order, whatever the thread count. The kernel sums
/// the blocks in parallel (a column tile each) and then adds them: 300 rows
/// make four full blocks and a partial one, 600 columns three tiles.
TEST(CpuKernel, ColumnSumBlockOrder) {
  const int R = 300, C = 600;
  for (const char *type : {"float", "bfloat16"}) {
    SCOPED_TRACE(type);
    bool bf16 = std::string(type) == "bfloat16";
    std::string t = type;
    auto g = importModelText(header() + "g (" + t + "[300,600] x) => (" + t +
                                 "[600] y) <int64[1] ax = {0}> "
                                 "{ y = ReduceSum <keepdims = 0> (x, ax) }",
                             "colsum");
    ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
    // Multiples of 1/64 in (-2, 2): exact in bf16 and in fp32 sums of these sizes' partials.
    std::mt19937_64 rng(11);
    std::vector<double> x(R * C);
    for (double &v : x)
      v = static_cast<double>(static_cast<int>(rng() % 255) - 127) / 64.0 +
          static_cast<double>(rng() % 7) * 1e-3; // and some bits past bf16's precision
    std::map<std::string, Tensor> feeds = {
        {"x", Tensor::fromDoubles((*g)->inputs()[0]->type(), x)}};
    std::vector<double> stored = feeds["x"].toDoubles(); // x as the kernel reads it
    std::vector<float> expect(C);
    for (int c = 0; c < C; ++c) {
      float total = 0;
      for (int b0 = 0; b0 < R; b0 += 64) {
        float block = 0;
        for (int r = b0; r < std::min(R, b0 + 64); ++r)
          block += static_cast<float>(stored[r * C + c]);
        total = b0 == 0 ? block : total + block;
      }
      expect[c] = total;
    }
    auto p = lowerToPlan(**g, LowerOptions{});
    ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
    for (int threads : {1, 2, 3}) {
      bool same = true;
      RunResult r = runOnCpu(*p, feeds, {"y"}, threads, 1, same);
      ASSERT_TRUE(r.ok);
      const std::vector<uint8_t> &bytes = r.outputs[0].bytes;
      for (int c = 0; c < C; ++c) {
        uint32_t want;
        std::memcpy(&want, &expect[c], 4);
        uint32_t got;
        if (bf16) {
          // Round to nearest even, as the backend stores bf16 (no NaN here).
          want = (want + 0x7fff + ((want >> 16) & 1)) >> 16;
          uint16_t h;
          std::memcpy(&h, bytes.data() + 2 * c, 2);
          got = h;
        } else {
          std::memcpy(&got, bytes.data() + 4 * c, 4);
        }
        ASSERT_EQ(got, want) << "column " << c << ", " << threads << " threads";
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

TEST(CpuKernel, Transpose) {
  runAllTypes({"Transpose", header() + "g (T[2,3,4] x) => (T[4,2,3] y) { y = Transpose <perm = [2,0,1]> (x) }"});
  runAllTypes({"Transpose", header() + "g (T[2,3,4,5] x) => (T[2,4,3,5] y) { y = Transpose <perm = [0,2,1,3]> (x) }"});
  runAllTypes({"Transpose", header() + "g (T[33,65] x) => (T[65,33] y) { y = Transpose (x) }"});
  runAllTypes({"Transpose", header() + "g (T[2,1,3,1] x) => (T[1,3,2,1] y) { y = Transpose <perm = [3,2,0,1]> (x) }"});
  runCase({"Transpose", header() + "g (int64[2,3,4] x) => (int64[3,4,2] y) { y = Transpose <perm = [1,2,0]> (x) }",
           {{"x", intsIn(-1000, 1000)}}},
          DType::F32);
}

TEST(CpuKernel, ConcatSplit) {
  runAllTypes({"Concat", header() + "g (T[2,3,4] a, T[2,2,4] b, T[2,1,4] c) => (T[2,6,4] y) { y = Concat <axis = 1> (a, b, c) }"});
  runAllTypes({"Concat", header() + "g (T[2,3] a, T[2,5] b) => (T[2,8] y) { y = Concat <axis = -1> (a, b) }"});
  runAllTypes({"Concat", header() + "g (T[2,3] a, T[1,3] b) => (T[3,3] y) { y = Concat <axis = 0> (a, b) }"});
  runCase({"Concat", header() + "g (int64[2] a, int64[3] b) => (int64[5] y) { y = Concat <axis = 0> (a, b) }",
           {{"a", intsIn(-9, 9)}, {"b", intsIn(-9, 9)}}},
          DType::F32);
  runAllTypes({"Split", header() + "g (T[2,6,3] x) => (T[2,1,3] a, T[2,2,3] b, T[2,3,3] c) <int64[3] s = {1,2,3}> "
                                   "{ a, b, c = Split <axis = 1> (x, s) }"});
  runAllTypes({"Split", header() + "g (T[4,6] x) => (T[4,3] a, T[4,3] b) { a, b = Split <axis = -1> (x) }"});
  runAllTypes({"Split", header() + "g (T[4,6] x) => (T[2,6] a, T[2,6] b) { a, b = Split (x) }"});
}

TEST(CpuKernel, Slice) {
  runAllTypes({"Slice", header() + "g (T[5,6,7] x) => (T[3,6,3] y) <int64[2] s = {1,-5}, int64[2] e = {4,100}, "
                                   "int64[2] a = {0,2}, int64[2] st = {1,2}> { y = Slice (x, s, e, a, st) }"});
  runAllTypes({"Slice", header() + "g (T[5,6] x) => (T[5,3] y) <int64[1] s = {-1}, int64[1] e = {-100}, "
                                   "int64[1] a = {1}, int64[1] st = {-2}> { y = Slice (x, s, e, a, st) }"});
  runAllTypes({"Slice", header() + "g (T[4,5] x) => (T[2,5] y) <int64[1] s = {1}, int64[1] e = {3}> "
                                   "{ y = Slice (x, s, e) }"});
  runAllTypes({"ampc.SliceGrad", header(kAmpc) + "g (T[3,6,3] dy) => (T[5,6,7] dx) <int64[2] s = {1,-5}, int64[2] e = "
                                                 "{4,100}, int64[2] a = {0,2}, int64[2] st = {1,2}> "
                                                 "{ dx = ampc.SliceGrad <shape = [5,6,7]> (dy, s, e, a, st) }"});
  runAllTypes({"ampc.SliceGrad", header(kAmpc) + "g (T[5,3] dy) => (T[5,6] dx) <int64[1] s = {-1}, int64[1] e = {-100}, "
                                                 "int64[1] a = {1}, int64[1] st = {-2}> "
                                                 "{ dx = ampc.SliceGrad <shape = [5,6]> (dy, s, e, a, st) }"});
}

TEST(CpuKernel, Gather) {
  runAllTypes({"Gather", header() + "g (T[5,4] x, int64[3] i) => (T[3,4] y) { y = Gather <axis = 0> (x, i) }",
               {{"i", intsIn(-5, 4)}}});
  runAllTypes({"Gather", header() + "g (T[2,5,3] x, int32[2,2] i) => (T[2,2,2,3] y) { y = Gather <axis = 1> (x, i) }",
               {{"i", intsIn(0, 4)}}});
  runAllTypes({"Gather", header() + "g (T[6,300] x, int64[4,7] i) => (T[4,7,300] y) { y = Gather (x, i) }",
               {{"i", intsIn(0, 5)}}});
  runAllTypes({"GatherElements", header() + "g (T[3,4] x, int64[3,2] i) => (T[3,2] y) { y = GatherElements <axis = 1> (x, i) }",
               {{"i", intsIn(-4, 3)}}});
  runAllTypes({"GatherElements", header() + "g (T[3,4,2] x, int64[2,4,2] i) => (T[2,4,2] y) { y = GatherElements (x, i) }",
               {{"i", intsIn(0, 2)}}});
  runAllTypes({"ampc.GatherGrad", header(kAmpc) + "g (T[6,4] dy, int64[6] i) => (T[5,4] dx) "
                                                  "{ dx = ampc.GatherGrad <axis = 0, shape = [5,4]> (dy, i) }",
               {{"i", intsIn(-5, 4)}}});
  runAllTypes({"ampc.GatherGrad", header(kAmpc) + "g (T[2,2,3,3] dy, int64[2,3] i) => (T[2,5,3] dx) "
                                                  "{ dx = ampc.GatherGrad <axis = 1, shape = [2,5,3]> (dy, i) }",
               {{"i", intsIn(0, 4)}}});
  runAllTypes({"ampc.GatherGrad", header(kAmpc) + "g (T[8,9,300] dy, int64[8,9] i) => (T[20,300] dx) "
                                                  "{ dx = ampc.GatherGrad <shape = [20,300]> (dy, i) }",
               {{"i", intsIn(0, 19)}}});
}

TEST(CpuKernel, ExpandTilePad) {
  runAllTypes({"Expand", header() + "g (T[3,1] x) => (T[2,3,4] y) <int64[3] s = {2,3,4}> { y = Expand (x, s) }"});
  runAllTypes({"Expand", header() + "g (T[4] x) => (T[3,4] y) <int64[2] s = {3,1}> { y = Expand (x, s) }"});
  runAllTypes({"Tile", header() + "g (T[2,3] x) => (T[4,9] y) <int64[2] r = {2,3}> { y = Tile (x, r) }"});
  runAllTypes({"Tile", header() + "g (T[2,1,3] x) => (T[2,4,3] y) <int64[3] r = {1,4,1}> { y = Tile (x, r) }"});
  for (const char *mode : {"constant", "edge", "reflect"}) {
    std::string m = mode;
    runAllTypes({"Pad", header() + "g (T[3,4] x) => (T[6,7] y) <int64[4] p = {1,2,2,1}, T v = {0.5}> "
                                   "{ y = Pad <mode = \"" + m + "\"> (x, p, v) }"});
    runAllTypes({"Pad", header() + "g (T[2,3,4] x) => (T[2,5,4] y) <int64[6] p = {0,1,0,0,1,0}> "
                                   "{ y = Pad <mode = \"" + m + "\"> (x, p) }"});
  }
  runCase({"Pad", header() + "g (int64[2,3] x) => (int64[4,3] y) <int64[4] p = {1,0,1,0}, int64 v = {7}> "
                             "{ y = Pad (x, p, v) }",
           {{"x", intsIn(-9, 9)}}},
          DType::F32);
}

//===----------------------------------------------------------------------===//
// The fused elementwise kernel, one op at a time
//===----------------------------------------------------------------------===//

/// Every float op of the fused kernel (runtime/include/ampc/rt/FusedEval.h)
/// alone in a step, against the interpreter: unary ops on [-3, 3] (positive
/// where the op needs it), binary ops with broadcasting, comparisons to bool.
TEST(CpuKernel, FusedOps) {
  std::map<std::string, Generator> none;
  std::map<std::string, Generator> positive{{"x", uniformIn(0.1, 4.0)}};
  std::map<std::string, Generator> wide{{"x", uniformIn(-3.0, 3.0)}};
  for (const char *op : {"Neg", "Abs", "Exp", "Relu", "Sigmoid", "Tanh", "Erf", "Floor", "Ceil",
                         "Round", "Sign", "Sin", "Cos", "Softplus", "Softsign", "LeakyRelu", "Elu",
                         "Selu", "HardSigmoid", "HardSwish"})
    runAllTypes({op, header() + "g (T[5,7] x) => (T[5,7] y) { y = " + std::string(op) + " (x) }",
                 wide});
  for (const char *op : {"Log", "Sqrt", "Reciprocal"})
    runAllTypes({op, header() + "g (T[5,7] x) => (T[5,7] y) { y = " + std::string(op) + " (x) }",
                 positive});
  for (const char *op : {"Add", "Sub", "Mul", "Max", "Min", "PRelu"})
    runAllTypes({op, header() + "g (T[5,7] x, T[7] z) => (T[5,7] y) { y = " + std::string(op) +
                         " (x, z) }"});
  runAllTypes({"Div", header() + "g (T[5,7] x, T[5,1] z) => (T[5,7] y) { y = Div (x, z) }",
               {{"z", uniformIn(0.5, 2.0)}}});
  runAllTypes({"Pow", header() + "g (T[5,7] x, T[7] z) => (T[5,7] y) { y = Pow (x, z) }",
               {{"x", uniformIn(0.1, 3.0)}, {"z", uniformIn(-2.0, 2.0)}}});
  for (const char *op : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
    runAllTypes({op, header() + "g (T[5,7] x, T[5,1] z) => (bool[5,7] y) { y = " + std::string(op) +
                         " (x, z) }",
                 {{"x", levels(3)}, {"z", levels(3)}}});
  runAllTypes({"Clip", header() + "g (T[5,7] x, T lo, T hi) => (T[5,7] y) { y = Clip (x, lo, hi) }",
               {{"lo", fixed({-0.5})}, {"hi", fixed({0.25})}}});
  runAllTypes({"Where", header() + "g (bool[5,7] c, T[5,7] x, T[7] z) => (T[5,7] y) { y = Where (c, x, z) }",
               {{"c", boolsWith(0.5)}}});
}

/// Broadcast operands over many blocks of the fused kernel: runs of a row
/// (innermost stride 1), of one repeated value (stride 0), of a strided
/// column, broadcast over outer and middle dimensions, rows that end inside a
/// block and blocks that end inside a row.
TEST(CpuKernel, FusedBroadcastRuns) {
  struct Case {
    const char *x, *z;
  };
  for (Case c : std::vector<Case>{{"[4,3,700]", "[700]"},
                                  {"[4,3,700]", "[3,1]"},
                                  {"[2,3,4,250]", "[3,1,250]"},
                                  {"[2,3,4,250]", "[2,1,4,1]"},
                                  {"[3,1000,3]", "[1000,1]"},
                                  {"[5,2049]", "[5,1]"}})
    runAllTypes({"Add", header() + "g (T" + c.x + " x, T" + c.z + " z) => (T" + c.x +
                            " y) { y = Add (x, z) }"});
  // A column of a transposed view: the innermost stride is neither 0 nor 1.
  runAllTypes({"Mul", header() + "g (T[600,5] x, T[5,600] z) => (T[600,5] y) { t = Transpose "
                                 "<perm = [1, 0]> (z)\n y = Mul (x, t) }"});
}

/// Distance in units in the last place between two finite floats.
int64_t ulpDistance(float a, float b) {
  auto key = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);
  };
  return std::llabs(key(a) - key(b));
}

/// y = OP(x) for an fp32 x of `shape` holding `xs`, run by the CPU backend
/// with 2 threads; empty after a test failure.
std::vector<float> runFloatOp(const std::string &op, const std::vector<int64_t> &shape,
                              const std::vector<double> &xs) {
  std::string dims;
  for (int64_t d : shape)
    dims += (dims.empty() ? "" : ",") + std::to_string(d);
  auto g = importModelText(header() + "g (float[" + dims + "] x) => (float[" + dims +
                               "] y) { y = " + op + " (x) }",
                           op);
  if (!g) {
    ADD_FAILURE() << llvm::toString(g.takeError());
    return {};
  }
  std::map<std::string, Tensor> feeds{{"x", Tensor::fromDoubles(TensorType(DType::F32, shape), xs)}};
  auto p = lowerToPlan(**g, LowerOptions{});
  if (!p) {
    ADD_FAILURE() << llvm::toString(p.takeError());
    return {};
  }
  bool same = false;
  RunResult r = runOnCpu(*p, feeds, {"y"}, 2, 1, same);
  if (!r.ok)
    return {};
  std::vector<float> y(xs.size());
  std::memcpy(y.data(), r.outputs[0].bytes.data(), y.size() * sizeof(float));
  return y;
}

/// The error bound of the fused kernel's transcendentals (docs/design.md):
/// with SLEEF (AVX-512 machines) or libm, fp32 Exp and Log are at most 1 ULP
/// from the correctly rounded result, Tanh 1 with SLEEF and 2 with glibc's
/// tanhf (its documented bound on x86-64; AMPC_CPU_ISA=baseline found 2 at
/// x = -0.97271365), Erf (its own AVX-512 evaluation, libm's elsewhere) at
/// most 2 and Sigmoid (1 / (1 + exp(-x)), three roundings) at most 3, over a
/// dense sweep of each function's range (Erf's also near 0, where its series
/// must keep the relative error small, and across its polynomial's interval
/// [1, 3.92] up to where erf rounds to 1).
TEST(CpuKernel, FusedTranscendentalErrorBound) {
  struct Fn {
    const char *op;
    double lo, hi;
    double (*exact)(double);
    int64_t ulps;
  };
  const Fn fns[] = {
      {"Exp", -87.0, 88.0, [](double x) { return std::exp(x); }, 1},
      {"Log", 1e-30, 1e30, [](double x) { return std::log(x); }, 1},
      {"Tanh", -12.0, 12.0, [](double x) { return std::tanh(x); }, 2},
      {"Erf", -5.0, 5.0, [](double x) { return std::erf(x); }, 2},
      {"Erf", -1e-3, 1e-3, [](double x) { return std::erf(x); }, 2},
      {"Erf", 0.99, 3.93, [](double x) { return std::erf(x); }, 2},
      {"Sigmoid", -40.0, 40.0, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, 3},
  };
  const int64_t n = 20011; // not a multiple of the vector width: the tail too
  for (const Fn &f : fns) {
    SCOPED_TRACE(f.op);
    std::vector<double> xs(n);
    bool logScale = std::string(f.op) == "Log";
    for (int64_t i = 0; i < n; ++i) {
      double t = static_cast<double>(i) / (n - 1);
      double x = logScale ? std::exp(std::log(f.lo) + t * (std::log(f.hi) - std::log(f.lo)))
                          : f.lo + t * (f.hi - f.lo);
      xs[i] = static_cast<float>(x);
    }
    std::vector<float> y = runFloatOp(f.op, {n}, xs);
    ASSERT_EQ(y.size(), xs.size());
    int64_t worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      float exact = static_cast<float>(f.exact(xs[i]));
      worst = std::max(worst, ulpDistance(y[i], exact));
      ASSERT_LE(ulpDistance(y[i], exact), f.ulps) << "x = " << xs[i] << ": " << y[i] << " vs "
                                                  << exact;
    }
    std::printf("  %-8s worst %lld ulp over %lld values in [%g, %g]\n", f.op,
                static_cast<long long>(worst), static_cast<long long>(n), f.lo, f.hi);
  }
}

/// Softmax and LogSoftmax over contiguous rows (the row path: SLEEF's exp on
/// AVX-512 CPUs, 16-way partial sums) against double precision, on rows of a
/// vocabulary's length with a spread of 40: within the bounds docs/design.md
/// states (Softmax 4 ULP, LogSoftmax 2^-22 max(1, |y|)) of the exact function of
/// the fp32 differences x - max (which every fp32 softmax rounds first).
TEST(CpuKernel, SoftmaxRowsErrorBound) {
  const int64_t rows = 8, len = 1003; // not a multiple of 16: the tails too
  std::vector<double> xs(rows * len);
  uint32_t state = 12345;
  for (double &x : xs) {
    state = state * 1664525u + 1013904223u;
    x = static_cast<float>(-20.0 + 40.0 * (state >> 8) / double(1u << 24));
  }
  for (const char *op : {"Softmax", "LogSoftmax"}) {
    SCOPED_TRACE(op);
    std::vector<float> y = runFloatOp(op, {rows, len}, xs);
    ASSERT_EQ(y.size(), xs.size());
    bool isLog = std::string(op) == "LogSoftmax";
    double worst = 0;
    for (int64_t row = 0; row < rows; ++row) {
      const double *x = xs.data() + row * len;
      float m = static_cast<float>(*std::max_element(x, x + len));
      std::vector<double> d(len);
      double sum = 0;
      for (int64_t i = 0; i < len; ++i) {
        d[i] = static_cast<float>(static_cast<float>(x[i]) - m);
        sum += std::exp(d[i]);
      }
      for (int64_t i = 0; i < len; ++i) {
        double exact = isLog ? d[i] - std::log(sum) : std::exp(d[i]) / sum;
        float got = y[row * len + i];
        double err = isLog ? std::fabs(got - exact) / std::max(1.0, std::fabs(exact))
                           : static_cast<double>(ulpDistance(got, static_cast<float>(exact)));
        worst = std::max(worst, err);
        ASSERT_LE(err, isLog ? std::ldexp(1.0, -22) : 4.0) << "row " << row << " element " << i;
      }
    }
    std::printf("  %-10s worst %g %s over %lld rows of %lld\n", op, worst,
                isLog ? "relative to max(1, |y|)" : "ulp", static_cast<long long>(rows),
                static_cast<long long>(len));
  }
}

//===----------------------------------------------------------------------===//
// Elementwise ops the fused kernel does not take
//===----------------------------------------------------------------------===//

TEST(CpuKernel, CastWhereInt) {
  runAllTypes({"Cast", header() + "g (int64[3,4] x) => (T[3,4] y) { y = Cast <to = 1> (x) }",
               {{"x", intsIn(-70000, 70000)}}});
  runAllTypes({"Cast", header() + "g (T[3,4] x) => (int64[3,4] y) { y = Cast <to = 7> (x) }",
               {{"x", uniformIn(-100, 100)}}});
  runAllTypes({"Cast", header() + "g (bool[5] x) => (T[5] y) { y = Cast <to = 1> (x) }",
               {{"x", boolsWith(0.5)}}});
  runCase({"Cast", header() + "g (int64[6] x) => (int32[6] y) { y = Cast <to = 6> (x) }",
           {{"x", intsIn(-1000, 1000)}}},
          DType::F32);
  runCase({"Where", header() + "g (bool[3,4] c, int64[3,4] a, int64[4] b) => (int64[3,4] y) { y = Where (c, a, b) }",
           {{"c", boolsWith(0.5)}, {"a", intsIn(-9, 9)}, {"b", intsIn(-9, 9)}}},
          DType::F32);
  for (const char *op : {"Add", "Sub", "Mul", "Div", "Max", "Min"})
    runCase({op, header() + "g (int64[3,4] a, int64[4] b) => (int64[3,4] y) { y = " + std::string(op) + " (a, b) }",
             {{"a", intsIn(-20, 20)}, {"b", intsIn(-5, 5)}}},
            DType::F32);
  for (const char *op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
    runCase({op, header() + "g (int64[3,4] a, int64[3,1] b) => (bool[3,4] y) { y = " + std::string(op) + " (a, b) }",
             {{"a", intsIn(-3, 3)}, {"b", intsIn(-3, 3)}}},
            DType::F32);
  for (const char *op : {"Neg", "Abs", "Sign"})
    runCase({op, header() + "g (int64[7] a) => (int64[7] y) { y = " + std::string(op) + " (a) }",
             {{"a", intsIn(-3, 3)}}},
            DType::F32);
}

TEST(CpuKernel, ActivationGrads) {
  runAllTypes({"ampc.LeakyReluGrad", header(kAmpc) + "g (T[4,5] dy, T[4,5] x) => (T[4,5] dx) "
                                                     "{ dx = ampc.LeakyReluGrad <alpha = 0.2> (dy, x) }"});
  runAllTypes({"ampc.LeakyReluGrad", header(kAmpc) + "g (T[3000] dy, T[3000] x) => (T[3000] dx) "
                                                     "{ dx = ampc.LeakyReluGrad (dy, x) }"});
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

TEST(CpuKernel, DropoutCopies) {
  // Inference mode and ratio 0 copy (and the mask is all true).
  runAllTypes({"Dropout", header() + "g (T[4,5] x) => (T[4,5] y, bool[4,5] m) { y, m = Dropout (x) }"});
  runAllTypes({"Dropout", header() + "g (T[4,5] x) => (T[4,5] y, bool[4,5] m) <T r = {0.0}, bool t = {1}> "
                                     "{ y, m = Dropout (x, r, t) }"});
  runAllTypes({"ampc.DropoutGrad", header(kAmpc) + "g (T[4,5] dy, bool[4,5] m) => (T[4,5] dx) <T r = {0.25}, bool t = {1}> "
                                                   "{ dx = ampc.DropoutGrad (dy, m, r, t) }",
               {{"m", boolsWith(0.7)}}});
  runAllTypes({"ampc.DropoutGrad", header(kAmpc) + "g (T[4,5] dy, bool[4,5] m) => (T[4,5] dx) "
                                                   "{ dx = ampc.DropoutGrad (dy, m) }",
               {{"m", boolsWith(0.7)}}});
}

/// Training mode: the mask is random, so it is checked for its properties:
/// kept values are x / (1 - ratio), dropped ones 0; about `ratio` dropped; a
/// new mask every run; the same masks for 1 and 2 threads.
TEST(CpuKernel, DropoutTraining) {
  auto g = importModelText(header() + "g (float[100,100] x) => (float[100,100] y, bool[100,100] m) "
                                      "<float r = {0.3}, bool t = {1}> { y, m = Dropout <seed = 5> (x, r, t) }",
                           "dropout");
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  auto p = lowerToPlan(**g, {});
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  std::mt19937_64 rng(7);
  Tensor x = uniform(TensorType(DType::F32, {100, 100}), rng, 0.5, 1.0);
  std::vector<std::vector<uint8_t>> masks[2];
  for (int threads : {1, 2}) {
    std::string error;
    auto s = rt::Session::fromPlan(*p, rt::createCpuBackend({threads}), error);
    ASSERT_TRUE(s) << error;
    for (int run = 0; run < 3; ++run) {
      ASSERT_TRUE(s->feed(0, "x", toHostArray(x), "test", error)) << error;
      ASSERT_TRUE(s->run(0, error)) << error;
      rt::HostArray y, m;
      ASSERT_TRUE(s->output(0, "y", y, error) && s->output(0, "m", m, error)) << error;
      int64_t dropped = 0;
      for (int64_t i = 0; i < 10000; ++i) {
        double want = m.at(i) ? static_cast<double>(static_cast<float>(x.getDouble(i)) * static_cast<float>(1.0 / 0.7)) : 0.0;
        ASSERT_NEAR(y.at(i), want, 1e-6) << i;
        dropped += m.at(i) == 0;
      }
      EXPECT_NEAR(dropped / 10000.0, 0.3, 0.03);
      masks[threads - 1].push_back(m.bytes);
    }
    EXPECT_NE(masks[threads - 1][0], masks[threads - 1][1]);
    EXPECT_NE(masks[threads - 1][1], masks[threads - 1][2]);
  }
  EXPECT_EQ(masks[0], masks[1]);
}

//===----------------------------------------------------------------------===//
// Training-step ops
//===----------------------------------------------------------------------===//

/// Relu lets NaN through, as PyTorch and numpy's maximum(x, 0) do (it made
/// NaN 0, hiding a diverged activation); ReluGrad of NaN is 0, as torch's
/// threshold_backward gives.
TEST(CpuKernel, ReluPassesNaN) {
  Generator someNaN = [](const TensorType &t, std::mt19937_64 &rng) {
    Tensor x = uniform(t, rng);
    for (int64_t i = 0; i < t.numElements(); i += 7)
      x.setDouble(i, std::numeric_limits<double>::quiet_NaN());
    return x;
  };
  runAllTypes({"Relu", header() + "g (T[300] x) => (T[300] y) { y = Relu (x) }", {{"x", someNaN}}});
  runAllTypes({"ampc.ReluGrad", header(kAmpc) + "g (T[300] dy, T[300] x) => (T[300] dx) "
                                                "{ dx = ampc.ReluGrad (dy, x) }",
               {{"x", someNaN}}});
}

TEST(CpuKernel, AllFinite) {
  Generator withInf = [](const TensorType &t, std::mt19937_64 &rng) {
    Tensor x = uniform(t, rng);
    x.setDouble(t.numElements() / 2, std::numeric_limits<double>::infinity());
    return x;
  };
  Generator withNaN = [](const TensorType &t, std::mt19937_64 &rng) {
    Tensor x = uniform(t, rng);
    x.setDouble(t.numElements() - 1, std::numeric_limits<double>::quiet_NaN());
    return x;
  };
  std::string m = header(kAmpc) + "g (T[40,30] a, T[7] b) => (bool ok) { ok = ampc.AllFinite (a, b) }";
  runAllTypes({"ampc.AllFinite", m});
  runAllTypes({"ampc.AllFinite", m, {{"a", withInf}}});
  runAllTypes({"ampc.AllFinite", m, {{"b", withNaN}}});
}
