//===- BatchNormKernels.cpp - BatchNormalization and its gradient ---------===//
//
// Statistics in fp32 with two passes (mean, then the mean of squared
// deviations: the population variance, as ONNX and the interpreter define
// it), 16-way partial sums per row, the rows split over the threads. An
// activation the backend keeps in channel blocks of 16 (ChannelLayout.h) is
// read 16 rows at a time, side by side, with each row's sums in the plain
// layout's order: the same bits either way.
//
//===----------------------------------------------------------------------===//

#include "NormRows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ampc::rt::cpu {

namespace {

using namespace norm;

/// Batch normalization goes over an [N, C, pix] tensor row by row in memory
/// order (row r = n * C + c), the rows split over the threads: one channel's
/// rows are pix elements every C * pix, which the hardware prefetcher follows
/// badly, so a pass in memory order is 2-3x faster than channel by channel
/// even though a pass per statistic rereads the tensor. Each row's partial
/// sum depends only on the row, and a channel's total adds its rows in n
/// order, so the results do not depend on the thread count.
int64_t minRowsFor(int64_t pix) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(pix, 1)); }

/// out[c] = the sum over n, in n order, of part[n * C + c].
void sumOverBatch(const float *part, int64_t N, int64_t C, float *out) {
  std::fill(out, out + C, 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      out[c] += part[n * C + c];
}

/// Channel blocks of 16 (TensorArg::channelBlocked): block b holds rows
/// 16 b .. 16 b + 15 (row r = n * C + c, as above), element p of row 16 b + c
/// at p * 16 + c. blockLaneSums gives each of the 16 rows laneSum's sum of
/// term(p, c) over p, in laneSum's order (lane p % 16, then pairwise), so
/// the per-row partial sums are the plain layout's bits; the 16 rows go
/// side by side in vectors.
constexpr int64_t kBlock = 16;

template <typename Term>
inline AMPC_ROW_INLINE void blockLaneSums(int64_t pix, Term term, float *out) {
  float acc[kBlock][kBlock] = {}; // [lane][row]
  int64_t p = 0;
  for (; p + kBlock <= pix; p += kBlock)
#pragma GCC unroll 16
    for (int j = 0; j < kBlock; ++j)
      for (int c = 0; c < kBlock; ++c)
        acc[j][c] += term(p + j, c);
  for (int j = 0; p < pix; ++p, ++j)
    for (int c = 0; c < kBlock; ++c)
      acc[j][c] += term(p, c);
  for (int w = kBlock / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j)
      for (int c = 0; c < kBlock; ++c)
        acc[j][c] += acc[j + w][c];
  for (int c = 0; c < kBlock; ++c)
    out[c] = acc[0][c];
}

/// Tensors read and written together must share their layout; channel
/// blocks need 16 channels a block (the backend only chooses such tensors).
bool sameChannelBlocks(const TensorArg &a, const TensorArg &b, std::string &error) {
  if (a.channelBlocked != b.channelBlocked) {
    error = "operands in different layouts (plain and channel blocks)";
    return false;
  }
  if (a.channelBlocked && (a.rank() < 3 || a.shape[1] % kBlock)) {
    error = "channel blocks of 16 need [N, C, ...] with C a multiple of 16";
    return false;
  }
  return true;
}

/// Per channel values of the 16 rows of block b.
inline void blockChannels(const float *perChannel, int64_t b, int64_t C, float *out) {
  int64_t c0 = (b * kBlock) % C;
  std::copy(perChannel + c0, perChannel + c0 + kBlock, out);
}

//===----------------------------------------------------------------------===//
// BatchNormalization
//===----------------------------------------------------------------------===//

/// The step after the normalization when the backend lets it write that
/// step's result (StepContext::reluOutput, NormEpilogue.h): Relu of Y, or of
/// Y + R, for fp32 or bf16 storage (`Bf16`). Each value is rounded to the
/// storage type where the unfused steps round it (Y as stored, then the
/// Add's result), so the bits are theirs. Bit operations the compiler
/// vectorizes, math::floatToBFloat16's rounding (nearest even, NaN quiet).
template <bool Bf16> struct ReluEpilogue {
  static AMPC_ROW_INLINE float round(float v) {
    if constexpr (!Bf16) {
      return v;
    } else {
      uint32_t x;
      std::memcpy(&x, &v, 4);
      uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) & 0xFFFF0000u;
      uint32_t quiet = (x | 0x400000u) & 0xFFFF0000u;
      x = (x & 0x7FFFFFFFu) > 0x7F800000u ? quiet : rounded;
      std::memcpy(&v, &x, 4);
      return v;
    }
  }
  /// math::relu: -0 and NaN pass through.
  static AMPC_ROW_INLINE float relu(float v) { return v < 0.0f ? 0.0f : v; }
  AMPC_ROW_INLINE float operator()(float y) const { return relu(round(y)); }
  AMPC_ROW_INLINE float operator()(float y, float r) const { return relu(round(round(y) + r)); }
};

/// Checks the epilogue's operands against Y; false (and no epilogue) when
/// they do not match it, which the backend's analysis rules out.
bool reluEpilogueFits(const StepContext &ctx, const TensorArg &y, std::string &error) {
  const TensorArg &z = ctx.reluOutput, &r = ctx.reluResidual;
  if (!z.data)
    return true;
  bool ok =
      (y.type == plan::F32 || y.type == plan::BF16) && z.type == y.type && z.numel == y.numel &&
      z.channelBlocked == y.channelBlocked &&
      (!r.data || (r.type == y.type && r.numel == y.numel && r.channelBlocked == y.channelBlocked));
  if (!ok)
    error = "the Relu after BatchNormalization does not match its result: Y " + argString(y) +
            ", Relu " + argString(z);
  return ok;
}

std::unique_ptr<Kernel> createBatchNorm(const StepContext &ctx, std::string &error) {
  for (unsigned i = 0; i < 5; ++i)
    if (!ctx.has(i)) {
      error = "BatchNormalization takes X, scale, B, mean and var";
      return nullptr;
    }
  if (!requireFloat(ctx, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, error))
    return nullptr;
  TensorArg x = ctx.inputs[0], scale = ctx.inputs[1], bias = ctx.inputs[2];
  TensorArg mean = ctx.inputs[3], var = ctx.inputs[4];
  TensorArg y = outAt(ctx, 0);
  if (x.rank() < 2 || !y.data || y.shape != x.shape) {
    error = "X must be [N, C, ...] and Y shaped like it";
    return nullptr;
  }
  int64_t N = x.shape[0], C = x.shape[1];
  int64_t pix = N * C != 0 ? x.numel / (N * C) : 0;
  const bool blocked = x.channelBlocked;
  if (!sameChannelBlocks(x, y, error) || !reluEpilogueFits(ctx, y, error))
    return nullptr;
  // With an epilogue the result goes to the Relu's tensor (Y is read by no
  // one else), with R read as it is written.
  const bool epilogue = ctx.reluOutput.data != nullptr;
  const TensorArg out = epilogue ? ctx.reluOutput : y, res = ctx.reluResidual;
  for (const TensorArg *t : {&scale, &bias, &mean, &var})
    if (t->numel != C) {
      error = "scale, B, mean and var must have C elements";
      return nullptr;
    }
  // training_mode (opset 14+), or the opset-9 form asking for statistics.
  bool training = ctx.attr("training_mode") ? ctx.attrInt("training_mode", 0) != 0
                                            : ctx.outputs.size() > 1;
  float eps = static_cast<float>(ctx.attrFloat("epsilon", 1e-5));
  float momentum = static_cast<float>(ctx.attrFloat("momentum", 0.9));
  std::vector<TensorArg> stats;
  for (unsigned i = 1; i < 5; ++i)
    stats.push_back(training ? outAt(ctx, i) : TensorArg());
  // The batch mean and 1/stddev for the grad of the same X (BatchStats.h).
  std::shared_ptr<std::vector<float>> statsOut =
      training && ctx.batchStatsOut && ctx.batchStatsOut->size() == 2 * size_t(C)
          ? ctx.batchStatsOut
          : nullptr;
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  int64_t rows = N * C;
  // Per row partial sums; per channel mean, variance, scale and shift; a row
  // of fp32 per range (X's row converted, then Y's computed in its place).
  // A block of rows when X is in channel blocks: 16 rows.
  const int64_t rowsAtOnce = blocked ? kBlock : 1;
  size_t offPart = layout.add<float>(rows), offChan = layout.add<float>(4 * C);
  size_t offRow = layout.add<float>(rowsAtOnce * pix * ctx.pool.size());
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    float *part = at<float>(scratch->data(), offPart), *mu = at<float>(scratch->data(), offChan);
    float *vr = mu + C, *mul = mu + 2 * C, *add = mu + 3 * C;
    // perUnit(u, xu, buf): unit u of X read as fp32: row u, or in channel
    // blocks block u's 16 rows.
    auto pass = [&](auto perUnit) {
      const int64_t n = rowsAtOnce * pix;
      pool.parallelFor(rows / rowsAtOnce, std::max<int64_t>(1, minRowsFor(pix) / rowsAtOnce),
                       [&](int64_t u0, int64_t u1, int range) {
                         float *buf = at<float>(scratch->data(), offRow) + range * n;
                         forEachRow(
                             [&](int64_t u) AMPC_ROW_INLINE {
                               withRow(x, u * n, n, buf,
                                       [&](auto xu) AMPC_ROW_INLINE { perUnit(u, xu, buf); });
                             },
                             u0, u1);
                       });
    };
    // The result of a unit (n values from element `begin`): Y, or the
    // epilogue's result. values(emit) calls emit(i, element i's normalized
    // value) for every i, in the unit's loop order.
    auto writeUnit = [&](int64_t begin, int64_t n, float *buf, auto values) AMPC_ROW_INLINE {
      // put(i, v): element i of the result. A bf16 epilogue's values are
      // bf16 already: their top halves are stored as they are computed.
      auto withEpilogue = [&](auto relu, auto put) AMPC_ROW_INLINE {
        if (!res.data) {
          values([&](int64_t i, float v) AMPC_ROW_INLINE { put(i, relu(v)); });
          return;
        }
        // R is fp32 or bf16 (reluEpilogueFits): read in place, no buffer.
        withRow(res, begin, n, nullptr, [&](auto r) AMPC_ROW_INLINE {
          values([&](int64_t i, float v) AMPC_ROW_INLINE { put(i, relu(v, r[i])); });
        });
      };
      if (epilogue && out.type == plan::BF16) {
        uint16_t *o = static_cast<uint16_t *>(out.data) + begin;
        withEpilogue(ReluEpilogue<true>(), [&](int64_t i, float v) AMPC_ROW_INLINE {
          uint32_t x;
          std::memcpy(&x, &v, 4);
          o[i] = static_cast<uint16_t>(x >> 16);
        });
        return;
      }
      float *o = rowOut(out, begin, buf);
      auto put = [&](int64_t i, float v) AMPC_ROW_INLINE { o[i] = v; };
      if (epilogue)
        withEpilogue(ReluEpilogue<false>(), put);
      else
        values(put);
      rowCommit(out, begin, n, o);
    };
    // Each row's sum of f(X, center of its channel) into part: row by row,
    // or 16 rows at a time in channel blocks (the same bits).
    auto sumRows = [&](const float *center, auto f) {
      if (!blocked) {
        pass([&](int64_t r, auto xr, float *) AMPC_ROW_INLINE {
          float m = center ? center[r % C] : 0.0f;
          part[r] = laneSum(pix, [&](int64_t i) AMPC_ROW_INLINE { return f(xr[i], m); });
        });
        return;
      }
      pass([&](int64_t b, auto xb, float *) AMPC_ROW_INLINE {
        float m[kBlock] = {};
        if (center)
          blockChannels(center, b, C, m);
        blockLaneSums(
            pix, [&](int64_t p, int c) AMPC_ROW_INLINE { return f(xb[p * kBlock + c], m[c]); },
            part + b * kBlock);
      });
    };
    float count = static_cast<float>(N * pix);
    if (training) {
      sumRows(nullptr, [](float xv, float) AMPC_ROW_INLINE { return xv; });
      sumOverBatch(part, N, C, mu);
      for (int64_t c = 0; c < C; ++c)
        mu[c] /= count;
      sumRows(mu, [](float xv, float m) AMPC_ROW_INLINE {
        float d = xv - m;
        return d * d;
      });
      sumOverBatch(part, N, C, vr);
      for (int64_t c = 0; c < C; ++c)
        vr[c] /= count;
    } else {
      loadFloats(mean, 0, C, mu);
      loadFloats(var, 0, C, vr);
    }
    for (int64_t c = 0; c < C; ++c) {
      float inv = 1.0f / std::sqrt(vr[c] + eps);
      mul[c] = inv * loadFloat(scale, c);
      add[c] = loadFloat(bias, c);
      if (!training)
        continue;
      if (statsOut)
        (*statsOut)[c] = mu[c], (*statsOut)[C + c] = inv;
      float values[4] = {loadFloat(mean, c) * momentum + mu[c] * (1 - momentum),
                         loadFloat(var, c) * momentum + vr[c] * (1 - momentum), mu[c], inv};
      for (int i = 0; i < 4; ++i)
        if (stats[i].data)
          storeFloat(stats[i], c, values[i]);
    }
    // The result may go in place over X's unit in buf: element i is read
    // before it is written.
    if (blocked) {
      pass([&](int64_t b, auto xb, float *buf) AMPC_ROW_INLINE {
        float m[kBlock], sc[kBlock], sh[kBlock];
        blockChannels(mu, b, C, m);
        blockChannels(mul, b, C, sc);
        blockChannels(add, b, C, sh);
        writeUnit(b * kBlock * pix, kBlock * pix, buf, [&](auto emit) AMPC_ROW_INLINE {
          for (int64_t p = 0; p < pix; ++p)
            for (int c = 0; c < kBlock; ++c)
              emit(p * kBlock + c, (xb[p * kBlock + c] - m[c]) * sc[c] + sh[c]);
        });
      });
      return;
    }
    pass([&](int64_t r, auto xr, float *buf) AMPC_ROW_INLINE {
      int64_t c = r % C;
      float m = mu[c], sc = mul[c], b = add[c];
      writeUnit(r * pix, pix, buf, [&](auto emit) AMPC_ROW_INLINE {
        for (int64_t p = 0; p < pix; ++p)
          emit(p, (xr[p] - m) * sc + b);
      });
    });
  });
}

//===----------------------------------------------------------------------===//
// BatchNormalizationGrad
//===----------------------------------------------------------------------===//

std::unique_ptr<Kernel> createBatchNormGrad(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0) || !ctx.has(1) || !ctx.has(2)) {
    error = "BatchNormalizationGrad takes dY, X and Scale";
    return nullptr;
  }
  if (!requireFloat(ctx, {0, 1, 2, 3, 4}, {0, 1, 2}, error))
    return nullptr;
  TensorArg dy = ctx.inputs[0], x = ctx.inputs[1], scale = ctx.inputs[2];
  bool training = ctx.attrInt("training_mode", 1) != 0;
  if (!training && (!ctx.has(3) || !ctx.has(4))) {
    error = "inference mode needs the running mean and variance";
    return nullptr;
  }
  TensorArg mean = training ? TensorArg() : ctx.inputs[3];
  TensorArg var = training ? TensorArg() : ctx.inputs[4];
  if (x.rank() < 2 || dy.shape != x.shape) {
    error = "X must be [N, C, ...] and dY shaped like it";
    return nullptr;
  }
  int64_t N = x.shape[0], C = x.shape[1];
  int64_t pix = N * C != 0 ? x.numel / (N * C) : 0;
  TensorArg dx = outAt(ctx, 0), dScale = outAt(ctx, 1), dBias = outAt(ctx, 2);
  if (scale.numel != C || (dx.data && dx.shape != x.shape) || (dScale.data && dScale.numel != C) ||
      (dBias.data && dBias.numel != C)) {
    error = "shapes of the scale or the gradients do not match";
    return nullptr;
  }
  const bool blocked = x.channelBlocked;
  if (!sameChannelBlocks(x, dy, error) || (dx.data && !sameChannelBlocks(x, dx, error)))
    return nullptr;
  float eps = static_cast<float>(ctx.attrFloat("epsilon", 1e-5));
  // The forward step's mean and 1/stddev of this X, the bits this kernel
  // would compute from X (BatchStats.h): one pass over X and dY fewer.
  std::shared_ptr<std::vector<float>> saved =
      training && ctx.batchStatsIn && ctx.batchStatsIn->size() == 2 * size_t(C) ? ctx.batchStatsIn
                                                                                : nullptr;
  auto scratch = SharedScratch::of(ctx.pool);
  ScratchLayout layout;
  int64_t rows = N * C;
  // Two per row partial sums; per channel mean, 1/stddev, sum of dY and of
  // dY * xhat; rows of fp32 per range (X, dY, dX).
  const int64_t rowsAtOnce = blocked ? kBlock : 1;
  size_t offPart = layout.add<float>(2 * rows), offChan = layout.add<float>(4 * C);
  size_t offRow = layout.add<float>(3 * rowsAtOnce * pix * ctx.pool.size());
  scratch->reserve(layout.size());
  ThreadPool &pool = ctx.pool;
  return std::make_unique<LambdaKernel>([=, &pool] {
    float *partA = at<float>(scratch->data(), offPart), *partB = partA + rows;
    float *mu = at<float>(scratch->data(), offChan), *inv = mu + C, *sumDy = mu + 2 * C,
          *sumDyXhat = mu + 3 * C;
    // perUnit(u, xu, gu, buf): unit u of X and dY read as fp32: row u, or in
    // channel blocks block u's 16 rows.
    auto pass = [&](auto perUnit) {
      const int64_t n = rowsAtOnce * pix;
      pool.parallelFor(
          rows / rowsAtOnce, std::max<int64_t>(1, minRowsFor(pix) / rowsAtOnce),
          [&](int64_t u0, int64_t u1, int range) {
            float *buf = at<float>(scratch->data(), offRow) + range * 3 * n;
            forEachRow(
                [&](int64_t u) AMPC_ROW_INLINE {
                  withRow(x, u * n, n, buf, [&](auto xu) AMPC_ROW_INLINE {
                    withRow(dy, u * n, n, buf + n,
                            [&](auto gu) AMPC_ROW_INLINE { perUnit(u, xu, gu, buf + 2 * n); });
                  });
                },
                u0, u1);
          });
    };
    // Each row's sums of f(X) and g(dY, X), into partA and partB: row by row,
    // or 16 rows at a time in channel blocks (the same bits).
    auto sumRows = [&](const float *center, auto fa, auto fb) {
      if (!blocked) {
        pass([&](int64_t r, auto xr, auto g, float *) AMPC_ROW_INLINE {
          float m = center ? center[r % C] : 0.0f;
          partA[r] = laneSum(pix, [&](int64_t i) AMPC_ROW_INLINE { return fa(xr[i], g[i], m); });
          partB[r] = laneSum(pix, [&](int64_t i) AMPC_ROW_INLINE { return fb(xr[i], g[i], m); });
        });
        return;
      }
      pass([&](int64_t b, auto xb, auto gb, float *) AMPC_ROW_INLINE {
        float m[kBlock] = {};
        if (center)
          blockChannels(center, b, C, m);
        auto at = [&](auto f) AMPC_ROW_INLINE {
          return [&, f](int64_t p, int c) AMPC_ROW_INLINE {
            return f(xb[p * kBlock + c], gb[p * kBlock + c], m[c]);
          };
        };
        blockLaneSums(pix, at(fa), partA + b * kBlock);
        blockLaneSums(pix, at(fb), partB + b * kBlock);
      });
    };
    auto xOf = [](float xv, float, float) AMPC_ROW_INLINE { return xv; };
    auto dyOf = [](float, float g, float) AMPC_ROW_INLINE { return g; };
    auto squaredDiff = [](float xv, float, float m) AMPC_ROW_INLINE {
      float d = xv - m;
      return d * d;
    };
    auto dyTimesCentered = [](float xv, float g, float m) AMPC_ROW_INLINE { return g * (xv - m); };
    float count = static_cast<float>(N * pix);
    // sum(dY * xhat) = inv * sum(dY * (X - mean)), once mean is known.
    if (saved) {
      std::memcpy(mu, saved->data(), C * sizeof(float));
      std::memcpy(inv, saved->data() + C, C * sizeof(float));
      // sum(dY) in the same order as the first pass below took it.
      sumRows(mu, dyOf, dyTimesCentered);
      sumOverBatch(partA, N, C, sumDy);
    } else if (training) {
      sumRows(nullptr, xOf, dyOf);
      sumOverBatch(partA, N, C, mu);
      sumOverBatch(partB, N, C, sumDy);
      for (int64_t c = 0; c < C; ++c)
        mu[c] /= count;
      sumRows(mu, squaredDiff, dyTimesCentered);
      sumOverBatch(partA, N, C, inv);
      for (int64_t c = 0; c < C; ++c)
        inv[c] = 1.0f / std::sqrt(inv[c] / count + eps);
    } else {
      loadFloats(mean, 0, C, mu);
      loadFloats(var, 0, C, inv);
      for (int64_t c = 0; c < C; ++c)
        inv[c] = 1.0f / std::sqrt(inv[c] + eps);
      sumRows(mu, dyOf, dyTimesCentered);
      sumOverBatch(partA, N, C, sumDy);
    }
    sumOverBatch(partB, N, C, sumDyXhat);
    for (int64_t c = 0; c < C; ++c) {
      sumDyXhat[c] *= inv[c];
      if (dScale.data)
        storeFloat(dScale, c, sumDyXhat[c]);
      if (dBias.data)
        storeFloat(dBias, c, sumDy[c]);
    }
    if (!dx.data)
      return;
    if (blocked) {
      pass([&](int64_t b, auto xb, auto gb, float *buf) AMPC_ROW_INLINE {
        float sc[kBlock], m[kBlock], iv[kBlock], mg[kBlock], mgx[kBlock];
        for (int c = 0; c < kBlock; ++c) {
          int64_t ch = (b * kBlock + c) % C;
          sc[c] = loadFloat(scale, ch), m[c] = mu[ch], iv[c] = inv[ch];
          mg[c] = sc[c] * sumDy[ch] / count, mgx[c] = sc[c] * sumDyXhat[ch] / count;
        }
        float *out = rowOut(dx, b * kBlock * pix, buf);
        for (int64_t p = 0; p < pix; ++p)
          for (int c = 0; c < kBlock; ++c) {
            float g = gb[p * kBlock + c], xv = xb[p * kBlock + c];
            out[p * kBlock + c] = training ? iv[c] * (g * sc[c] - mg[c] - (xv - m[c]) * iv[c] * mgx[c])
                                           : g * sc[c] * iv[c];
          }
        rowCommit(dx, b * kBlock * pix, kBlock * pix, out);
      });
      return;
    }
    pass([&](int64_t r, auto xr, auto g, float *buf) AMPC_ROW_INLINE {
      int64_t c = r % C;
      float sc = loadFloat(scale, c), m = mu[c], iv = inv[c];
      float mg = sc * sumDy[c] / count, mgx = sc * sumDyXhat[c] / count;
      float *out = rowOut(dx, r * pix, buf);
      if (training)
        for (int64_t p = 0; p < pix; ++p)
          out[p] = iv * (g[p] * sc - mg - (xr[p] - m) * iv * mgx);
      else
        for (int64_t p = 0; p < pix; ++p)
          out[p] = g[p] * sc * iv;
      rowCommit(dx, r * pix, pix, out);
    });
  });
}

} // namespace

void registerBatchNormKernels() {
  registerKernel("BatchNormalization", createBatchNorm);
  registerKernel("ampc.BatchNormalizationGrad", createBatchNormGrad);
}

} // namespace ampc::rt::cpu
