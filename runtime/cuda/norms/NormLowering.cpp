//===- norms/NormLowering.cpp - LayerNorm and BatchNorm -------------------===//
//
// Lowers LayerNormalization, BatchNormalization and their gradients to
// norms/NormKernels.h.
//
//===----------------------------------------------------------------------===//

#include "../StepLowering.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

namespace {

bool normParam(const Operand &o, const std::vector<int64_t> &normShape, NormParam &np,
               std::string &error) {
  np.p = o.p;
  np.type = o.type;
  if (o.shape == normShape || o.numel == product(normShape)) {
    np.contiguous = true;
    return true;
  }
  if (o.shape.size() > normShape.size() || normShape.size() > static_cast<size_t>(kMaxRank)) {
    error = argString(o) + " does not broadcast to the normalized shape";
    return false;
  }
  np.contiguous = false;
  np.rank = static_cast<int>(normShape.size());
  size_t lead = normShape.size() - o.shape.size();
  std::vector<int64_t> src = stridesOf(o.shape);
  for (size_t d = 0; d < normShape.size(); ++d) {
    np.shape[d] = normShape[d];
    np.strides[d] = 0;
  }
  for (size_t d = 0; d < o.shape.size(); ++d) {
    if (o.shape[d] != 1 && o.shape[d] != normShape[lead + d]) {
      error = argString(o) + " does not broadcast to the normalized shape";
      return false;
    }
    np.strides[lead + d] = o.shape[d] == 1 ? 0 : src[d];
  }
  return true;
}

} // namespace

bool StepLowering::lowerLayerNorm(std::string &error) {
  Operand x = input(0), y = output(0);
  if (!x.present() || !has(1) || !y.present()) {
    error = "LayerNormalization takes X and Scale";
    return false;
  }
  if (!requireFloat({0, 1, 2}, {0, 1, 2}, error))
    return false;
  int64_t axis = normalizeAxis(attrInt("axis", -1), x.rank());
  if (axis < 0 || y.shape != x.shape) {
    error = "axis out of range or Y not shaped like X";
    return false;
  }
  LayerNormArgs l;
  l.rows = product(x.shape, 0, axis);
  l.inner = product(x.shape, axis);
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  if (!normParam(input(1), normShape, l.scale, error) ||
      (has(2) && !normParam(input(2), normShape, l.bias, error)))
    return false;
  Operand mean = output(1), inv = output(2);
  if ((mean.present() && mean.numel != l.rows) || (inv.present() && inv.numel != l.rows)) {
    error = "Mean and InvStdDev must hold one value per row";
    return false;
  }
  l.x = x.p;
  l.xType = x.type;
  l.y = y.p;
  l.yType = y.type;
  l.mean = mean.p;
  l.meanType = mean.type;
  l.inv = inv.p;
  l.invType = inv.type;
  l.eps = static_cast<float>(attrFloat("epsilon", 1e-5));
  l.phase = 0;
  l.lanes = rowLanes(l.inner);
  kernel(KernelKind::LayerNorm, l, l.rows);
  return true;
}

bool StepLowering::lowerLayerNormGrad(std::string &error) {
  for (size_t i = 0; i < 5; ++i)
    if (!has(i)) {
      error = "LayerNormalizationGrad takes dY, X, Scale, Mean and InvStdDev";
      return false;
    }
  if (!requireFloat({0, 1, 2, 3, 4}, {0, 1, 2}, error))
    return false;
  Operand dy = input(0), x = input(1), mean = input(3), inv = input(4);
  int64_t axis = normalizeAxis(attrInt("axis", -1), x.rank());
  if (axis < 0 || dy.shape != x.shape) {
    error = "axis out of range or dY not shaped like X";
    return false;
  }
  LayerNormArgs l;
  l.rows = product(x.shape, 0, axis);
  l.inner = product(x.shape, axis);
  std::vector<int64_t> normShape(x.shape.begin() + axis, x.shape.end());
  if (!normParam(input(2), normShape, l.scale, error))
    return false;
  if (mean.numel != l.rows || inv.numel != l.rows) {
    error = "Mean and InvStdDev must hold one value per normalized group";
    return false;
  }
  Operand dx = output(0), dScale = output(1), dBias = output(2);
  if ((dx.present() && dx.shape != x.shape) || (dScale.present() && dScale.numel != l.inner) ||
      (dBias.present() && dBias.numel != l.inner)) {
    error = "gradient shapes do not match";
    return false;
  }
  l.x = x.p;
  l.xType = x.type;
  l.dy = dy.p;
  l.dyType = dy.type;
  l.meanIn = mean.p;
  l.meanInType = mean.type;
  l.invIn = inv.p;
  l.invInType = inv.type;
  l.y = dx.p;
  l.yType = dx.type;
  l.dScale = dScale.p;
  l.dScaleType = dScale.type;
  l.dBias = dBias.p;
  l.dBiasType = dBias.type;
  if (dx.present()) {
    l.phase = 1;
    l.lanes = rowLanes(l.inner);
    kernel(KernelKind::LayerNorm, l, l.rows);
  }
  if (dScale.present() || dBias.present()) {
    l.phase = 2;
    l.lanes = 0; // a thread per (chunk of rows, column)
    l.chunk = columnChunk(l.inner, l.rows);
    l.chunks = (l.rows + l.chunk - 1) / l.chunk;
    if (l.chunks > 1)
      l.part = ws_.alloc<float>(2 * l.inner * l.chunks);
    kernel(KernelKind::LayerNorm, l, l.inner * l.chunks);
    if (l.chunks > 1) {
      l.phase = 3;
      kernel(KernelKind::LayerNorm, l, l.inner);
    }
  }
  return true;
}

/// The number of chunks of whole samples a BatchNorm channel's sums are split
/// into (a divisor of N): the fewest that give the row launches about half
/// a GPU's worth of threads (kFillThreads / 2), with chunks of at least
/// kBlockRowLength elements (shorter ones are not worth the extra launches).
static int64_t batchNormRowChunks(int64_t N, int64_t C, int64_t pix) {
  int64_t best = 1;
  for (int64_t d = 2; d <= N && C * best * rowLanes(N / best * pix) < kFillThreads / 2; ++d) {
    if (N % d)
      continue;
    if (N / d * pix < kBlockRowLength)
      break;
    best = d;
  }
  return best;
}

bool StepLowering::lowerBatchNorm(bool grad, std::string &error) {
  BatchNormArgs b;
  Operand x, y;
  if (!grad) {
    for (size_t i = 0; i < 5; ++i)
      if (!has(i)) {
        error = "BatchNormalization takes X, scale, B, mean and var";
        return false;
      }
    if (!requireFloat({0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, error))
      return false;
    x = input(0);
    y = output(0);
    b.training = attr("training_mode") ? attrInt("training_mode", 0) != 0 : outs_.size() > 1;
    b.bias = input(2).p;
    b.biasType = input(2).type;
    b.runMean = input(3).p;
    b.runMeanType = input(3).type;
    b.runVar = input(4).p;
    b.runVarType = input(4).type;
    if (b.training) {
      Operand o1 = output(1), o2 = output(2), o3 = output(3), o4 = output(4);
      b.outMean = o1.p;
      b.outMeanType = o1.type;
      b.outVar = o2.p;
      b.outVarType = o2.type;
      b.savedMean = o3.p;
      b.savedMeanType = o3.type;
      b.savedInv = o4.p;
      b.savedInvType = o4.type;
    }
    b.momentum = static_cast<float>(attrFloat("momentum", 0.9));
  } else {
    if (!has(0) || !has(1) || !has(2)) {
      error = "BatchNormalizationGrad takes dY, X and Scale";
      return false;
    }
    if (!requireFloat({0, 1, 2, 3, 4}, {0, 1, 2}, error))
      return false;
    x = input(1);
    y = output(0);
    Operand dy = input(0);
    if (dy.shape != x.shape) {
      error = "X must be [N, C, ...] and dY shaped like it";
      return false;
    }
    b.dy = dy.p;
    b.dyType = dy.type;
    b.training = attrInt("training_mode", 1) != 0;
    if (!b.training) {
      if (!has(3) || !has(4)) {
        error = "inference mode needs the running mean and variance";
        return false;
      }
      b.runMean = input(3).p;
      b.runMeanType = input(3).type;
      b.runVar = input(4).p;
      b.runVarType = input(4).type;
    }
    Operand dScale = output(1), dBias = output(2);
    b.dScale = dScale.p;
    b.dScaleType = dScale.type;
    b.dBias = dBias.p;
    b.dBiasType = dBias.type;
  }
  Operand scale = grad ? input(2) : input(1);
  if (x.rank() < 2 || (y.present() && y.shape != x.shape)) {
    error = "X must be [N, C, ...] and the result shaped like it";
    return false;
  }
  b.N = x.shape[0];
  b.C = x.shape[1];
  b.pix = b.N * b.C != 0 ? x.numel / (b.N * b.C) : 0;
  if (scale.numel != b.C) {
    error = "scale and statistics must have C elements";
    return false;
  }
  b.x = x.p;
  b.xType = x.type;
  b.scale = scale.p;
  b.scaleType = scale.type;
  b.y = y.p;
  b.yType = y.type;
  b.eps = static_cast<float>(attrFloat("epsilon", 1e-5));
  int64_t count = b.N * b.pix;
  // A channel's statistics by a warp or a block (one launch), or by a row
  // launch per chunk of whole samples when C rows would leave the GPU idle;
  // channels of few elements in chunks with a thread per chunk.
  const int lanes = rowLanes(count);
  if (lanes) {
    b.chunks = batchNormRowChunks(b.N, b.C, b.pix);
    b.chunk = b.N / b.chunks * b.pix;
  } else {
    b.chunk = 4096;
    b.chunks = std::max<int64_t>(1, (count + b.chunk - 1) / b.chunk);
  }
  b.ws = ws_.alloc<float>(2 * b.C * b.chunks + 4 * b.C);
  auto phase = [&](BatchNormArgs::Phase ph, int64_t threads) {
    b.phase = ph;
    kernel(KernelKind::BatchNorm, b, threads);
  };
  // A row launch per channel (Stats, GradStats), or partial sums per
  // (channel, chunk) -- row launches when the chunks are whole samples, a
  // thread per chunk otherwise -- that a thread per channel combines.
  const bool channelRows = lanes && b.chunks == 1;
  auto channels = [&](BatchNormArgs::Phase ph) {
    b.lanes = lanes;
    phase(ph, b.C);
    b.lanes = 0;
  };
  auto chunkSums = [&](BatchNormArgs::Phase ph) {
    b.lanes = lanes ? rowLanes(b.chunk) : 0;
    phase(ph, b.C * b.chunks);
    b.lanes = 0;
  };
  if (b.training && channelRows) {
    channels(BatchNormArgs::Stats);
  } else {
    if (b.training) {
      chunkSums(BatchNormArgs::SumX);
      phase(BatchNormArgs::Mean, b.C);
      chunkSums(BatchNormArgs::SumSqDiff);
    }
    phase(BatchNormArgs::Variance, b.C);
  }
  if (!grad) {
    if (y.present())
      phase(BatchNormArgs::Apply, x.numel);
    return true;
  }
  if (channelRows) {
    channels(BatchNormArgs::GradStats);
  } else {
    chunkSums(BatchNormArgs::SumGrad);
    phase(BatchNormArgs::CombineGrad, b.C);
  }
  if (y.present())
    phase(BatchNormArgs::ApplyGrad, x.numel);
  return true;
}

} // namespace ampc::rt::cuda
