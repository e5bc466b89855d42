//===- StepLowering.h - Lowering one plan step (internal) -------*- C++ -*-===//
//
// The state the op families' lowering files share (runtime/cuda/*/*Lowering.cpp):
// a step's operands and attributes, its workspace, and the launch list it
// appends to. Each family file defines its `StepLowering::lower*` members;
// Lowering.cpp dispatches on the op name. Internal to the CUDA backend.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Lowering.h"

#include "ampc/rt/PlanFile.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace ampc::rt::cuda {

inline constexpr size_t kAlign = 256;
inline size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

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

inline int64_t product(const std::vector<int64_t> &v, size_t begin = 0, size_t end = SIZE_MAX) {
  int64_t n = 1;
  for (size_t i = begin; i < std::min(end, v.size()); ++i)
    n *= v[i];
  return n;
}

inline std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    s[d - 1] = s[d] * shape[d];
  return s;
}

inline int64_t normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < 0)
    axis += rank;
  return axis >= 0 && axis < rank ? axis : -1;
}

inline bool isFloat(uint8_t t) {
  return t == FusedElem::F32 || t == FusedElem::F16 || t == FusedElem::BF16;
}

inline const char *typeName(uint8_t t) {
  static const char *names[] = {"float", "float16", "bfloat16", "double", "int64",
                                "int32", "int8",    "uint8",    "bool"};
  return t < 9 ? names[t] : "?";
}

inline std::string argString(const Operand &o) {
  std::string s = typeName(o.type);
  s += "[";
  for (size_t i = 0; i < o.shape.size(); ++i) {
    if (i)
      s += ",";
    s += std::to_string(o.shape[i]);
  }
  return s + "]";
}

/// Fills a strided copy and returns its launch's thread count; dims of size
/// 1 are dropped, and where the innermost dim is contiguous on both sides and
/// the pointers and strides allow, a thread copies 16 (else 8 or 4) bytes
/// instead of one element (a thread per 2-byte element leaves most of the
/// memory system idle). Rank above kMaxRank leaves c.rank = kMaxRank + 1 and
/// returns 0 (callers report it).
int64_t addCopy(std::vector<int64_t> shape, std::vector<int64_t> srcStrides,
                std::vector<int64_t> dstStrides, const void *src, void *dst, int elemBytes,
                CopyArgs &c);

/// False (with the message) unless y is a float type and every present
/// operand has y's type.
bool sameFloatTypes(const std::vector<Operand> &ops, const Operand &y, std::string &error);

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
  /// The GEMM writes Relu of its result into tensor `resultId` (the next
  /// step's result: gemm/GemmPlan.h, reluEpilogueSteps) instead of its own.
  void fuseRelu(int resultId) { relu_ = operand(resultId); }

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
  }

  /// One strided copy kernel (addCopy); false above kMaxRank.
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
  void allReduce(Launch::Kind kind, float *bucket, size_t count) {
    Launch l;
    l.kind = kind;
    l.dst = bucket;
    l.bytes = count * sizeof(float);
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
  bool planCudnn(std::vector<CudnnConvCall> &calls);
  void emitCudnn(const std::vector<CudnnConvCall> &calls);
  bool lowerAllFinite(std::string &error);
  bool lowerAllReduce(std::string &error);
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
  Operand relu_; ///< fuseRelu's result, if any
};

} // namespace ampc::rt::cuda
