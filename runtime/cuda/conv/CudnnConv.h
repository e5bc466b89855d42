//===- conv/CudnnConv.h - Convolutions as cuDNN calls -----------*- C++ -*-===//
//
// The launch record of a convolution run by cuDNN (Launch::CudnnConv) and the
// host-side decisions around it, all plain C++ that the tests call: which
// convolutions cuDNN can run, the descriptor parameters of a record, the
// choice among cuDNN's ranked algorithms, and the CPU reference the host
// emulator runs in place of cuDNN. The cuDNN calls themselves are in
// CudnnRunner.cpp.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "../CudnnApi.h"
#include "ConvKernels.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ampc::rt::cuda {

/// One cuDNN convolution call, fixed at plan load. Operands are NC<spatial>
/// (X [N, C, ...], W [M, C/G, ...], Y [N, M, ...]) of one storage type;
/// cuDNN computes in fp32 and rounds each result once into that type:
///   Forward:        y = alpha * conv(x, w) + beta * y
///   BackwardData:   x = alpha * conv^T(y, w) + beta * x   (x is dX, y is dY)
///   BackwardFilter: w = alpha * dW(x, y) + beta * w       (w is dW, y is dY)
struct CudnnConvCall {
  enum Direction : uint8_t { Forward, BackwardData, BackwardFilter };
  Direction dir = Forward;
  uint8_t type = 0; ///< FusedElem::F32, F16 or BF16
  int64_t N = 0, C = 0, M = 0, G = 1;
  Window win; ///< geometry, three axes (leading ones of size 1); padBegin is cuDNN's pad
  void *x = nullptr, *w = nullptr, *y = nullptr;
  float alpha = 1, beta = 0;
  void *workspace = nullptr; ///< within the step's workspace
  size_t workspaceBytes = 0;
  int algo = -1;     ///< the direction's cudnnConvolution*Algo_t, chosen at load
  int mathType = 0;  ///< the chosen algorithm's cudnnMathType_t
  int plan = -1;     ///< the backend's descriptors for this call (CudnnRunner)
};

/// Descriptor parameters of a call: NCHW / NCDHW tensors, fully packed.
/// 1-D convolutions are given to cuDNN as 2-D ones of height 1 (its
/// convolutions have two or three spatial axes).
struct CudnnConvDescriptor {
  int nbDims = 4; ///< 4 (2-D) or 5 (3-D)
  int xDims[5] = {}, xStrides[5] = {}, yDims[5] = {}, yStrides[5] = {}, wDims[5] = {};
  int pads[3] = {}, strides[3] = {}, dilations[3] = {};
  int groups = 1;
  int dataType = cudnn::kDataFloat;
  int computeType = cudnn::kDataFloat; ///< fp32 accumulation for every type
  int mathType = cudnn::kFmaMath;      ///< fp32: no TF32; fp16 / bf16: tensor cores
};

/// True when cuDNN can run `c` with the semantics the plan asks for: a
/// float type, padding that cuDNN's symmetric pads reproduce (the output
/// size with padBegin at both ends equals the plan's, so an extra pad at
/// the end is never read), no empty tensor, and dimensions within its
/// 32-bit arguments.
/// Otherwise false with the reason (the step keeps im2col).
bool cudnnConvFits(const CudnnConvCall &c, std::string &why);

/// The descriptor parameters of `c` (cudnnConvFits must hold).
CudnnConvDescriptor describeCudnnConv(const CudnnConvCall &c);

/// A key of everything the descriptors and the algorithm depend on (not
/// the addresses): calls with equal keys share one plan.
std::string cudnnConvKey(const CudnnConvCall &c);

/// Largest workspace one cuDNN call may use: im2col's chunking budget.
inline constexpr size_t kCudnnWorkspaceLimit = size_t(256) << 20;

/// Index of the algorithm to use among cuDNN's ranked results (best first):
/// the first that succeeded, is deterministic (graphs on and off, run after
/// run, give the same bits), keeps the type's math (fp32: FMA only, no
/// TF32; fp16 / bf16: tensor cores or default) and needs at most
/// `maxWorkspace` bytes; -1 when none does.
int chooseCudnnAlgorithm(const std::vector<cudnn::AlgoPerf> &perf, uint8_t type,
                         size_t maxWorkspace = kCudnnWorkspaceLimit);

/// The CPU reference of a call (the host emulator's cuDNN): fp32 sums,
/// alpha and beta in fp32, one rounding into the storage type.
void referenceCudnnConv(const CudnnConvCall &c);

/// "cudnn conv fwd 2-D 8x16x32x32 * 32x16x3x3 (algo 1, 0 bytes)", for
/// profiles.
std::string describeCudnnCall(const CudnnConvCall &c);

} // namespace ampc::rt::cuda
