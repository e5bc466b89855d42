//===- ResizeCoordinates.h - Where Resize reads its input --------*- C++ -*-===//
//
// ONNX Resize's coordinate mapping and its nearest and linear taps, shared by
// the reference interpreter's Resize kernel and the decompose pass (which
// turns nearest and linear Resize into ops with kernels and gradients), so
// both follow one definition: the ONNX operator's text, as ONNX Runtime and
// PyTorch implement it. "align_corners" and "pytorch_half_pixel" use the
// output's length; ONNX 1.12's Python reference uses scale * input length
// instead, which differs when that product is not a whole number (PyTorch's
// align_corners=True with a scale_factor such as 1.7).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace ampc::resize {

/// The input coordinate output index `i` maps to along an axis of `in`
/// elements resized by `scale` (out / in when sizes were given) to `out`, or
/// nullopt for a mode this code does not implement (tf_crop_and_resize).
inline std::optional<double> sourceCoordinate(std::string_view mode, int64_t i, double scale,
                                              int64_t in, int64_t out) {
  if (mode == "half_pixel")
    return (i + 0.5) / scale - 0.5;
  if (mode == "pytorch_half_pixel")
    return out > 1 ? (i + 0.5) / scale - 0.5 : 0.0;
  if (mode == "align_corners")
    return out == 1 ? 0.0 : i * double(in - 1) / double(out - 1);
  if (mode == "asymmetric")
    return i / scale;
  if (mode == "tf_half_pixel_for_nn")
    return (i + 0.5) / scale;
  return std::nullopt;
}

/// The element nearest_mode picks at coordinate c, clamped to [0, in).
inline std::optional<int64_t> nearestIndex(std::string_view nearestMode, double c, int64_t in) {
  double r;
  if (nearestMode == "floor")
    r = std::floor(c);
  else if (nearestMode == "ceil")
    r = std::ceil(c);
  else if (nearestMode == "round_prefer_ceil")
    r = c - std::floor(c) == 0.5 ? std::ceil(c) : std::round(c);
  else if (nearestMode == "round_prefer_floor")
    r = c - std::floor(c) == 0.5 ? std::floor(c) : std::round(c);
  else
    return std::nullopt;
  return std::clamp<int64_t>(static_cast<int64_t>(r), 0, in - 1);
}

/// Linear interpolation at coordinate c: two (index, weight) taps, indices
/// clamped to [0, in) as the reference's edge padding does.
inline std::pair<std::pair<int64_t, double>, std::pair<int64_t, double>> linearTaps(double c,
                                                                                    int64_t in) {
  double lo = std::floor(c), r = c - lo;
  auto clampIndex = [&](double v) {
    return std::clamp<int64_t>(static_cast<int64_t>(v), 0, in - 1);
  };
  return {{clampIndex(lo), 1.0 - r}, {clampIndex(lo + 1), r}};
}

} // namespace ampc::resize
