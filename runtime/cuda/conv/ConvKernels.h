//===- conv/ConvKernels.h - Pooling, im2col and col2im ----------*- C++ -*-===//
//
// Sliding-window kernels of DeviceKernels.h: pooling and the im2col / col2im
// halves of convolution (the GEMMs between them are cuBLAS calls).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../KernelCommon.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// Sliding windows: pooling, im2col / col2im (up to 3 spatial axes; fewer are
// padded with leading axes of size 1)
//===----------------------------------------------------------------------===//

struct Window {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, stride[3] = {1, 1, 1},
          dil[3] = {1, 1, 1}, padBegin[3] = {0, 0, 0}, padEnd[3] = {0, 0, 0};
  AMPC_HD int64_t inPix() const { return in[0] * in[1] * in[2]; }
  AMPC_HD int64_t outPix() const { return out[0] * out[1] * out[2]; }
  AMPC_HD int64_t kernelSize() const { return k[0] * k[1] * k[2]; }
  /// Taps of output position o on axis d inside the input / the padded input.
  AMPC_HD int64_t taps(int d, int64_t o, bool padded) const {
    int64_t n = 0;
    for (int64_t t = 0; t < k[d]; ++t) {
      int64_t p = o * stride[d] - padBegin[d] + t * dil[d];
      n += padded ? (p >= -padBegin[d] && p < in[d] + padEnd[d]) : (p >= 0 && p < in[d]);
    }
    return n;
  }
  /// Calls f(offset) for every input position inside X that output
  /// position (o0, o1, o2)'s window reads, taps in order, the offset within
  /// one (n, c) plane (padding is skipped).
  template <typename F>
  AMPC_HD void forEachTap(int64_t o0, int64_t o1, int64_t o2, F &&f) const {
    for (int64_t k0 = 0; k0 < k[0]; ++k0) {
      int64_t p0 = o0 * stride[0] - padBegin[0] + k0 * dil[0];
      if (p0 < 0 || p0 >= in[0])
        continue;
      for (int64_t k1 = 0; k1 < k[1]; ++k1) {
        int64_t p1 = o1 * stride[1] - padBegin[1] + k1 * dil[1];
        if (p1 < 0 || p1 >= in[1])
          continue;
        for (int64_t k2 = 0; k2 < k[2]; ++k2) {
          int64_t p2 = o2 * stride[2] - padBegin[2] + k2 * dil[2];
          if (p2 >= 0 && p2 < in[2])
            f((p0 * in[1] + p1) * in[2] + p2);
        }
      }
    }
  }
  /// The output position whose tap t reads input position p on axis d, or -1.
  AMPC_HD int64_t outputOf(int d, int64_t p, int64_t t) const {
    int64_t q = p + padBegin[d] - t * dil[d];
    if (q < 0 || q % stride[d])
      return -1;
    q /= stride[d];
    return q < out[d] ? q : -1;
  }
};

struct PoolArgs {
  enum Mode : uint8_t {
    MaxPool,        ///< output element: max (and Indices)
    AveragePool,    ///< output element
    AveragePoolGrad,///< dX element: gathers dY / divisor in output order
    MaxPoolGrad     ///< (n, c) plane: adds dY at each window's maximum in X, in output order
  };
  const void *x = nullptr; ///< X, or dY for the gradients
  void *y = nullptr;       ///< Y, or dX
  int64_t *indices = nullptr; ///< MaxPool's Indices (optional)
  const void *fwdX = nullptr; ///< MaxPoolGrad: the forward operand X
  float *acc = nullptr;       ///< MaxPoolGrad: fp32 planes when dX is not fp32
  uint8_t xType = 0, yType = 0, fwdXType = 0;
  Mode mode = MaxPool;
  bool countPad = false, columnMajor = false;
  int64_t inPix = 0, outPix = 0; ///< per plane
  Window w;

  static AMPC_HD void run(const PoolArgs &a, int64_t i) {
    const Window &w = a.w;
    switch (a.mode) {
    case MaxPool: {
      int64_t p = i / a.outPix, o = i - p * a.outPix;
      int64_t o2 = o % w.out[2], o1 = (o / w.out[2]) % w.out[1], o0 = o / (w.out[2] * w.out[1]);
      const int64_t planeIn = p * a.inPix;
      float best;
      int64_t bestOff = argmax(w, a.x, a.xType, planeIn, o0, o1, o2, best);
      storeFromFloat(a.yType, a.y, i, best);
      if (a.indices) {
        int64_t flat = bestOff;
        if (a.columnMajor && bestOff >= 0) {
          int64_t q2 = bestOff % w.in[2], q1 = (bestOff / w.in[2]) % w.in[1],
                  q0 = bestOff / (w.in[2] * w.in[1]);
          flat = columnMajorFlat(w, q0, q1, q2);
        }
        a.indices[i] = bestOff < 0 ? -1 : planeIn + flat;
      }
      return;
    }
    case AveragePool: {
      int64_t p = i / a.outPix, o = i - p * a.outPix;
      int64_t o2 = o % w.out[2], o1 = (o / w.out[2]) % w.out[1], o0 = o / (w.out[2] * w.out[1]);
      const int64_t planeIn = p * a.inPix;
      float sum = 0;
      w.forEachTap(o0, o1, o2,
                   [&](int64_t off) { sum += loadAsFloat(a.xType, a.x, planeIn + off); });
      bool pad = a.countPad;
      int64_t div = w.taps(0, o0, pad) * w.taps(1, o1, pad) * w.taps(2, o2, pad);
      storeFromFloat(a.yType, a.y, i, sum / static_cast<float>(div));
      return;
    }
    case AveragePoolGrad: {
      int64_t p = i / a.inPix, q = i - p * a.inPix;
      int64_t q2 = q % w.in[2], q1 = (q / w.in[2]) % w.in[1], q0 = q / (w.in[2] * w.in[1]);
      float acc = 0;
      // Output positions in increasing order (taps in decreasing order), as
      // the CPU kernel adds them.
      for (int64_t k0 = w.k[0] - 1; k0 >= 0; --k0) {
        int64_t o0 = w.outputOf(0, q0, k0);
        if (o0 < 0)
          continue;
        for (int64_t k1 = w.k[1] - 1; k1 >= 0; --k1) {
          int64_t o1 = w.outputOf(1, q1, k1);
          if (o1 < 0)
            continue;
          for (int64_t k2 = w.k[2] - 1; k2 >= 0; --k2) {
            int64_t o2 = w.outputOf(2, q2, k2);
            if (o2 < 0)
              continue;
            bool pad = a.countPad;
            int64_t div = w.taps(0, o0, pad) * w.taps(1, o1, pad) * w.taps(2, o2, pad);
            if (div == 0)
              continue;
            int64_t o = (o0 * w.out[1] + o1) * w.out[2] + o2;
            acc += loadAsFloat(a.xType, a.x, p * a.outPix + o) / static_cast<float>(div);
          }
        }
      }
      storeFromFloat(a.yType, a.y, i, acc);
      return;
    }
    case MaxPoolGrad: {
      int64_t lo = i * a.inPix;
      float *acc = a.acc ? a.acc + lo : static_cast<float *>(a.y) + lo;
      for (int64_t k = 0; k < a.inPix; ++k)
        acc[k] = 0.0f;
      for (int64_t o = 0; o < a.outPix; ++o) {
        int64_t o2 = o % w.out[2], o1 = (o / w.out[2]) % w.out[1], o0 = o / (w.out[2] * w.out[1]);
        float best;
        int64_t at = argmax(w, a.fwdX, a.fwdXType, lo, o0, o1, o2, best);
        if (at >= 0)
          acc[at] += loadAsFloat(a.xType, a.x, i * a.outPix + o);
      }
      if (a.acc)
        for (int64_t k = 0; k < a.inPix; ++k)
          storeFromFloat(a.yType, a.y, lo + k, acc[k]);
      return;
    }
    }
  }

  /// The offset in plane `planeIn` of x of the first maximum of output
  /// position (o0, o1, o2)'s window, in window order, or -1 for an empty
  /// window. MaxPool and MaxPoolGrad both choose through this (and the CPU
  /// kernel's loop is the same), so they agree on ties and NaNs.
  static AMPC_HD int64_t argmax(const Window &w, const void *x, uint8_t type, int64_t planeIn,
                                int64_t o0, int64_t o1, int64_t o2, float &best) {
    best = -infinityF();
    int64_t bestOff = -1;
    w.forEachTap(o0, o1, o2, [&](int64_t off) {
      float v = loadAsFloat(type, x, planeIn + off);
      if (v > best || bestOff < 0) {
        best = v;
        bestOff = off;
      }
    });
    return bestOff;
  }

  /// MaxPool's Indices with storage_order = 1: column-major over the spatial
  /// axes, the first varying fastest (padded leading axes have size 1 and
  /// position 0, so they change nothing).
  static AMPC_HD int64_t columnMajorFlat(const Window &w, int64_t q0, int64_t q1, int64_t q2) {
    return q0 + q1 * w.in[0] + q2 * w.in[0] * w.in[1];
  }
};

/// Convolution through GEMMs: a chunk of `nb` samples starting at n0 is laid
/// out as col[g][cr * K + kk][nn][p] (cr: channel in the group, kk: kernel
/// position, p: output position), so that one strided-batched GEMM over the
/// groups computes the chunk.
///   Im2Col: thread per col element, reads X (zero in the padding);
///   Col2Im: thread per dX element of the chunk, sums dcol (fp32) over the
///           kernel positions that read it, in kernel order.
struct ConvArgs {
  enum Mode : uint8_t { Im2Col, Col2Im };
  const void *src = nullptr; ///< X (Im2Col) or dcol as fp32 (Col2Im)
  void *dst = nullptr;       ///< col (Im2Col) or dX (Col2Im)
  uint8_t type = 0;          ///< X's / col's element type, or dX's
  int elemBytes = 4;
  Mode mode = Im2Col;
  int64_t C = 0, Cg = 0, nb = 0, n0 = 0;
  Window w;

  static AMPC_HD void run(const ConvArgs &a, int64_t i) {
    const Window &w = a.w;
    const int64_t inPix = w.inPix(), outPix = w.outPix(), KK = w.kernelSize();
    if (a.mode == Im2Col) {
      int64_t p = i % outPix, t = i / outPix;
      int64_t nn = t % a.nb;
      t /= a.nb;
      int64_t r = t % (a.Cg * KK), g = t / (a.Cg * KK);
      int64_t cr = r / KK, kk = r - cr * KK;
      int64_t k2 = kk % w.k[2], k1 = (kk / w.k[2]) % w.k[1], k0 = kk / (w.k[2] * w.k[1]);
      int64_t o2 = p % w.out[2], o1 = (p / w.out[2]) % w.out[1], o0 = p / (w.out[2] * w.out[1]);
      int64_t p0 = o0 * w.stride[0] - w.padBegin[0] + k0 * w.dil[0];
      int64_t p1 = o1 * w.stride[1] - w.padBegin[1] + k1 * w.dil[1];
      int64_t p2 = o2 * w.stride[2] - w.padBegin[2] + k2 * w.dil[2];
      bool inside = p0 >= 0 && p0 < w.in[0] && p1 >= 0 && p1 < w.in[1] && p2 >= 0 && p2 < w.in[2];
      int64_t src = ((a.n0 + nn) * a.C + g * a.Cg + cr) * inPix + (p0 * w.in[1] + p1) * w.in[2] + p2;
      copyElement(a.elemBytes, a.src, src, a.dst, i, inside);
      return;
    }
    // Col2Im over the chunk's dX elements [nn][c][q].
    int64_t q = i % inPix, t = i / inPix;
    int64_t c = t % a.C, nn = t / a.C;
    int64_t g = c / a.Cg, cr = c - g * a.Cg;
    int64_t q2 = q % w.in[2], q1 = (q / w.in[2]) % w.in[1], q0 = q / (w.in[2] * w.in[1]);
    const float *dcol = static_cast<const float *>(a.src);
    float acc = 0;
    for (int64_t k0 = 0; k0 < w.k[0]; ++k0) {
      int64_t o0 = w.outputOf(0, q0, k0);
      if (o0 < 0)
        continue;
      for (int64_t k1 = 0; k1 < w.k[1]; ++k1) {
        int64_t o1 = w.outputOf(1, q1, k1);
        if (o1 < 0)
          continue;
        for (int64_t k2 = 0; k2 < w.k[2]; ++k2) {
          int64_t o2 = w.outputOf(2, q2, k2);
          if (o2 < 0)
            continue;
          int64_t kk = (k0 * w.k[1] + k1) * w.k[2] + k2;
          int64_t row = g * a.Cg * KK + cr * KK + kk;
          acc += dcol[(row * a.nb + nn) * outPix + (o0 * w.out[1] + o1) * w.out[2] + o2];
        }
      }
    }
    storeFromFloat(a.type, a.dst, ((a.n0 + nn) * a.C + c) * inPix + q, acc);
  }
};

} // namespace ampc::rt::cuda
