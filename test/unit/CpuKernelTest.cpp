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

#include "ampc/Interpreter/Interpreter.h"
#include "ampc/Lower/Lower.h"
#include "ampc/ONNX/Import.h"
#include "ampc/rt/Backend.h"
#include "ampc/rt/Session.h"

#include "plan.pb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <cstring>
#include <random>

using namespace ampc;

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

double relTol(DType t) {
  switch (t) {
  case DType::F16:
    return std::ldexp(1.0, -10);
  case DType::BF16:
    return std::ldexp(1.0, -7);
  default:
    return 0.0;
  }
}

rt::ElemType elemType(DType t) {
  switch (t) {
  case DType::F32:
    return rt::ElemType::F32;
  case DType::F16:
    return rt::ElemType::F16;
  case DType::BF16:
    return rt::ElemType::BF16;
  case DType::F64:
    return rt::ElemType::F64;
  case DType::I64:
    return rt::ElemType::I64;
  case DType::I32:
    return rt::ElemType::I32;
  case DType::I8:
    return rt::ElemType::I8;
  case DType::U8:
    return rt::ElemType::U8;
  case DType::Bool:
    return rt::ElemType::Bool;
  default:
    return rt::ElemType::F32;
  }
}

rt::HostArray toHost(const Tensor &t) {
  rt::HostArray a;
  a.type = elemType(t.dtype());
  a.shape = t.shape();
  a.bytes.assign(t.data(), t.data() + t.byteSize());
  return a;
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
      if (!session->feed(prog, name, toHost(t), "test", error)) {
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
  Row &row = table()[{c.op, typeName(t)}];
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
};
} // namespace

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
    // MaxPoolGrad on the Indices of a real MaxPool.
    runAllTypes({"ampc.MaxPoolGrad",
                 header(kAmpc) + "g (T" + c.x + " x, T" + c.y + " dy) => (T" + c.x +
                     " dx) { y, i = MaxPool <" + a + "> (x)\n dx = ampc.MaxPoolGrad <shape = " +
                     std::string(c.x) + "> (dy, i) }"});
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
                              {"[2,3,4]", -2}}) {
      std::string a = "<axis = " + std::to_string(s.axis) + ">";
      runAllTypes({op, header() + "g (T" + s.shape + " x) => (T" + s.shape + " y) { y = " + op +
                           " " + a + " (x) }",
                   {{"x", uniformIn(-4, 4)}}});
    }
}

TEST(CpuKernel, SoftmaxGrads) {
  for (const char *op : {"Softmax", "LogSoftmax"})
    for (std::pair<const char *, int> s : std::vector<std::pair<const char *, int>>{
             {"[4,10]", -1}, {"[2,3,5]", 1}, {"[3,2,4]", 0}}) {
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
    runAllTypes({"ampc.NegativeLogLikelihoodLossGrad",
                 header(kAmpc) + "g (int64[8] t, T[10] w, T" + ls + "dl) => (T[8,10] dx) "
                     "{ dx = ampc.NegativeLogLikelihoodLossGrad <reduction = \"" + r +
                     "\", ignore_index = 2, shape = [8,10]> (dl, t, w) }",
                 {{"t", intsIn(0, 9)}, {"w", uniformIn(0.5, 1.5)}}});
  }
}
