//===- DType.h - Element types and tensor types -----------------*- C++ -*-===//
//
// The element types ampc understands, their ONNX encodings and their names in
// ONNX textual syntax, plus the static tensor type (element type + shape).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ampc {

enum class DType : uint8_t {
  Undefined,
  F32,
  F16,
  BF16,
  F64,
  I64,
  I32,
  I8,
  U8,
  Bool,
};

/// Size of one element in bytes (0 for Undefined).
unsigned dtypeSize(DType t);
/// True for F32, F16, BF16 and F64.
bool isFloat(DType t);
/// True for F16 and BF16: the "low precision" storage types.
bool isLowPrecision(DType t);
/// True for the signed and unsigned integer types (not Bool).
bool isInteger(DType t);
/// The name used in ONNX textual syntax: float, float16, bfloat16, double, int64...
std::string_view dtypeName(DType t);
/// Parses an ONNX text type name; nullopt when unknown or unsupported.
std::optional<DType> dtypeFromName(std::string_view name);
/// ONNX TensorProto::DataType value of a dtype.
int32_t dtypeToOnnx(DType t);
/// DType of an ONNX TensorProto::DataType value; Undefined when unsupported.
DType dtypeFromOnnx(int32_t onnxType);

using Shape = std::vector<int64_t>;

/// Number of elements of a static shape (1 for a scalar).
/// The product of the dims; INT64_MAX when a dim is negative or the product
/// overflows (shapes come from untrusted files).
int64_t numElements(const Shape &shape);
/// "[2,3]" style rendering of a shape.
std::string shapeStr(const Shape &shape);

/// A value's static type: element type and fully known shape.
struct TensorType {
  DType dtype = DType::Undefined;
  Shape shape;

  TensorType() = default;
  TensorType(DType d, Shape s) : dtype(d), shape(std::move(s)) {}

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numElements() const { return ampc::numElements(shape); }
  int64_t byteSize() const { return numElements() * dtypeSize(dtype); }
  bool isScalarLike() const { return numElements() == 1; }
  TensorType withDType(DType d) const { return TensorType(d, shape); }
  /// ONNX text syntax: "float[2,3]", "int64[]" for a scalar.
  std::string str() const;

  bool operator==(const TensorType &o) const = default;
};

} // namespace ampc
