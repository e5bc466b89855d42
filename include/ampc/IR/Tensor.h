//===- Tensor.h - Dense host tensor data ------------------------*- C++ -*-===//
//
// Tensor data as stored by initializers, constants and the reference
// interpreter. The bytes are the element type's native encoding (fp16 and bf16
// as their 16-bit patterns, bool as one byte). Element accessors convert to and
// from double; storing rounds to the element type with round-to-nearest-even.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/DType.h"

#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ampc {

/// Rounds a double to the nearest value representable in `t` (ties to even),
/// overflowing to +-inf like IEEE arithmetic. Integer types truncate toward
/// zero and Bool maps non-zero to 1, as ONNX Cast does.
double roundToDType(double v, DType t);

/// fp16 / bf16 bit patterns from a double (round to nearest even) and back.
uint16_t doubleToHalfBits(double v);
double halfBitsToDouble(uint16_t bits);
uint16_t doubleToBFloat16Bits(double v);
double bfloat16BitsToDouble(uint16_t bits);

class Tensor {
public:
  Tensor() = default;
  /// A zero-filled tensor of the given type. Its bytes are allocated when
  /// first accessed: the optimizer's moments of a large model (two tensors
  /// the size of the parameters, GPT-2 small: 1 GB) are never touched by the
  /// compiler, whose plan marks them zero_init.
  explicit Tensor(TensorType type);

  static Tensor fromDoubles(TensorType type, std::span<const double> values);
  static Tensor fromInt64s(TensorType type, std::span<const int64_t> values);
  static Tensor fromBytes(TensorType type, const void *bytes, size_t size);
  /// Takes `bytes` (exactly the type's size) as the tensor's storage, without
  /// a copy: an imported initializer's raw data.
  static Tensor adoptBytes(TensorType type, std::string &&bytes);
  /// `source` converted to `dtype` (as castTo), computed when first accessed:
  /// cast-cache gives every parameter a low-precision copy, which a plan
  /// stores as "converted at load" (GPT-2 small: 247 MB the compiler never
  /// needs to compute).
  static Tensor deferredCast(std::shared_ptr<const Tensor> source, DType dtype);
  static Tensor scalar(DType dtype, double value);
  /// A 1-D int64 tensor.
  static Tensor int64Vector(std::span<const int64_t> values);

  const TensorType &type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape &shape() const { return type_.shape; }
  int64_t size() const { return type_.numElements(); }

  const uint8_t *data() const {
    materialize();
    return reinterpret_cast<const uint8_t *>(bytes_.data());
  }
  uint8_t *data() {
    materialize();
    return reinterpret_cast<uint8_t *>(bytes_.data());
  }
  size_t byteSize() const { return pendingBytes_ ? pendingBytes_ : bytes_.size(); }
  /// True for a zero-filled tensor whose bytes were never accessed (false
  /// says nothing): lets a reader skip a scan of zeros, and their allocation.
  bool untouchedZeros() const { return !castSource_ && (pendingBytes_ != 0 || bytes_.empty()); }
  /// The tensor a deferredCast converts, while its bytes are not computed;
  /// null otherwise.
  const Tensor *pendingCastSource() const { return castSource_.get(); }

  /// Element i converted to double (exact for all float types and for integers
  /// up to 2^53).
  double getDouble(int64_t i) const;
  /// Stores v rounded to the element type.
  void setDouble(int64_t i, double v);
  /// Element i as an integer (floats truncate toward zero).
  int64_t getInt(int64_t i) const;
  void setInt(int64_t i, int64_t v);

  std::vector<double> toDoubles() const;
  std::vector<int64_t> toInt64s() const;

  /// A copy with the same data reinterpreted under a new shape of equal size.
  Tensor reshaped(Shape shape) const;
  /// A copy converted element by element to another dtype (ONNX Cast rules).
  Tensor castTo(DType dtype) const;

  bool bitwiseEqual(const Tensor &o) const {
    return type_ == o.type_ && byteSize() == o.byteSize() &&
           std::memcmp(data(), o.data(), byteSize()) == 0;
  }

private:
  TensorType type_;
  /// Computes the bytes of a zero-filled tensor or a deferred cast on first
  /// access. Not thread-safe: a tensor shared across threads is touched first.
  void materialize() const;

  // A string rather than a vector of bytes, so that a protobuf's raw data
  // can become a tensor without a copy (heap blocks are 16-byte aligned).
  mutable std::string bytes_;
  /// The size of bytes not yet computed (zeros, or castSource_'s
  /// conversion); 0 once they are.
  mutable size_t pendingBytes_ = 0;
  mutable std::shared_ptr<const Tensor> castSource_;
};

} // namespace ampc
