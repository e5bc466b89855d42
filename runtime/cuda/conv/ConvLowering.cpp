//===- conv/ConvLowering.cpp - Pooling and convolution --------------------===//
//
// Lowers MaxPool, AveragePool, Conv and their gradients: conv/ConvKernels.h for
// windows; convolutions as cuDNN calls (conv/CudnnConv.h) when the backend
// has cuDNN and it fits the convolution, otherwise im2col and col2im with
// cuBLAS GEMMs between them.
//
//===----------------------------------------------------------------------===//

#include "../StepLowering.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// Pooling and convolution
//===----------------------------------------------------------------------===//

/// Window geometry as the CPU kernels resolve it (KernelHelpers.cpp
/// windowGeometry), padded to three axes.
bool StepLowering::window(const std::vector<int64_t> &xShape, const std::vector<int64_t> &yShape,
                          const std::vector<int64_t> &kernel, Window &w,
                          std::string &error) const {
  size_t s = kernel.size();
  if (xShape.size() < 3 || xShape.size() > 5 || yShape.size() != xShape.size() ||
      s != xShape.size() - 2) {
    error = "needs [N, C, 1 to 3 spatial axes] operands and a kernel_shape per spatial axis";
    return false;
  }
  std::vector<int64_t> strides = attrInts("strides", std::vector<int64_t>(s, 1));
  std::vector<int64_t> dilations = attrInts("dilations", std::vector<int64_t>(s, 1));
  std::vector<int64_t> pads = attrInts("pads", std::vector<int64_t>(2 * s, 0));
  if (strides.size() != s || dilations.size() != s || pads.size() != 2 * s) {
    error = "strides, dilations or pads do not match the spatial rank";
    return false;
  }
  std::string autoPad = attrString("auto_pad", "NOTSET");
  std::vector<int64_t> padBegin(pads.begin(), pads.begin() + s);
  for (size_t i = 0; i < s; ++i) {
    int64_t in = xShape[2 + i], out = yShape[2 + i];
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      int64_t eff = (kernel[i] - 1) * dilations[i] + 1;
      int64_t total = std::max<int64_t>(0, (out - 1) * strides[i] + eff - in);
      padBegin[i] = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
    } else if (autoPad == "VALID") {
      padBegin[i] = 0;
    }
    if (strides[i] <= 0 || dilations[i] <= 0 || kernel[i] <= 0) {
      error = "strides, dilations and kernel_shape must be positive";
      return false;
    }
    size_t a = 3 - s + i;
    w.in[a] = in;
    w.out[a] = out;
    w.k[a] = kernel[i];
    w.stride[a] = strides[i];
    w.dil[a] = dilations[i];
    w.padBegin[a] = padBegin[i];
    w.padEnd[a] = pads[s + i];
  }
  return true;
}

bool StepLowering::lowerPool(bool isMax, std::string &error) {
  Operand x = input(0), y = output(0), ind = isMax ? output(1) : Operand();
  if (!x.present() || !y.present()) {
    error = "pooling takes X and produces Y";
    return false;
  }
  if (!requireFloat({0}, {0}, error))
    return false;
  if (x.type != y.type) {
    error = "X and Y must share their element type";
    return false;
  }
  if (ind.present() && (ind.type != FusedElem::I64 || ind.shape != y.shape)) {
    error = "Indices must be int64 shaped like Y";
    return false;
  }
  PoolArgs a;
  if (!window(x.shape, y.shape, attrInts("kernel_shape"), a.w, error))
    return false;
  if (x.shape[0] != y.shape[0] || x.shape[1] != y.shape[1]) {
    error = "X and Y differ in N or C";
    return false;
  }
  a.mode = isMax ? PoolArgs::MaxPool : PoolArgs::AveragePool;
  a.x = x.p;
  a.xType = x.type;
  a.y = y.p;
  a.yType = y.type;
  a.indices = static_cast<int64_t *>(ind.p);
  a.countPad = attrInt("count_include_pad", 0) != 0;
  a.columnMajor = attrInt("storage_order", 0) != 0;
  a.inPix = a.w.inPix();
  a.outPix = a.w.outPix();
  kernel(KernelKind::Pool, a, y.numel);
  return true;
}

bool StepLowering::lowerMaxPoolGrad(std::string &error) {
  Operand dy = input(0), x = input(1), dx = output(0);
  if (!dy.present() || !x.present() || !dx.present()) {
    error = "MaxPoolGrad takes dY and X";
    return false;
  }
  if (!requireFloat({0, 1}, {0}, error))
    return false;
  if (x.shape != dx.shape) {
    error = "X and dX must have the same shape";
    return false;
  }
  PoolArgs a;
  if (!window(dx.shape, dy.shape, attrInts("kernel_shape"), a.w, error))
    return false;
  if (dx.shape[0] != dy.shape[0] || dx.shape[1] != dy.shape[1]) {
    error = "dX and dY differ in N or C";
    return false;
  }
  a.mode = PoolArgs::MaxPoolGrad;
  int64_t NC = dy.shape[0] * dy.shape[1];
  a.outPix = a.w.outPix();
  a.inPix = a.w.inPix();
  a.x = dy.p;
  a.xType = dy.type;
  a.fwdX = x.p;
  a.fwdXType = x.type;
  a.y = dx.p;
  a.yType = dx.type;
  if (dx.type != FusedElem::F32)
    a.acc = ws_.alloc<float>(dx.numel);
  kernel(KernelKind::Pool, a, NC);
  return true;
}

bool StepLowering::lowerAveragePoolGrad(std::string &error) {
  Operand dy = input(0), dx = output(0);
  if (!dy.present() || !dx.present()) {
    error = "AveragePoolGrad takes dY";
    return false;
  }
  if (!requireFloat({0}, {0}, error))
    return false;
  PoolArgs a;
  if (!window(dx.shape, dy.shape, attrInts("kernel_shape"), a.w, error))
    return false;
  a.mode = PoolArgs::AveragePoolGrad;
  a.countPad = attrInt("count_include_pad", 0) != 0;
  a.x = dy.p;
  a.xType = dy.type;
  a.y = dx.p;
  a.yType = dx.type;
  a.inPix = a.w.inPix();
  a.outPix = a.w.outPix();
  kernel(KernelKind::Pool, a, dx.numel);
  return true;
}

/// Samples per chunk of a convolution: as many as fit the workspace budget.
int64_t convChunk(int64_t N, size_t perSample) {
  constexpr size_t kBudget = size_t(256) << 20;
  return std::clamp<int64_t>(static_cast<int64_t>(kBudget / std::max<size_t>(perSample, 1)), 1,
                             std::max<int64_t>(N, 1));
}

struct ConvDims {
  int64_t N, C, M, G, Cg, Mg, KK, P, rows; // rows = Cg * KK
};

CudnnConvCall cudnnCall(CudnnConvCall::Direction dir, const ConvDims &d, const Window &win,
                        uint8_t type, void *x, void *w, void *y) {
  CudnnConvCall c;
  c.dir = dir;
  c.type = type;
  c.N = d.N;
  c.C = d.C;
  c.M = d.M;
  c.G = d.G;
  c.win = win;
  c.x = x;
  c.w = w;
  c.y = y;
  return c;
}

/// All of `calls` through cuDNN, or none: each must fit cuDNN and be
/// planned by the backend (its algorithm chosen). They run one after
/// another, so they share one workspace slice of the largest size.
bool StepLowering::planCudnn(std::vector<CudnnConvCall> &calls) {
  if (!mem_.cudnn)
    return false;
  size_t bytes = 0;
  for (CudnnConvCall &c : calls) {
    std::string why;
    if (!cudnnConvFits(c, why) || !mem_.cudnn(c))
      return false;
    bytes = std::max(bytes, c.workspaceBytes);
  }
  void *ws = bytes ? ws_.alloc<uint8_t>(static_cast<int64_t>(bytes)) : nullptr;
  for (CudnnConvCall &c : calls)
    c.workspace = c.workspaceBytes ? ws : nullptr;
  return true;
}

void StepLowering::emitCudnn(const std::vector<CudnnConvCall> &calls) {
  for (const CudnnConvCall &c : calls) {
    Launch l;
    l.kind = Launch::CudnnConv;
    l.conv = c;
    l.step = index_;
    out_.push_back(l);
  }
}

bool StepLowering::lowerConv(std::string &error) {
  Operand x = input(0), w = input(1), bias = input(2), y = output(0);
  if (!x.present() || !w.present() || !y.present()) {
    error = "Conv takes X and W";
    return false;
  }
  if (!sameFloatTypes({x, w, bias}, y, error))
    return false;
  if (x.rank() < 3 || x.rank() > 5 || w.rank() != x.rank() || y.rank() != x.rank()) {
    error = "convolution needs 1 to 3 spatial axes: X " + argString(x) + ", W " + argString(w);
    return false;
  }
  ConvDims d;
  d.N = x.shape[0];
  d.C = x.shape[1];
  d.M = w.shape[0];
  d.G = attrInt("group", 1);
  if (d.G <= 0 || d.C % d.G || d.M % d.G || w.shape[1] * d.G != d.C || y.shape[1] != d.M ||
      y.shape[0] != d.N || (bias.present() && bias.numel != d.M)) {
    error = "shapes do not match: X " + argString(x) + ", W " + argString(w) + ", Y " +
            argString(y);
    return false;
  }
  std::vector<int64_t> kernelShape(w.shape.begin() + 2, w.shape.end());
  Window win;
  if (!window(x.shape, y.shape, kernelShape, win, error))
    return false;
  d.Cg = d.C / d.G;
  d.Mg = d.M / d.G;
  d.KK = win.kernelSize();
  d.P = win.outPix();
  d.rows = d.Cg * d.KK;
  if (y.numel == 0)
    return true;
  size_t es = x.elemBytes();
  // cuDNN: Y = conv(X, W) + beta * Y, with Y holding the bias broadcast
  // first (beta 1) so that the sum is rounded once, as below.
  std::vector<CudnnConvCall> calls = {
      cudnnCall(CudnnConvCall::Forward, d, win, x.type, x.p, w.p, y.p)};
  calls[0].beta = bias.present() ? 1.0f : 0.0f;
  if (planCudnn(calls)) {
    if (bias.present() && !copyKernel({d.N, d.M, d.P}, {0, 1, 0}, {d.M * d.P, d.P, 1}, bias.p,
                                      y.p, es, error))
      return false;
    emitCudnn(calls);
    return true;
  }
  size_t perSample = static_cast<size_t>(d.G * d.rows * d.P) * es + static_cast<size_t>(d.M * d.P) * 4;
  int64_t nb = convChunk(d.N, perSample);
  void *col = ws_.alloc<uint8_t>(static_cast<int64_t>(d.G * d.rows * nb * d.P * es));
  float *acc = ws_.alloc<float>(d.M * nb * d.P);
  for (int64_t n0 = 0; n0 < d.N; n0 += nb) {
    int64_t nbc = std::min(nb, d.N - n0), cols = nbc * d.P;
    ConvArgs im;
    im.mode = ConvArgs::Im2Col;
    im.src = x.p;
    im.dst = col;
    im.type = x.type;
    im.elemBytes = static_cast<int>(es);
    im.C = d.C;
    im.Cg = d.Cg;
    im.nb = nbc;
    im.n0 = n0;
    im.w = win;
    kernel(KernelKind::Conv, im, d.G * d.rows * cols);
    // acc[g] (Mg x cols) = W[g] (Mg x rows) * col[g] (rows x cols), per group.
    GemmCall g = rowMajorGemm(d.Mg, cols, d.rows, w.p, d.rows, false, col, cols, false, acc, cols);
    g.batch = d.G;
    g.strideA = d.rows * cols;   // col (the column-major call's A)
    g.strideB = d.Mg * d.rows;   // W
    g.strideC = d.Mg * cols;
    g.abType = x.type;
    g.cType = FusedElem::F32;
    gemm(g);
    // Y[n0 + nn][c][p] = acc[c][nn][p] (+ bias[c]), rounded once.
    FusedArgs f;
    f.rank = 3;
    f.shape[0] = nbc;
    f.shape[1] = d.M;
    f.shape[2] = d.P;
    f.numInputs = 1;
    f.in[0] = {acc, FusedElem::F32, FusedArgs::Strided, {d.P, cols, 1}};
    uint8_t result = 0;
    if (bias.present()) {
      f.numInputs = 2;
      f.in[1] = {bias.p, bias.type, FusedArgs::Strided, {0, 1, 0}};
      f.numInstrs = 1;
      f.ins[0] = {FusedOp::Add, FusedElem::F32, 0, 1, 0, {}};
      result = 2;
    }
    f.numOutputs = 1;
    f.out[0] = {y.at(n0 * d.M * d.P), y.type, result};
    kernel(KernelKind::Fused, f, nbc * d.M * d.P);
  }
  return true;
}

bool StepLowering::lowerConvGrad(std::string &error) {
  Operand dy = input(0), x = input(1), w = input(2);
  Operand dx = output(0), dw = output(1), db = output(2);
  if (!dy.present() || !x.present() || !w.present()) {
    error = "ConvGrad takes dY, X and W";
    return false;
  }
  if (!sameFloatTypes({x, w}, dy, error))
    return false;
  if (x.rank() < 3 || x.rank() > 5 || w.rank() != x.rank() || dy.rank() != x.rank()) {
    error = "convolution needs 1 to 3 spatial axes: X " + argString(x) + ", W " + argString(w);
    return false;
  }
  ConvDims d;
  d.N = x.shape[0];
  d.C = x.shape[1];
  d.M = w.shape[0];
  d.G = attrInt("group", 1);
  if (d.G <= 0 || d.C % d.G || d.M % d.G || w.shape[1] * d.G != d.C || dy.shape[1] != d.M ||
      dy.shape[0] != d.N) {
    error = "shapes do not match: dY " + argString(dy) + ", X " + argString(x) + ", W " +
            argString(w);
    return false;
  }
  if ((dx.present() && (dx.shape != x.shape || !isFloat(dx.type))) ||
      (dw.present() && (dw.shape != w.shape || !isFloat(dw.type))) ||
      (db.present() && (db.numel != d.M || !isFloat(db.type)))) {
    error = "gradient shapes do not match the operands";
    return false;
  }
  std::vector<int64_t> kernelShape(w.shape.begin() + 2, w.shape.end());
  Window win;
  if (!window(x.shape, dy.shape, kernelShape, win, error))
    return false;
  d.Cg = d.C / d.G;
  d.Mg = d.M / d.G;
  d.KK = win.kernelSize();
  d.P = win.outPix();
  d.rows = d.Cg * d.KK;
  int64_t inPix = win.inPix();
  if (db.present()) {
    // dB[c] = sum over n and p of dY[n][c][p].
    std::vector<bool> reduced(dy.rank(), true);
    reduced[1] = false;
    reduce(dy, reduced, ReduceOp::Sum, db.p, db.type);
  }
  if (!dx.present() && !dw.present())
    return true;
  if (dy.numel == 0) {
    if (dx.present())
      memset0(dx.p, static_cast<size_t>(dx.numel) * dx.elemBytes());
    if (dw.present())
      memset0(dw.p, static_cast<size_t>(dw.numel) * dw.elemBytes());
    return true;
  }
  // cuDNN: dX and dW each in one call over the whole batch (fp32 sums,
  // one rounding), when they have the operands' type.
  std::vector<CudnnConvCall> calls;
  if (dx.present())
    calls.push_back(cudnnCall(CudnnConvCall::BackwardData, d, win, x.type, dx.p, w.p, dy.p));
  if (dw.present())
    calls.push_back(cudnnCall(CudnnConvCall::BackwardFilter, d, win, x.type, x.p, dw.p, dy.p));
  bool sameTypes = (!dx.present() || dx.type == x.type) && (!dw.present() || dw.type == x.type);
  if (sameTypes && planCudnn(calls)) {
    emitCudnn(calls);
    return true;
  }
  size_t es = x.elemBytes();
  size_t perSample = static_cast<size_t>(d.M * d.P) * es +
                     static_cast<size_t>(d.G * d.rows * d.P) * (es + 4);
  int64_t nb = convChunk(d.N, perSample);
  void *dyT = ws_.alloc<uint8_t>(static_cast<int64_t>(d.M * nb * d.P * es));
  void *col = dw.present() ? ws_.alloc<uint8_t>(static_cast<int64_t>(d.G * d.rows * nb * d.P * es))
                           : nullptr;
  float *dcol = dx.present() ? ws_.alloc<float>(d.G * d.rows * nb * d.P) : nullptr;
  float *accW = dw.present() ? ws_.alloc<float>(d.M * d.rows) : nullptr;
  for (int64_t n0 = 0; n0 < d.N; n0 += nb) {
    int64_t nbc = std::min(nb, d.N - n0), cols = nbc * d.P;
    // dyT[c][nn][p] = dY[n0 + nn][c][p].
    CopyArgs cp;
    int64_t threads = addCopy({d.M, nbc, d.P}, {d.P, d.M * d.P, 1}, {cols, d.P, 1},
                              dy.at(n0 * d.M * d.P), dyT, static_cast<int>(es), cp);
    kernel(KernelKind::Copy, cp, threads);
    if (dw.present()) {
      ConvArgs im;
      im.mode = ConvArgs::Im2Col;
      im.src = x.p;
      im.dst = col;
      im.type = x.type;
      im.elemBytes = static_cast<int>(es);
      im.C = d.C;
      im.Cg = d.Cg;
      im.nb = nbc;
      im.n0 = n0;
      im.w = win;
      kernel(KernelKind::Conv, im, d.G * d.rows * cols);
      // accW[g] (Mg x rows) (+)= dyT[g] (Mg x cols) * col[g]^T (cols x rows).
      GemmCall g = rowMajorGemm(d.Mg, d.rows, cols, dyT, cols, false, col, cols, true, accW, d.rows);
      g.batch = d.G;
      g.strideA = d.rows * cols; // col
      g.strideB = d.Mg * cols;   // dyT
      g.strideC = d.Mg * d.rows;
      g.abType = x.type;
      g.cType = FusedElem::F32;
      g.beta = n0 == 0 ? 0.0f : 1.0f;
      gemm(g);
    }
    if (dx.present()) {
      // dcol[g] (rows x cols) = W[g]^T (rows x Mg) * dyT[g] (Mg x cols).
      GemmCall g = rowMajorGemm(d.rows, cols, d.Mg, w.p, d.rows, true, dyT, cols, false, dcol, cols);
      g.batch = d.G;
      g.strideA = d.Mg * cols;   // dyT
      g.strideB = d.Mg * d.rows; // W
      g.strideC = d.rows * cols;
      g.abType = x.type;
      g.cType = FusedElem::F32;
      gemm(g);
      ConvArgs c2;
      c2.mode = ConvArgs::Col2Im;
      c2.src = dcol;
      c2.dst = dx.p;
      c2.type = dx.type;
      c2.C = d.C;
      c2.Cg = d.Cg;
      c2.nb = nbc;
      c2.n0 = n0;
      c2.w = win;
      kernel(KernelKind::Conv, c2, nbc * d.C * inPix);
    }
  }
  if (dw.present())
    kernel(KernelKind::Fused, convertArgs(accW, FusedElem::F32, dw), dw.numel);
  return true;
}

} // namespace ampc::rt::cuda
