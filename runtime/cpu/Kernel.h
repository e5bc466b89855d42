//===- Kernel.h - CPU kernels: interface and registry -----------*- C++ -*-===//
//
// One kernel per plan step, created when the plan is loaded: the factory
// checks operand types and shapes and prepares everything it can (oneDNN
// primitives, index tables) against the final buffer addresses, which never
// move; run() then only computes. Element math is fp32 (the storage types
// fp16/bf16 are converted on load/store); GEMM and convolution accumulate in
// fp32.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ThreadPool.h"

#include "ampc/rt/ElementMath.h"

#include "plan.pb.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ampc::rt {
class Collective;
}

namespace ampc::rt::cpu {

/// A tensor as a kernel sees it: fixed address, element type and shape.
struct TensorArg {
  void *data = nullptr;
  plan::ElemType type = plan::F32;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  /// Stored in channel blocks of 16 ([N, C/16, spatial..., 16]) rather than
  /// row-major: only for the operands ChannelLayout.h lets a step take so.
  bool channelBlocked = false;

  template <typename T> T *as() const { return static_cast<T *>(data); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
};

/// Reads element i of a float-typed tensor (fp32, fp16, bf16, fp64) as float.
inline float loadFloat(const TensorArg &t, int64_t i) {
  switch (t.type) {
  case plan::F32:
    return static_cast<const float *>(t.data)[i];
  case plan::F16:
    return math::halfToFloat(static_cast<const uint16_t *>(t.data)[i]);
  case plan::BF16:
    return math::bfloat16ToFloat(static_cast<const uint16_t *>(t.data)[i]);
  case plan::F64:
    return static_cast<float>(static_cast<const double *>(t.data)[i]);
  case plan::I64:
    return static_cast<float>(static_cast<const int64_t *>(t.data)[i]);
  case plan::I32:
    return static_cast<float>(static_cast<const int32_t *>(t.data)[i]);
  case plan::I8:
    return static_cast<const int8_t *>(t.data)[i];
  case plan::U8:
  case plan::BOOL:
    return static_cast<const uint8_t *>(t.data)[i];
  default:
    return 0.0f;
  }
}

/// Stores v into element i, rounding to nearest even for fp16/bf16.
inline void storeFloat(const TensorArg &t, int64_t i, float v) {
  switch (t.type) {
  case plan::F32:
    static_cast<float *>(t.data)[i] = v;
    return;
  case plan::F16:
    static_cast<uint16_t *>(t.data)[i] = math::floatToHalf(v);
    return;
  case plan::BF16:
    static_cast<uint16_t *>(t.data)[i] = math::floatToBFloat16(v);
    return;
  case plan::F64:
    static_cast<double *>(t.data)[i] = v;
    return;
  case plan::BOOL:
    static_cast<uint8_t *>(t.data)[i] = v != 0.0f;
    return;
  case plan::I64:
    static_cast<int64_t *>(t.data)[i] = static_cast<int64_t>(v);
    return;
  case plan::I32:
    static_cast<int32_t *>(t.data)[i] = static_cast<int32_t>(v);
    return;
  case plan::I8:
    static_cast<int8_t *>(t.data)[i] = static_cast<int8_t>(v);
    return;
  case plan::U8:
    static_cast<uint8_t *>(t.data)[i] = static_cast<uint8_t>(v);
    return;
  default:
    return;
  }
}

/// Integer element i (int64/int32/int8/uint8/bool).
inline int64_t loadInt(const TensorArg &t, int64_t i) {
  switch (t.type) {
  case plan::I64:
    return static_cast<const int64_t *>(t.data)[i];
  case plan::I32:
    return static_cast<const int32_t *>(t.data)[i];
  case plan::I8:
    return static_cast<const int8_t *>(t.data)[i];
  case plan::U8:
  case plan::BOOL:
    return static_cast<const uint8_t *>(t.data)[i];
  default:
    return static_cast<int64_t>(loadFloat(t, i));
  }
}

/// Column sums (a ReduceSum over every axis but the inner ones, and the
/// fused steps that take one over: ColumnSumEpilogue.h) add the rows of each
/// block of this many in order, from +0, and then the blocks' sums in order
/// (the first block's sums plus the second's...): one order for both, so the
/// same bits, whatever the thread count.
constexpr int64_t kColumnSumBlockRows = 64;

/// Everything a kernel factory may look at. Valid only during creation.
struct StepContext {
  const plan::Plan &plan;
  const plan::Step &step;
  std::vector<TensorArg> inputs;  ///< data == nullptr for omitted operands
  std::vector<TensorArg> outputs; ///< data == nullptr for omitted results
  ThreadPool &pool;
  /// Resolves a CONSTANT tensor id (tensor-valued attributes).
  std::function<TensorArg(int)> constant;
  /// The data-parallel ranks (ampc.AllReduce); nullptr in one process.
  Collective *collective = nullptr;
  /// BatchNormalization only: the Relu, or Relu(Y + reluResidual), of the
  /// step after it, which it writes into `reluOutput` in place of Y
  /// (NormEpilogue.h). No data: no epilogue.
  TensorArg reluOutput, reluResidual;
  /// LayerNormalization, Softmax and SoftmaxGrad only: the bf16 result of
  /// the Cast step after them, which they write as well (NormEpilogue.h); with
  /// `castOnly`, instead of Y. No data: no epilogue.
  TensorArg castOutput;
  bool castOnly = false;
  /// SoftmaxGrad only: castOutput is bf16(Y / castDivisor), a scalar.
  TensorArg castDivisor;
  /// ampc.Fused only: the ReduceSum after it, of result `columnSumOf` over
  /// every axis but the last, offered to the kernel (ColumnSumEpilogue.h),
  /// which sets *columnSumTaken when it writes those sums into `columnSums`
  /// (and, with `columnSumsOnly`, not that result). Null: no offer.
  bool *columnSumTaken = nullptr;
  int columnSumOf = -1;
  TensorArg columnSums;
  bool columnSumsOnly = false;
  /// BatchNormalization in training mode: where it also stores each
  /// channel's batch mean and 1/stddev (2C floats). BatchNormalizationGrad:
  /// where it reads them instead of computing them again from X (the
  /// forward step of the same X ran before it: BatchStats.h). Null: neither.
  std::shared_ptr<std::vector<float>> batchStatsOut, batchStatsIn;
  /// MatMul only: the result of the Transpose step that reads its result,
  /// and the strides there of each axis of its result (TransposedResult.h),
  /// offered to the kernel, which sets *transposedTaken when it writes into
  /// `transposed` instead of output 0. Null: no offer.
  bool *transposedTaken = nullptr;
  TensorArg transposed;
  std::vector<int64_t> transposedStrides;
  /// Transpose only: input 0's elements are read from `gathered`, starting
  /// at element `gatheredOffset`, axis d of input 0 at stride
  /// gatheredStrides[d] there (SplitSource.h). Empty strides: no source.
  TensorArg gathered;
  int64_t gatheredOffset = 0;
  std::vector<int64_t> gatheredStrides;

  const plan::Attribute *attr(const std::string &name) const;
  int64_t attrInt(const std::string &name, int64_t dflt) const;
  double attrFloat(const std::string &name, double dflt) const;
  std::string attrString(const std::string &name, const std::string &dflt) const;
  std::vector<int64_t> attrInts(const std::string &name, std::vector<int64_t> dflt = {}) const;
  std::vector<double> attrFloats(const std::string &name, std::vector<double> dflt = {}) const;
  bool has(unsigned input) const { return input < inputs.size() && inputs[input].data; }
};

class Kernel {
public:
  virtual ~Kernel() = default;
  virtual void run() = 0;
  /// An asynchronous kernel's run() starts its work and finish() completes
  /// it, writing the outputs: the backend calls finish() just before the
  /// first later step that reads one of them, or at the end of the program
  /// (ampc.AllReduce: a bucket travels while the backward pass goes on).
  virtual bool asynchronous() const { return false; }
  virtual void finish() {}
};

/// Creates the kernel of a step, or returns nullptr and sets `error` (one
/// line; the backend prefixes the step).
using KernelFactory =
    std::function<std::unique_ptr<Kernel>(const StepContext &ctx, std::string &error)>;

/// Registers a factory for a plan op name ("MatMul", "ampc.ReluGrad").
void registerKernel(const std::string &op, KernelFactory factory);
const KernelFactory *findKernel(const std::string &op);
/// Every op with a CPU kernel, sorted.
std::vector<std::string> cpuKernelOps();

/// A kernel whose work is a lambda bound at creation time.
class LambdaKernel : public Kernel {
public:
  explicit LambdaKernel(std::function<void()> fn) : fn_(std::move(fn)) {}
  void run() override { fn_(); }

private:
  std::function<void()> fn_;
};

/// Registration hooks of each kernel file (called once by the backend).
void registerFusedKernels();
void registerTrainingKernels();
void registerCollectiveKernels();
void registerAllCpuKernels();

} // namespace ampc::rt::cpu
