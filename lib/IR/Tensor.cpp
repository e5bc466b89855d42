//===- Tensor.cpp - Element types, rounding and tensor data ---------------===//

#include "ampc/IR/Tensor.h"
#include "ampc/rt/ElementMath.h"

#include <cassert>
#include <cmath>
#include <limits>
#include <sstream>

namespace ampc {

//===----------------------------------------------------------------------===//
// DType
//===----------------------------------------------------------------------===//

unsigned dtypeSize(DType t) {
  switch (t) {
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::I8:
  case DType::U8:
  case DType::Bool:
    return 1;
  case DType::Undefined:
    return 0;
  }
  return 0;
}

bool isFloat(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}

bool isLowPrecision(DType t) { return t == DType::F16 || t == DType::BF16; }

bool isInteger(DType t) {
  return t == DType::I64 || t == DType::I32 || t == DType::I8 || t == DType::U8;
}

namespace {
struct DTypeInfo {
  DType dtype;
  const char *name;
  int32_t onnx;
};
// ONNX TensorProto::DataType numbers.
constexpr DTypeInfo kDTypes[] = {
    {DType::F32, "float", 1},    {DType::U8, "uint8", 2},
    {DType::I8, "int8", 3},      {DType::I32, "int32", 6},
    {DType::I64, "int64", 7},    {DType::Bool, "bool", 9},
    {DType::F16, "float16", 10}, {DType::F64, "double", 11},
    {DType::BF16, "bfloat16", 16},
};
} // namespace

std::string_view dtypeName(DType t) {
  for (const auto &info : kDTypes)
    if (info.dtype == t)
      return info.name;
  return "undefined";
}

std::optional<DType> dtypeFromName(std::string_view name) {
  for (const auto &info : kDTypes)
    if (name == info.name)
      return info.dtype;
  return std::nullopt;
}

int32_t dtypeToOnnx(DType t) {
  for (const auto &info : kDTypes)
    if (info.dtype == t)
      return info.onnx;
  return 0;
}

DType dtypeFromOnnx(int32_t onnxType) {
  for (const auto &info : kDTypes)
    if (info.onnx == onnxType)
      return info.dtype;
  return DType::Undefined;
}

int64_t numElements(const Shape &shape) {
  // Saturates instead of overflowing: shapes come from untrusted files, and
  // every caller compares the count against a limit.
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return std::numeric_limits<int64_t>::max();
  return n;
}

std::string shapeStr(const Shape &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string TensorType::str() const {
  return std::string(dtypeName(dtype)) + shapeStr(shape);
}

//===----------------------------------------------------------------------===//
// Rounding
//===----------------------------------------------------------------------===//

namespace {
/// Rounds |v| to a binary format with `mantBits` stored fraction bits whose
/// smallest normal exponent is `minExp`. Rounding is nearbyint() in the default
/// round-to-nearest-even mode, applied at the format's quantum for v's binade.
double roundToFormat(double v, int mantBits, int minExp, double maxFinite) {
  if (!std::isfinite(v) || v == 0.0)
    return v;
  int e = 0;
  std::frexp(v, &e); // v = m * 2^e with 0.5 <= |m| < 1: leading bit is 2^(e-1).
  int exp = std::max(e - 1, minExp);
  double quantum = std::ldexp(1.0, exp - mantBits);
  double r = std::nearbyint(v / quantum) * quantum;
  if (std::fabs(r) > maxFinite)
    return std::copysign(std::numeric_limits<double>::infinity(), v);
  return r;
}

constexpr double kHalfMax = 65504.0;
const double kBF16Max = std::ldexp(255.0, 120); // 0x7F7F = 1.1111111b * 2^127
const double kF32Max = std::numeric_limits<float>::max();
} // namespace

double roundToDType(double v, DType t) {
  switch (t) {
  case DType::F64:
    return v;
  case DType::F32:
    return roundToFormat(v, 23, -126, kF32Max);
  case DType::F16:
    return roundToFormat(v, 10, -14, kHalfMax);
  case DType::BF16:
    return roundToFormat(v, 7, -126, kBF16Max);
  case DType::Bool:
    return v != 0.0 ? 1.0 : 0.0;
  case DType::I64:
  case DType::I32:
  case DType::I8:
  case DType::U8:
    return std::isfinite(v) ? std::trunc(v) : 0.0;
  case DType::Undefined:
    break;
  }
  return v;
}

uint16_t doubleToHalfBits(double v) {
  if (std::isnan(v))
    return 0x7E00;
  double r = roundToDType(v, DType::F16);
  uint16_t sign = std::signbit(r) ? 0x8000 : 0;
  double a = std::fabs(r);
  if (std::isinf(a))
    return sign | 0x7C00;
  if (a == 0.0)
    return sign;
  int e = 0;
  std::frexp(a, &e);
  int exp = e - 1;
  if (exp < -14) // subnormal: a = frac * 2^-24
    return sign | static_cast<uint16_t>(std::ldexp(a, 24));
  uint16_t frac = static_cast<uint16_t>(std::ldexp(a, 10 - exp) - 1024.0);
  return sign | static_cast<uint16_t>((exp + 15) << 10) | frac;
}

double halfBitsToDouble(uint16_t bits) {
  double sign = (bits & 0x8000) ? -1.0 : 1.0;
  int exp = (bits >> 10) & 0x1F;
  int frac = bits & 0x3FF;
  if (exp == 0x1F)
    return frac ? std::numeric_limits<double>::quiet_NaN()
                : sign * std::numeric_limits<double>::infinity();
  if (exp == 0)
    return sign * std::ldexp(frac, -24);
  return sign * std::ldexp(1024 + frac, exp - 25);
}

uint16_t doubleToBFloat16Bits(double v) {
  if (std::isnan(v))
    return 0x7FC0;
  float f = static_cast<float>(roundToDType(v, DType::BF16)); // exact in fp32
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

double bfloat16BitsToDouble(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

//===----------------------------------------------------------------------===//
// Tensor
//===----------------------------------------------------------------------===//

Tensor::Tensor(TensorType type)
    : type_(std::move(type)), pendingBytes_(static_cast<size_t>(type_.byteSize())) {}

void Tensor::materialize() const {
  if (!pendingBytes_)
    return;
  if (castSource_) {
    bytes_ = std::move(castSource_->castTo(type_.dtype).bytes_);
    castSource_.reset();
  } else {
    bytes_.assign(pendingBytes_, '\0');
  }
  pendingBytes_ = 0;
}

Tensor Tensor::deferredCast(std::shared_ptr<const Tensor> source, DType dtype) {
  Tensor t(source->type().withDType(dtype));
  if (t.pendingBytes_)
    t.castSource_ = std::move(source);
  return t;
}

Tensor Tensor::fromDoubles(TensorType type, std::span<const double> values) {
  Tensor t(std::move(type));
  assert(static_cast<int64_t>(values.size()) == t.size());
  for (int64_t i = 0; i < t.size(); ++i)
    t.setDouble(i, values[i]);
  return t;
}

Tensor Tensor::fromInt64s(TensorType type, std::span<const int64_t> values) {
  Tensor t(std::move(type));
  assert(static_cast<int64_t>(values.size()) == t.size());
  for (int64_t i = 0; i < t.size(); ++i)
    t.setInt(i, values[i]);
  return t;
}

Tensor Tensor::fromBytes(TensorType type, const void *bytes, size_t size) {
  Tensor t(std::move(type));
  assert(size == t.byteSize());
  if (size)
    std::memcpy(t.data(), bytes, size);
  return t;
}

Tensor Tensor::adoptBytes(TensorType type, std::string &&bytes) {
  Tensor t;
  t.type_ = std::move(type);
  assert(bytes.size() == static_cast<size_t>(t.type_.byteSize()));
  t.bytes_ = std::move(bytes);
  return t;
}

Tensor Tensor::scalar(DType dtype, double value) {
  Tensor t(TensorType(dtype, {}));
  t.setDouble(0, value);
  return t;
}

Tensor Tensor::int64Vector(std::span<const int64_t> values) {
  return fromInt64s(TensorType(DType::I64, {static_cast<int64_t>(values.size())}),
                    values);
}

namespace {
template <typename T> T load(const uint8_t *p, int64_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T> void store(uint8_t *p, int64_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}
} // namespace

double Tensor::getDouble(int64_t i) const {
  const uint8_t *p = data();
  switch (type_.dtype) {
  case DType::F32:
    return load<float>(p, i);
  case DType::F64:
    return load<double>(p, i);
  case DType::F16:
    return halfBitsToDouble(load<uint16_t>(p, i));
  case DType::BF16:
    return bfloat16BitsToDouble(load<uint16_t>(p, i));
  case DType::I64:
    return static_cast<double>(load<int64_t>(p, i));
  case DType::I32:
    return load<int32_t>(p, i);
  case DType::I8:
    return load<int8_t>(p, i);
  case DType::U8:
  case DType::Bool:
    return load<uint8_t>(p, i);
  case DType::Undefined:
    break;
  }
  return 0.0;
}

void Tensor::setDouble(int64_t i, double v) {
  uint8_t *p = data();
  switch (type_.dtype) {
  case DType::F32:
    // Through roundToDType so that out-of-range values become inf, not UB.
    return store<float>(p, i, static_cast<float>(roundToDType(v, DType::F32)));
  case DType::F64:
    return store<double>(p, i, v);
  case DType::F16:
    return store<uint16_t>(p, i, doubleToHalfBits(v));
  case DType::BF16:
    return store<uint16_t>(p, i, doubleToBFloat16Bits(v));
  case DType::Bool:
    return store<uint8_t>(p, i, v != 0.0 ? 1 : 0);
  case DType::I64:
  case DType::I32:
  case DType::I8:
  case DType::U8: {
    // Saturating: converting a double outside int64's range is undefined
    // (UBSan, on an ONNX text literal found by fuzzing); NaN becomes 0.
    double r = roundToDType(v, type_.dtype);
    int64_t n = std::isnan(r)        ? 0
                : r >= 0x1p63        ? std::numeric_limits<int64_t>::max()
                : r < -0x1p63        ? std::numeric_limits<int64_t>::min()
                                     : static_cast<int64_t>(r);
    return setInt(i, n);
  }
  case DType::Undefined:
    break;
  }
}

int64_t Tensor::getInt(int64_t i) const {
  const uint8_t *p = data();
  switch (type_.dtype) {
  case DType::I64:
    return load<int64_t>(p, i);
  case DType::I32:
    return load<int32_t>(p, i);
  case DType::I8:
    return load<int8_t>(p, i);
  case DType::U8:
  case DType::Bool:
    return load<uint8_t>(p, i);
  default:
    return static_cast<int64_t>(roundToDType(getDouble(i), DType::I64));
  }
}

void Tensor::setInt(int64_t i, int64_t v) {
  uint8_t *p = data();
  switch (type_.dtype) {
  case DType::I64:
    return store<int64_t>(p, i, v);
  case DType::I32:
    return store<int32_t>(p, i, static_cast<int32_t>(v));
  case DType::I8:
    return store<int8_t>(p, i, static_cast<int8_t>(v));
  case DType::U8:
    return store<uint8_t>(p, i, static_cast<uint8_t>(v));
  case DType::Bool:
    return store<uint8_t>(p, i, v != 0 ? 1 : 0);
  default:
    return setDouble(i, static_cast<double>(v));
  }
}

std::vector<double> Tensor::toDoubles() const {
  std::vector<double> out(static_cast<size_t>(size()));
  for (int64_t i = 0; i < size(); ++i)
    out[i] = getDouble(i);
  return out;
}

std::vector<int64_t> Tensor::toInt64s() const {
  std::vector<int64_t> out(static_cast<size_t>(size()));
  for (int64_t i = 0; i < size(); ++i)
    out[i] = getInt(i);
  return out;
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  assert(numElements(shape) == size());
  t.type_.shape = std::move(shape);
  return t;
}

namespace {

/// fp32 to fp16/bf16 and back with the runtime's own conversions (the same
/// bits as the element-by-element path, NaN quieted as there), for the casts
/// of whole parameters that mixed-precision compiles make: 124M elements
/// through doubles took seconds.
bool castFloatsFast(const Tensor &from, Tensor &to) {
  DType src = from.dtype(), dst = to.dtype();
  int64_t n = from.size();
  if (src == DType::F32 && (dst == DType::F16 || dst == DType::BF16)) {
    const float *in = reinterpret_cast<const float *>(from.data());
    uint16_t *out = reinterpret_cast<uint16_t *>(to.data());
    for (int64_t i = 0; i < n; ++i) {
      float x = in[i];
      if (std::isnan(x))
        out[i] = dst == DType::F16 ? 0x7E00 : 0x7FC0;
      else
        out[i] = dst == DType::F16 ? rt::math::floatToHalf(x) : rt::math::floatToBFloat16(x);
    }
    return true;
  }
  if ((src == DType::F16 || src == DType::BF16) && dst == DType::F32) {
    const uint16_t *in = reinterpret_cast<const uint16_t *>(from.data());
    float *out = reinterpret_cast<float *>(to.data());
    for (int64_t i = 0; i < n; ++i)
      out[i] = src == DType::F16 ? rt::math::halfToFloat(in[i]) : rt::math::bfloat16ToFloat(in[i]);
    return true;
  }
  return false;
}

} // namespace

Tensor Tensor::castTo(DType dtype) const {
  Tensor t(type_.withDType(dtype));
  if (castFloatsFast(*this, t))
    return t;
  bool intToInt = (isInteger(dtype) || dtype == DType::Bool) &&
                  (isInteger(type_.dtype) || type_.dtype == DType::Bool);
  for (int64_t i = 0; i < size(); ++i) {
    if (intToInt)
      t.setInt(i, getInt(i));
    else
      t.setDouble(i, getDouble(i));
  }
  return t;
}

} // namespace ampc
