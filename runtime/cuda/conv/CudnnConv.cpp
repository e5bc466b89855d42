//===- conv/CudnnConv.cpp - Convolutions as cuDNN calls (host side) --------===//
//
// What can be decided and checked without a GPU about a cuDNN convolution:
// whether cuDNN can run it, its descriptors, the algorithm among cuDNN's
// ranked ones, and a CPU reference of the call for the host emulator.
//
//===----------------------------------------------------------------------===//

#include "CudnnConv.h"

#include <climits>
#include <vector>

namespace ampc::rt::cuda {

namespace {

/// Spatial axes given to cuDNN: two (1-D and 2-D) or three.
int cudnnSpatialAxes(const Window &w) { return w.in[0] == 1 && w.out[0] == 1 && w.k[0] == 1 ? 2 : 3; }

} // namespace

bool cudnnConvFits(const CudnnConvCall &c, std::string &why) {
  if (c.type != FusedElem::F32 && c.type != FusedElem::F16 && c.type != FusedElem::BF16) {
    why = "not a float, float16 or bfloat16 convolution";
    return false;
  }
  const Window &w = c.win;
  for (int d = 0; d < 3; ++d) {
    int64_t eff = (w.k[d] - 1) * w.dil[d] + 1;
    int64_t padded = w.in[d] + 2 * w.padBegin[d];
    int64_t out = padded >= eff ? (padded - eff) / w.stride[d] + 1 : 0;
    if (w.padBegin[d] < 0 || out != w.out[d]) {
      why = "padding that cuDNN's symmetric pads do not reproduce (axis " + std::to_string(d) +
            ": begin " + std::to_string(w.padBegin[d]) + ", end " + std::to_string(w.padEnd[d]) +
            ")";
      return false;
    }
  }
  // cuDNN's dimensions and strides are ints, and it indexes tensors with
  // 32-bit offsets.
  int64_t xElems = c.N * c.C * w.inPix(), yElems = c.N * c.M * w.outPix(),
          wElems = c.M * (c.G > 0 ? c.C / c.G : c.C) * w.kernelSize();
  if (xElems == 0 || yElems == 0 || wElems == 0) {
    why = "an empty tensor"; // cuDNN refuses zero dimensions; im2col writes the zeros
    return false;
  }
  for (int64_t v : {xElems, yElems, wElems})
    if (v >= INT_MAX) {
      why = "a tensor of 2^31 elements or more";
      return false;
    }
  if (c.G <= 0 || c.C % c.G || c.M % c.G) {
    why = "channels not divisible by the groups";
    return false;
  }
  why.clear();
  return true;
}

CudnnConvDescriptor describeCudnnConv(const CudnnConvCall &c) {
  CudnnConvDescriptor d;
  const Window &w = c.win;
  int s = cudnnSpatialAxes(w);
  d.nbDims = 2 + s;
  d.xDims[0] = d.yDims[0] = static_cast<int>(c.N);
  d.xDims[1] = static_cast<int>(c.C);
  d.yDims[1] = d.wDims[0] = static_cast<int>(c.M);
  d.wDims[1] = static_cast<int>(c.C / c.G);
  for (int i = 0; i < s; ++i) {
    int a = 3 - s + i; // the Window's axis
    d.xDims[2 + i] = static_cast<int>(w.in[a]);
    d.yDims[2 + i] = static_cast<int>(w.out[a]);
    d.wDims[2 + i] = static_cast<int>(w.k[a]);
    d.pads[i] = static_cast<int>(w.padBegin[a]);
    d.strides[i] = static_cast<int>(w.stride[a]);
    d.dilations[i] = static_cast<int>(w.dil[a]);
  }
  // Packed NC... strides.
  d.xStrides[d.nbDims - 1] = d.yStrides[d.nbDims - 1] = 1;
  for (int i = d.nbDims - 1; i-- > 0;) {
    d.xStrides[i] = d.xStrides[i + 1] * d.xDims[i + 1];
    d.yStrides[i] = d.yStrides[i + 1] * d.yDims[i + 1];
  }
  d.groups = static_cast<int>(c.G);
  switch (c.type) {
  case FusedElem::F16:
    d.dataType = cudnn::kDataHalf;
    d.mathType = cudnn::kTensorOpMath;
    break;
  case FusedElem::BF16:
    d.dataType = cudnn::kDataBfloat16;
    d.mathType = cudnn::kTensorOpMath;
    break;
  default:
    d.dataType = cudnn::kDataFloat;
    d.mathType = cudnn::kFmaMath;
    break;
  }
  d.computeType = cudnn::kDataFloat;
  return d;
}

std::string cudnnConvKey(const CudnnConvCall &c) {
  CudnnConvDescriptor d = describeCudnnConv(c);
  std::string k = std::to_string(static_cast<int>(c.dir)) + ":" + std::to_string(d.dataType) + ":" +
                  std::to_string(d.groups);
  auto add = [&](const int *v, int n) {
    k += "|";
    for (int i = 0; i < n; ++i)
      k += std::to_string(v[i]) + ",";
  };
  add(d.xDims, d.nbDims);
  add(d.yDims, d.nbDims);
  add(d.wDims, d.nbDims);
  add(d.pads, d.nbDims - 2);
  add(d.strides, d.nbDims - 2);
  add(d.dilations, d.nbDims - 2);
  return k;
}

int chooseCudnnAlgorithm(const std::vector<cudnn::AlgoPerf> &perf, uint8_t type,
                         size_t maxWorkspace) {
  for (size_t i = 0; i < perf.size(); ++i) {
    const cudnn::AlgoPerf &p = perf[i];
    bool math = type == FusedElem::F32
                    ? p.mathType == cudnn::kFmaMath
                    : p.mathType == cudnn::kTensorOpMath || p.mathType == cudnn::kDefaultMath;
    if (p.status == cudnn::kStatusSuccess && p.determinism == cudnn::kDeterministic && math &&
        p.memory <= maxWorkspace)
      return static_cast<int>(i);
  }
  return -1;
}

void referenceCudnnConv(const CudnnConvCall &c) {
  const Window &w = c.win;
  int64_t Cg = c.C / c.G, Mg = c.M / c.G, inPix = w.inPix(), outPix = w.outPix(),
          kk = w.kernelSize();
  uint8_t t = c.type;
  // Calls f(input offset within a plane, tap) for every tap of output
  // position `o` (a flat index over out[]) that falls inside the input.
  auto taps = [&](int64_t o, auto &&f) {
    int64_t o2 = o % w.out[2], o1 = (o / w.out[2]) % w.out[1], o0 = o / (w.out[1] * w.out[2]);
    for (int64_t k0 = 0; k0 < w.k[0]; ++k0) {
      int64_t p0 = o0 * w.stride[0] - w.padBegin[0] + k0 * w.dil[0];
      if (p0 < 0 || p0 >= w.in[0])
        continue;
      for (int64_t k1 = 0; k1 < w.k[1]; ++k1) {
        int64_t p1 = o1 * w.stride[1] - w.padBegin[1] + k1 * w.dil[1];
        if (p1 < 0 || p1 >= w.in[1])
          continue;
        for (int64_t k2 = 0; k2 < w.k[2]; ++k2) {
          int64_t p2 = o2 * w.stride[2] - w.padBegin[2] + k2 * w.dil[2];
          if (p2 >= 0 && p2 < w.in[2])
            f((p0 * w.in[1] + p1) * w.in[2] + p2, (k0 * w.k[1] + k1) * w.k[2] + k2);
        }
      }
    }
  };
  auto finish = [&](void *dst, int64_t i, float acc) {
    float r = c.alpha * acc;
    if (c.beta != 0.0f)
      r += c.beta * loadAsFloat(t, dst, i);
    storeFromFloat(t, dst, i, r);
  };
  switch (c.dir) {
  case CudnnConvCall::Forward:
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t m = 0; m < c.M; ++m) {
        int64_t g = m / Mg;
        for (int64_t o = 0; o < outPix; ++o) {
          float acc = 0;
          for (int64_t ci = 0; ci < Cg; ++ci) {
            int64_t xPlane = (n * c.C + g * Cg + ci) * inPix, wBase = (m * Cg + ci) * kk;
            taps(o, [&](int64_t p, int64_t k) {
              acc += loadAsFloat(t, c.x, xPlane + p) * loadAsFloat(t, c.w, wBase + k);
            });
          }
          finish(c.y, (n * c.M + m) * outPix + o, acc);
        }
      }
    return;
  case CudnnConvCall::BackwardData: {
    std::vector<float> acc(static_cast<size_t>(c.N * c.C * inPix), 0.0f);
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t m = 0; m < c.M; ++m) {
        int64_t g = m / Mg;
        for (int64_t o = 0; o < outPix; ++o) {
          float dy = loadAsFloat(t, c.y, (n * c.M + m) * outPix + o);
          for (int64_t ci = 0; ci < Cg; ++ci) {
            float *plane = acc.data() + (n * c.C + g * Cg + ci) * inPix;
            int64_t wBase = (m * Cg + ci) * kk;
            taps(o, [&](int64_t p, int64_t k) { plane[p] += dy * loadAsFloat(t, c.w, wBase + k); });
          }
        }
      }
    for (size_t i = 0; i < acc.size(); ++i)
      finish(c.x, static_cast<int64_t>(i), acc[i]);
    return;
  }
  case CudnnConvCall::BackwardFilter: {
    std::vector<float> acc(static_cast<size_t>(c.M * Cg * kk), 0.0f);
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t m = 0; m < c.M; ++m) {
        int64_t g = m / Mg;
        for (int64_t o = 0; o < outPix; ++o) {
          float dy = loadAsFloat(t, c.y, (n * c.M + m) * outPix + o);
          for (int64_t ci = 0; ci < Cg; ++ci) {
            int64_t xPlane = (n * c.C + g * Cg + ci) * inPix;
            float *dw = acc.data() + (m * Cg + ci) * kk;
            taps(o, [&](int64_t p, int64_t k) { dw[k] += dy * loadAsFloat(t, c.x, xPlane + p); });
          }
        }
      }
    for (size_t i = 0; i < acc.size(); ++i)
      finish(c.w, static_cast<int64_t>(i), acc[i]);
    return;
  }
  }
}

std::string describeCudnnCall(const CudnnConvCall &c) {
  static const char *dirs[] = {"fwd", "bwd-data", "bwd-filter"};
  CudnnConvDescriptor d = describeCudnnConv(c);
  auto dims = [&](const int *v) {
    std::string s;
    for (int i = 0; i < d.nbDims; ++i)
      s += (i ? "x" : "") + std::to_string(v[i]);
    return s;
  };
  return std::string("cudnn conv ") + dirs[c.dir] + " " + std::to_string(d.nbDims - 2) + "-D " +
         dims(d.xDims) + " * " + dims(d.wDims) + (c.G > 1 ? " groups " + std::to_string(c.G) : "") +
         " (algo " + std::to_string(c.algo) + ", " + std::to_string(c.workspaceBytes) + " bytes)";
}

} // namespace ampc::rt::cuda
