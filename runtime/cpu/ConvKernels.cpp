//===- ConvKernels.cpp - Conv and ampc.ConvGrad through oneDNN -------------===//
//
// Convolution forward, backward data and backward weights (with the bias
// gradient) are oneDNN primitives created with the kernel, on plain (NCHW)
// layouts so that no reorder runs per step. 1-D, 2-D and 3-D, groups,
// strides, dilations and pads (auto_pad resolved as the interpreter does).
// ONNX floors the output size, so the trailing pad oneDNN is given is the one
// that makes its output size formula exact (possibly negative: the last input
// rows are then never read, and get zero gradient).
// fp32 3x3 convolutions of stride 1 with at least 32 channels in and out run
// as Winograd F(4x4, 3x3) (useWinograd, below).
// Types as for GEMM: fp32; bf16 natively (fp32 accumulation, results rounded
// to nearest even) where the CPU multiplies bf16 faster than fp32
// (nativeBf16Compute), otherwise as fp16: through fp32 copies in scratch.
//
//===----------------------------------------------------------------------===//

#include "DnnlHelpers.h"

#include <cstdlib>
#include <cstring>

namespace ampc::rt::cpu {

namespace {

using dt = dnnl::memory::data_type;

/// The convolution problem of a Conv or ConvGrad step.
struct ConvShape {
  int64_t N = 0, C = 0, M = 0, group = 1;
  std::vector<int64_t> inSp, outSp, kSp;
  WindowGeometry win;
  dnnl::memory::dims strides, dilates, padL, padR;

  std::vector<int64_t> xDims() const {
    std::vector<int64_t> d{N, C};
    d.insert(d.end(), inSp.begin(), inSp.end());
    return d;
  }
  std::vector<int64_t> yDims() const {
    std::vector<int64_t> d{N, M};
    d.insert(d.end(), outSp.begin(), outSp.end());
    return d;
  }
  std::vector<int64_t> wDims() const {
    std::vector<int64_t> d;
    if (group > 1)
      d = {group, M / group, C / group};
    else
      d = {M, C};
    d.insert(d.end(), kSp.begin(), kSp.end());
    return d;
  }
};

bool convShape(const StepContext &ctx, const TensorArg &x, const TensorArg &w,
               const std::vector<int64_t> &yShape, ConvShape &s, std::string &error) {
  if (x.rank() < 3 || x.rank() > 5 || w.rank() != x.rank() ||
      static_cast<int64_t>(yShape.size()) != x.rank()) {
    error = "convolution needs 1 to 3 spatial axes: X " + argString(x) + ", W " + argString(w);
    return false;
  }
  s.N = x.shape[0];
  s.C = x.shape[1];
  s.M = w.shape[0];
  s.group = ctx.attrInt("group", 1);
  if (s.group <= 0 || s.C % s.group || s.M % s.group || w.shape[1] * s.group != s.C ||
      yShape[0] != s.N || yShape[1] != s.M) {
    error = "channels do not match: X " + argString(x) + ", W " + argString(w) + ", group " +
            std::to_string(s.group);
    return false;
  }
  s.inSp.assign(x.shape.begin() + 2, x.shape.end());
  s.outSp.assign(yShape.begin() + 2, yShape.end());
  s.kSp.assign(w.shape.begin() + 2, w.shape.end());
  std::vector<int64_t> kernel = ctx.attrInts("kernel_shape", s.kSp);
  if (kernel != s.kSp) {
    error = "kernel_shape differs from the weights";
    return false;
  }
  if (!windowGeometry(ctx, s.inSp, s.outSp, s.kSp, s.win, error))
    return false;
  for (size_t d = 0; d < s.kSp.size(); ++d) {
    int64_t eff = (s.kSp[d] - 1) * s.win.dilations[d] + 1;
    int64_t padR = (s.outSp[d] - 1) * s.win.strides[d] + eff - s.inSp[d] - s.win.padBegin[d];
    s.strides.push_back(s.win.strides[d]);
    s.dilates.push_back(s.win.dilations[d] - 1);
    s.padL.push_back(s.win.padBegin[d]);
    s.padR.push_back(padR);
  }
  return true;
}

/// Whether an fp32 convolution runs as Winograd F(4x4, 3x3) (oneDNN's
/// jit_wino_4x3) instead of directly: 2-D, 3x3, stride 1, no dilation, one
/// group, at least `minChannels` channels in and out (32; 16 for the
/// weights' gradient), and AMPC_CPU_CONV_WINOGRAD is not "off". Measured
/// (oneDNN 2.6, AVX-512, batch 64, 2 threads, forward / backward data /
/// backward weights): 32 channels on 16x16 0.70 / 0.71 / 0.72 ms directly,
/// 0.52 / 0.52 / 0.58 as Winograd; 64 on 8x8 0.67 / 0.70 / 0.78 against
/// 0.41 / 0.41 / 0.53; 16 on 32x32 slower as Winograd (1.09 against 0.90 ms
/// forward, 1.08 against 0.83 backward data) but for the weights' gradient
/// (0.78 against 0.89). The transforms cost accuracy: its error, measured
/// against double math, is at most about 1e-6 of sum |x||w| (direct: 3e-7);
/// CpuKernel.ConvWinogradErrorBound holds it to 2^-18 of that sum, which is
/// within the worst case of a direct fp32 sum of 9C products (9C * 2^-24).
bool useWinograd(const ConvShape &s, dt cdt, plan::ElemType type, int64_t minChannels = 32) {
  // Read when a kernel is created (plan load), so that tests can compare.
  const char *env = std::getenv("AMPC_CPU_CONV_WINOGRAD");
  if ((env && std::strcmp(env, "off") == 0) || cdt != dt::f32 || type != plan::F32 ||
      s.group != 1 || s.C < minChannels || s.M < minChannels || s.kSp != std::vector<int64_t>{3, 3})
    return false;
  for (size_t d = 0; d < s.strides.size(); ++d)
    if (s.strides[d] != 1 || s.dilates[d] != 0)
      return false;
  return true;
}

/// Common state of the convolution kernels.
class DnnlKernel : public Kernel {
public:
  explicit DnnlKernel(ThreadPool &pool) : pool_(pool), stream_(dnnlEngine()) {
    scratch_ = SharedScratch::of(pool);
  }

protected:
  /// Binds argument `arg`: the tensor's memory, or a scratch sub-buffer.
  void bind(DnnlCall &call, int arg, const dnnl::memory::desc &md, void *data, bool inScratch,
            size_t off) {
    call.args[arg] = dnnl::memory(md, dnnlEngine(), inScratch ? nullptr : data);
    if (inScratch)
      call.scratchArgs.push_back({arg, off});
  }
  /// Binds `arg` of `call` in the layout the primitive chose (`want`). The
  /// tensor (or its scratch copy) is used as it is when that is its own
  /// layout `plain` (row-major, or channel blocks the backend keeps it in);
  /// otherwise a scratch buffer in `want`'s layout is filled
  /// from it before the call (an input) or copied back to it after (an
  /// output), by a reorder created here, once per plan.
  /// A tensor bound in tensor memory (not scratch) may be a batch slice:
  /// sliceBytes > 0 is the size of one chunk of images, and run() points the
  /// memory at chunk k (slices_).
  void bindAs(DnnlCall &call, int arg, const dnnl::memory::desc &want,
              const dnnl::memory::desc &plain, void *data, bool inScratch, size_t off,
              bool output, ScratchLayout &layout, size_t sliceBytes = 0) {
    bool sliced = sliceBytes && !inScratch;
    if (ChannelBlockReorder::sameBytes(want, plain)) {
      bind(call, arg, want, data, inScratch, off);
      if (sliced)
        slices_.push_back({&call, nullptr, 0, arg, static_cast<uint8_t *>(data), sliceBytes});
      return;
    }
    // An input already staged in this layout (dY for both backward passes)
    // is read from that copy: one reorder, not two.
    for (const Staged &st : staged_)
      if (!output && st.data == data && st.inScratch == inScratch && st.off == off &&
          st.desc == want) {
        bind(call, arg, want, nullptr, true, st.staged);
        return;
      }
    size_t staged = layout.add<uint8_t>(static_cast<int64_t>(want.get_size()));
    if (!output)
      staged_.push_back({data, inScratch, off, want, staged});
    bind(call, arg, want, nullptr, true, staged);
    DnnlCall r;
    const dnnl::memory::desc &src = output ? want : plain, &dst = output ? plain : want;
    r.channelReorder = ChannelBlockReorder::match(src, dst);
    if (!r.channelReorder)
      r.prim = dnnl::reorder(dnnl::reorder::primitive_desc(dnnlEngine(), src, dnnlEngine(), dst));
    bind(r, output ? DNNL_ARG_DST : DNNL_ARG_SRC, plain, data, inScratch, off);
    bind(r, output ? DNNL_ARG_SRC : DNNL_ARG_DST, want, nullptr, true, staged);
    std::vector<DnnlCall> &list = output ? after_ : before_;
    list.push_back(std::move(r));
    if (sliced)
      slices_.push_back({nullptr, &list, list.size() - 1, output ? DNNL_ARG_DST : DNNL_ARG_SRC,
                         static_cast<uint8_t *>(data), sliceBytes});
  }

  /// Points every batch-sliced memory at chunk k.
  void selectChunk(int64_t k) {
    for (Slice &sl : slices_)
      (sl.call ? *sl.call : (*sl.list)[sl.index])
          .args[sl.arg]
          .set_data_handle(sl.base + k * sl.bytes);
  }

  bool reserve(const ScratchLayout &layout, std::string &error) {
    scratch_->reserve(layout.size());
    if (layout.size() && !scratch_->data()) {
      error = "cannot allocate scratch memory";
      return false;
    }
    return true;
  }

  ThreadPool &pool_;
  std::shared_ptr<SharedScratch> scratch_;
  dnnl::stream stream_;
  /// Reorders into and out of the primitives' blocked layouts (bindAs).
  std::vector<DnnlCall> before_, after_;
  /// Inputs staged in a blocked layout: (tensor, layout) -> scratch offset.
  struct Staged {
    void *data;
    bool inScratch;
    size_t off;
    dnnl::memory::desc desc;
    size_t staged;
  };
  std::vector<Staged> staged_;
  /// Memories over a chunk of a batch (bindAs's sliceBytes): in `call`, or
  /// in (*list)[index].
  struct Slice {
    DnnlCall *call;
    std::vector<DnnlCall> *list;
    size_t index;
    int arg;
    uint8_t *base;
    size_t bytes;
  };
  std::vector<Slice> slices_;
};

/// Images per forward convolution call: the batch in chunks of 4 to 8 images
/// where such a chunk divides it, so that a chunk's operands stay in cache
/// from the reorder into the primitive's layout through the convolution to
/// the reorder out (standalone, batch 64, 3x3 16 -> 16 on 32x32 with its
/// reorders, 2 threads: 3.15 ms whole, 2.39 ms in chunks of 8). An image's
/// convolution reads no other image, so chunks only split the work.
int64_t forwardChunk(int64_t N) {
  if (N <= 8)
    return N;
  for (int64_t c = 8; c >= 4; --c)
    if (N % c == 0)
      return c;
  return N;
}

class ConvForward : public DnnlKernel {
public:
  ConvForward(ThreadPool &pool, TensorArg x, TensorArg w, TensorArg b, TensorArg y)
      : DnnlKernel(pool), x_(x), w_(w), b_(b), y_(y) {}

  bool prepare(const ConvShape &whole, std::string &error) {
    viaF32_ = computeViaF32(y_.type);
    dt cdt = dnnlComputeType(y_.type);
    // In chunks of images (forwardChunk), on the tensors' own memory only,
    // and in fp32: oneDNN 2.6's bf16 convolutions ran slower in chunks at 2
    // threads (resnet20: Conv 17.4 -> 19.6 ms a step), its fp32 ones faster
    // (28.0 -> 26.6 ms).
    // Winograd runs on the whole batch: its weight transform is per call
    // (in chunks of 8 images, 32 channels on 16x16: 2.1 ms a chunk).
    alg_ = !directOnly_ && useWinograd(whole, cdt, y_.type) ? dnnl::algorithm::convolution_winograd
                                                            : dnnl::algorithm::convolution_direct;
    ConvShape s = whole;
    s.N = viaF32_ || cdt != dt::f32 || alg_ == dnnl::algorithm::convolution_winograd
              ? whole.N
              : forwardChunk(whole.N);
    chunks_ = whole.N / s.N;
    size_t xChunk = static_cast<size_t>(x_.numel / chunks_) * elemBytes(x_.type);
    size_t yChunk = static_cast<size_t>(y_.numel / chunks_) * elemBytes(y_.type);
    ScratchLayout layout;
    if (viaF32_) {
      offX_ = layout.add<float>(x_.numel);
      offW_ = layout.add<float>(w_.numel);
      offY_ = layout.add<float>(y_.numel);
    }
    bool biasF32 = b_.data && (viaF32_ || b_.type == plan::F32);
    try {
      auto xMd = activationDesc(x_, s.xDims(), cdt), yMd = activationDesc(y_, s.yDims(), cdt);
      auto wMd = plainDesc(s.wDims(), cdt);
      dnnl::memory::desc bMd;
      if (b_.data)
        bMd = plainDesc({s.M}, biasF32 ? dt::f32 : cdt);
      // The primitive picks its layouts (format_tag::any), as ConvBackward's
      // do: plain NCHW convolutions run several times slower in oneDNN.
      auto anyDesc = [&](const std::vector<int64_t> &dims) {
        return dnnl::memory::desc(toDims(dims), cdt, dnnl::memory::format_tag::any);
      };
      auto xAny = anyDesc(s.xDims()), yAny = anyDesc(s.yDims()), wAny = anyDesc(s.wDims());
      // One block of 16 channels in and out (CIFAR ResNet's first stage),
      // fp32: nChw16c, what format_tag::any picks, is then channels-last
      // byte for byte, and on a channels-last src and dst oneDNN 2.6 runs its
      // brgemm convolution, measured faster than the blocked jit one for 3x3
      // 16 -> 16 (AVX-512, batch 64, 32x32, 2 threads: 1.44 against 1.87 ms);
      // the reorders from and to NCHW are the same. Not for bf16 (measured
      // no faster); and only where oneDNN has the brgemm kernel for it.
      bool channelsLast =
          s.C == 16 && s.M == 16 && s.group == 1 && s.kSp.size() == 2 && cdt == dt::f32;
      if (channelsLast) {
        xAny = dnnl::memory::desc(toDims(s.xDims()), cdt, dnnl::memory::format_tag::nhwc);
        yAny = dnnl::memory::desc(toDims(s.yDims()), cdt, dnnl::memory::format_tag::nhwc);
      }
      auto makePd = [&](const dnnl::memory::desc &bias) {
        auto d = b_.data ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg_,
                                                           xAny, wAny, bias, yAny, s.strides,
                                                           s.dilates, s.padL, s.padR)
                         : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg_,
                                                           xAny, wAny, yAny, s.strides, s.dilates,
                                                           s.padL, s.padR);
        return dnnl::convolution_forward::primitive_desc(d, dnnlAttr(), dnnlEngine(), true);
      };
      auto pd = makePd(bMd);
      if (!pd && alg_ == dnnl::algorithm::convolution_winograd) {
        // Not for these pads or this CPU: prepared again as a direct
        // convolution, in chunks of images (nothing is bound yet).
        directOnly_ = true;
        return prepare(whole, error);
      }
      if (channelsLast && (!pd || std::string(pd.impl_info_str()).rfind("brgconv", 0) != 0)) {
        xAny = anyDesc(s.xDims());
        yAny = anyDesc(s.yDims());
        pd = makePd(bMd);
      }
      if (!pd && b_.data && !biasF32) { // bf16 bias unsupported: give it as fp32
        biasF32 = true;
        bMd = plainDesc({s.M}, dt::f32);
        pd = makePd(bMd);
      }
      if (!pd) {
        error = "oneDNN has no convolution for these shapes";
        return false;
      }
      if (b_.data && (viaF32_ || b_.type != plan::F32) && biasF32)
        offB_ = layout.add<float>(s.M), biasConvert_ = true;
      offPad_ = layout.add<uint8_t>(static_cast<int64_t>(pd.scratchpad_desc().get_size()));
      call_.prim = dnnl::convolution_forward(pd);
      // The weights' reorder runs once a step, before the chunks.
      bindAs(call_, DNNL_ARG_WEIGHTS, pd.weights_desc(), wMd, w_.data, viaF32_, offW_, false,
             layout);
      weightsBefore_ = before_.size();
      bindAs(call_, DNNL_ARG_SRC, pd.src_desc(), xMd, x_.data, viaF32_, offX_, false, layout,
             xChunk);
      bindAs(call_, DNNL_ARG_DST, pd.dst_desc(), yMd, y_.data, viaF32_, offY_, true, layout,
             yChunk);
      if (b_.data)
        bind(call_, DNNL_ARG_BIAS, bMd, b_.data, biasConvert_, offB_);
      bind(call_, DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc(), nullptr, true, offPad_);
    } catch (const dnnl::error &e) {
      error = std::string("oneDNN convolution: ") + e.what();
      return false;
    }
    return reserve(layout, error);
  }

  void run() override {
    uint8_t *base = scratch_->data();
    if (viaF32_) {
      parallelToFloat(pool_, x_, at<float>(base, offX_));
      parallelToFloat(pool_, w_, at<float>(base, offW_));
    }
    if (biasConvert_)
      loadFloats(b_, 0, b_.numel, at<float>(base, offB_));
    omp_set_num_threads(pool_.size());
    for (size_t i = 0; i < weightsBefore_; ++i)
      before_[i].execute(stream_, base);
    for (int64_t k = 0; k < chunks_; ++k) {
      if (chunks_ > 1)
        selectChunk(k);
      for (size_t i = weightsBefore_; i < before_.size(); ++i)
        before_[i].execute(stream_, base);
      call_.execute(stream_, base);
      for (DnnlCall &r : after_)
        r.execute(stream_, base);
    }
    if (viaF32_)
      parallelFromFloat(pool_, at<float>(base, offY_), y_);
  }

private:
  TensorArg x_, w_, b_, y_;
  dnnl::algorithm alg_ = dnnl::algorithm::convolution_direct;
  bool directOnly_ = false;
  DnnlCall call_;
  int64_t chunks_ = 1;
  size_t weightsBefore_ = 0;
  bool viaF32_ = false, biasConvert_ = false;
  size_t offX_ = 0, offW_ = 0, offB_ = 0, offY_ = 0, offPad_ = 0;
};

std::unique_ptr<Kernel> createConv(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0) || !ctx.has(1) || ctx.outputs.empty() || !ctx.outputs[0].data) {
    error = "Conv takes X and W";
    return nullptr;
  }
  if (!requireFloat(ctx, {0, 1, 2}, {0}, error))
    return nullptr;
  const TensorArg &x = ctx.inputs[0], &w = ctx.inputs[1], &y = ctx.outputs[0];
  if (x.type != y.type || w.type != y.type) {
    error = "X, W and Y must share their element type";
    return nullptr;
  }
  ConvShape s;
  if (!convShape(ctx, x, w, y.shape, s, error))
    return nullptr;
  TensorArg b = ctx.has(2) ? ctx.inputs[2] : TensorArg();
  if (b.data && b.numel != s.M) {
    error = "bias " + argString(b) + " must have M elements";
    return nullptr;
  }
  if (y.numel == 0)
    return std::make_unique<LambdaKernel>([] {});
  auto k = std::make_unique<ConvForward>(ctx.pool, x, w, b, y);
  if (!k->prepare(s, error))
    return nullptr;
  return k;
}

//===----------------------------------------------------------------------===//
// ampc.ConvGrad
//===----------------------------------------------------------------------===//

class ConvBackward : public DnnlKernel {
public:
  ConvBackward(ThreadPool &pool, TensorArg dy, TensorArg x, TensorArg w, TensorArg dx,
               TensorArg dw, TensorArg db)
      : DnnlKernel(pool), dy_(dy), x_(x), w_(w), dx_(dx), dw_(dw), db_(db) {}

  bool prepare(const ConvShape &s, std::string &error) {
    M_ = s.M;
    N_ = s.N;
    outPix_ = product(s.outSp);
    viaF32_ = computeViaF32(dy_.type);
    dt cdt = dnnlComputeType(dy_.type);
    ScratchLayout layout;
    if (viaF32_) {
      offDy_ = layout.add<float>(dy_.numel);
      if (dw_.data)
        offX_ = layout.add<float>(x_.numel);
      if (dx_.data)
        offW_ = layout.add<float>(w_.numel);
      if (dx_.data)
        offDx_ = layout.add<float>(dx_.numel);
      if (dw_.data)
        offDw_ = layout.add<float>(dw_.numel);
    }
    // The bias gradient comes with the weights gradient; alone, or when its
    // type is not what oneDNN writes, it is a plain reduction of dY.
    bool dbWithDw = db_.data && dw_.data && !viaF32_;
    try {
      auto xMd = activationDesc(x_, s.xDims(), cdt), yMd = activationDesc(dy_, s.yDims(), cdt);
      auto dxMd = activationDesc(dx_, s.xDims(), cdt), wMd = plainDesc(s.wDims(), cdt);
      auto bMd = plainDesc({s.M}, db_.data ? dnnlComputeType(db_.type) : dt::f32);
      // The primitives pick their layouts (format_tag::any): in plain NCHW,
      // oneDNN's backward passes fall back to slow implementations; blocked
      // ones (nChw16c...) are several times faster, reorders included.
      auto anyDesc = [&](const std::vector<int64_t> &dims) {
        return dnnl::memory::desc(toDims(dims), cdt, dnnl::memory::format_tag::any);
      };
      auto xAny = anyDesc(s.xDims()), yAny = anyDesc(s.yDims()), wAny = anyDesc(s.wDims());
      // The forward pass the backward primitives are told about: of the
      // same algorithm (Winograd or direct, useWinograd).
      auto forwardHint = [&](dnnl::algorithm alg) {
        return dnnl::convolution_forward::primitive_desc(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, xAny, wAny, bMd,
                                            yAny, s.strides, s.dilates, s.padL, s.padR),
            dnnlAttr(), dnnlEngine(), true);
      };
      const dnnl::algorithm direct = dnnl::algorithm::convolution_direct;
      dnnl::algorithm preferred =
          useWinograd(s, cdt, dy_.type) ? dnnl::algorithm::convolution_winograd : direct;
      if (dx_.data) {
        // Negative trailing pads: input rows no output reads get no gradient;
        // dX is zeroed first in case the primitive leaves them alone, so it
        // is written in place (a staged copy would carry garbage there).
        for (auto p : s.padR)
          zeroDx_ = zeroDx_ || p < 0;
        auto makePd = [&](dnnl::algorithm alg) {
          auto fwd = forwardHint(alg);
          if (!fwd)
            return dnnl::convolution_backward_data::primitive_desc();
          return dnnl::convolution_backward_data::primitive_desc(
              dnnl::convolution_backward_data::desc(alg, zeroDx_ ? dxMd : xAny, wAny, yAny,
                                                    s.strides, s.dilates, s.padL, s.padR),
              dnnlAttr(), dnnlEngine(), fwd, true);
        };
        auto pd = makePd(preferred);
        if (!pd && preferred != direct)
          pd = makePd(direct);
        if (!pd) {
          error = "oneDNN has no backward-data convolution for these shapes";
          return false;
        }
        offPadData_ = layout.add<uint8_t>(static_cast<int64_t>(pd.scratchpad_desc().get_size()));
        data_.prim = dnnl::convolution_backward_data(pd);
        bindAs(data_, DNNL_ARG_DIFF_DST, pd.diff_dst_desc(), yMd, dy_.data, viaF32_, offDy_, false,
               layout);
        bindAs(data_, DNNL_ARG_WEIGHTS, pd.weights_desc(), wMd, w_.data, viaF32_, offW_, false,
               layout);
        bindAs(data_, DNNL_ARG_DIFF_SRC, pd.diff_src_desc(), dxMd, dx_.data, viaF32_, offDx_, true,
               layout);
        dataBefore_ = before_.size();
        dataAfter_ = after_.size();
        bind(data_, DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc(), nullptr, true, offPadData_);
      }
      if (dw_.data) {
        auto makePd = [&](dnnl::algorithm alg, bool withBias) {
          auto fwd = forwardHint(alg);
          if (!fwd)
            return dnnl::convolution_backward_weights::primitive_desc();
          auto d = withBias ? dnnl::convolution_backward_weights::desc(
                                  alg, xAny, wAny, bMd, yAny, s.strides, s.dilates, s.padL, s.padR)
                            : dnnl::convolution_backward_weights::desc(
                                  alg, xAny, wAny, yAny, s.strides, s.dilates, s.padL, s.padR);
          return dnnl::convolution_backward_weights::primitive_desc(d, dnnlAttr(), dnnlEngine(),
                                                                    fwd, true);
        };
        // Backward weights gains from 16 channels on (0.89 -> 0.78-0.79 ms
        // for 16 on 32x32).
        dnnl::algorithm preferredW =
            useWinograd(s, cdt, dy_.type, 16) ? dnnl::algorithm::convolution_winograd : direct;
        auto pd = makePd(preferredW, dbWithDw);
        if (!pd && preferredW != direct)
          pd = makePd(direct, dbWithDw);
        if (!pd && dbWithDw) {
          dbWithDw = false;
          pd = makePd(direct, false);
        }
        if (!pd) {
          error = "oneDNN has no backward-weights convolution for these shapes";
          return false;
        }
        offPadWeights_ =
            layout.add<uint8_t>(static_cast<int64_t>(pd.scratchpad_desc().get_size()));
        weights_.prim = dnnl::convolution_backward_weights(pd);
        bindAs(weights_, DNNL_ARG_DIFF_DST, pd.diff_dst_desc(), yMd, dy_.data, viaF32_, offDy_,
               false, layout);
        bindAs(weights_, DNNL_ARG_SRC, pd.src_desc(), xMd, x_.data, viaF32_, offX_, false, layout);
        bindAs(weights_, DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc(), wMd, dw_.data, viaF32_,
               offDw_, true, layout);
        if (dbWithDw)
          bind(weights_, DNNL_ARG_DIFF_BIAS, bMd, db_.data, false, 0);
        bind(weights_, DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc(), nullptr, true, offPadWeights_);
      }
    } catch (const dnnl::error &e) {
      error = std::string("oneDNN convolution backward: ") + e.what();
      return false;
    }
    dbByHand_ = db_.data && !dbWithDw;
    if (dbByHand_)
      offRow_ = layout.add<float>(pool_.size() * std::max<int64_t>(outPix_, 1));
    return reserve(layout, error);
  }

  void run() override {
    uint8_t *base = scratch_->data();
    if (viaF32_) {
      parallelToFloat(pool_, dy_, at<float>(base, offDy_));
      if (dw_.data)
        parallelToFloat(pool_, x_, at<float>(base, offX_));
      if (dx_.data)
        parallelToFloat(pool_, w_, at<float>(base, offW_));
    }
    omp_set_num_threads(pool_.size());
    if (dx_.data) {
      if (zeroDx_)
        std::memset(viaF32_ ? static_cast<void *>(at<float>(base, offDx_)) : dx_.data, 0,
                    dx_.numel * (viaF32_ ? 4 : elemBytes(dx_.type)));
      for (size_t i = 0; i < dataBefore_; ++i)
        before_[i].execute(stream_, base);
      data_.execute(stream_, base);
      for (size_t i = 0; i < dataAfter_; ++i)
        after_[i].execute(stream_, base);
      if (viaF32_)
        parallelFromFloat(pool_, at<float>(base, offDx_), dx_);
    }
    if (dw_.data) {
      for (size_t i = dataBefore_; i < before_.size(); ++i)
        before_[i].execute(stream_, base);
      weights_.execute(stream_, base);
      for (size_t i = dataAfter_; i < after_.size(); ++i)
        after_[i].execute(stream_, base);
      if (viaF32_)
        parallelFromFloat(pool_, at<float>(base, offDw_), dw_);
    }
    if (dbByHand_)
      biasGrad(base);
  }

private:
  /// dB[m] = sum of dY over the batch and the output positions.
  void biasGrad(uint8_t *base) {
    pool_.parallelFor(M_, 1, [&](int64_t m0, int64_t m1, int range) {
      float *row = at<float>(base, offRow_) + range * std::max<int64_t>(outPix_, 1);
      for (int64_t m = m0; m < m1; ++m) {
        float s = 0;
        for (int64_t n = 0; n < N_; ++n)
          s += sumFloats(dyRow(n, m, row), outPix_);
        storeFloat(db_, m, s);
      }
    });
  }

  /// dY's values of image n and channel m as fp32 (gathered from channel
  /// blocks of 16 when dY is kept so: the same values, summed in the same
  /// order).
  const float *dyRow(int64_t n, int64_t m, float *row) const {
    if (!dy_.channelBlocked)
      return rowIn(dy_, (n * M_ + m) * outPix_, outPix_, row);
    int64_t first = ((n * M_ + m / 16 * 16) * outPix_) + m % 16;
    for (int64_t p = 0; p < outPix_; ++p)
      row[p] = loadFloat(dy_, first + p * 16);
    return row;
  }

  TensorArg dy_, x_, w_, dx_, dw_, db_;
  DnnlCall data_, weights_;
  int64_t M_ = 0, N_ = 0, outPix_ = 0;
  bool viaF32_ = false, zeroDx_ = false, dbByHand_ = false;
  /// before_/after_ hold the data pass's reorders first, then the weights pass's.
  size_t dataBefore_ = 0, dataAfter_ = 0;
  size_t offDy_ = 0, offX_ = 0, offW_ = 0, offDx_ = 0, offDw_ = 0, offPadData_ = 0,
         offPadWeights_ = 0, offRow_ = 0;
};

std::unique_ptr<Kernel> createConvGrad(const StepContext &ctx, std::string &error) {
  if (!ctx.has(0) || !ctx.has(1) || !ctx.has(2)) {
    error = "ConvGrad takes dY, X and W";
    return nullptr;
  }
  if (!requireFloat(ctx, {0, 1, 2}, {0, 1, 2}, error))
    return nullptr;
  const TensorArg &dy = ctx.inputs[0], &x = ctx.inputs[1], &w = ctx.inputs[2];
  auto out = [&](unsigned i) { return i < ctx.outputs.size() ? ctx.outputs[i] : TensorArg(); };
  TensorArg dx = out(0), dw = out(1), db = out(2);
  if (x.type != dy.type || w.type != dy.type || (dx.data && dx.type != dy.type) ||
      (dw.data && dw.type != dy.type)) {
    error = "dY, X, W, dX and dW must share their element type";
    return nullptr;
  }
  ConvShape s;
  if (!convShape(ctx, x, w, dy.shape, s, error))
    return nullptr;
  if ((dx.data && dx.shape != x.shape) || (dw.data && dw.shape != w.shape) ||
      (db.data && db.numel != s.M)) {
    error = "gradient shapes do not match the operands";
    return nullptr;
  }
  if (x.numel == 0 || dy.numel == 0 || w.numel == 0) {
    return std::make_unique<LambdaKernel>([=] {
      for (const TensorArg *t : {&dx, &dw, &db})
        if (t->data)
          std::memset(t->data, 0, t->numel * elemBytes(t->type));
    });
  }
  auto k = std::make_unique<ConvBackward>(ctx.pool, dy, x, w, dx, dw, db);
  if (!k->prepare(s, error))
    return nullptr;
  return k;
}

} // namespace

void registerConvKernels() {
  registerKernel("Conv", createConv);
  registerKernel("ampc.ConvGrad", createConvGrad);
}

} // namespace ampc::rt::cpu
