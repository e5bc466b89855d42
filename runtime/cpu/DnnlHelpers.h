//===- DnnlHelpers.h - oneDNN pieces shared by GEMM and convolution -*- C++ -*-===//
//
// One CPU engine per process; primitives are created when a step's kernel is
// created (never in run()), with a user-managed scratchpad that lives in the
// backend's shared scratch. oneDNN runs on OpenMP, whose thread count each
// kernel sets to its backend's before executing, so several backends with
// different thread counts in one process (the tests) each get their own.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ChannelBlockReorder.h"
#include "KernelHelpers.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <unordered_map>

namespace ampc::rt::cpu {

inline dnnl::engine &dnnlEngine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

/// Whether bf16 GEMMs and convolutions run natively in oneDNN (bf16 operands)
/// or on fp32 copies of their operands. A bf16 value converts to fp32
/// exactly and both accumulate in fp32, so the choice moves only the order
/// of the sums; what it changes is speed, which depends on the CPU: AMX, and
/// AMD's AVX-512 BF16 (two bf16 products per fp32 lane), multiply bf16 at
/// twice the fp32 rate or more, while on an Intel CPU without AMX
/// vdpbf16ps runs at the fp32 FMA rate and oneDNN 2.6's bf16 kernels were
/// measured 1.5x slower than its fp32 ones (docs/benchmarks.md). Decided
/// from CPUID once per process, so a machine always runs the same way;
/// AMPC_CPU_BF16=native|fp32 overrides it.
bool nativeBf16Compute();

/// Whether a native bf16 GEMM reads its transposed 2-D A from a plain copy
/// made by a oneDNN reorder just before it, instead of through exchanged
/// strides. oneDNN 2.6's AMX matmul pays 0.1-0.2 ms for a transposed A at the
/// GPT's weight-gradient shapes (384x1024x1536: 0.86-0.94 ms against 0.69-0.70
/// plain), while the reorder of an A of at most 1 MiB, which stays in the
/// core's L2, takes 0.03-0.05 ms; larger copies cost as much as they save
/// (docs/benchmarks.md). fp32 GEMMs gain nothing. The sums are those of the
/// plain GEMM, decided by the shape alone: the same bits on every run.
/// AMPC_CPU_GEMM_COPY_A=off keeps the strided read (to measure it). `aBytes`
/// is A's size in storage.
bool copyTransposedA(plan::ElemType type, int64_t aBytes);

/// Whether a kernel of storage type `t` runs on fp32 copies of its operands
/// in scratch (fp16 always; bf16 unless nativeBf16Compute()).
inline bool computeViaF32(plan::ElemType t) {
  return t == plan::F16 || (t == plan::BF16 && !nativeBf16Compute());
}

/// Element type of oneDNN memory for a storage type (fp16, and bf16 where
/// nativeBf16Compute() says no, are computed in fp32).
inline dnnl::memory::data_type dnnlComputeType(plan::ElemType t) {
  return t == plan::BF16 && nativeBf16Compute() ? dnnl::memory::data_type::bf16
                                                : dnnl::memory::data_type::f32;
}

inline dnnl::memory::dims toDims(const std::vector<int64_t> &v) {
  return dnnl::memory::dims(v.begin(), v.end());
}

inline dnnl::memory::desc plainDesc(const std::vector<int64_t> &dims, dnnl::memory::data_type dt) {
  return dnnl::memory::desc(toDims(dims), dt, toDims(stridesOf(dims)));
}

/// The oneDNN memory of an activation as the backend stores it: plain, or
/// in channel blocks of 16 (TensorArg::channelBlocked, ChannelLayout.h).
inline dnnl::memory::desc activationDesc(const TensorArg &t, const std::vector<int64_t> &dims,
                                         dnnl::memory::data_type dt) {
  return t.channelBlocked ? ChannelBlockReorder::blockedDesc(toDims(dims), dt)
                          : plainDesc(dims, dt);
}

/// Attributes every primitive of ours uses: user scratchpad, and fp32 math
/// (no implicit down-conversion).
inline dnnl::primitive_attr dnnlAttr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

/// A prepared primitive with its arguments; memories whose buffer lives in
/// the shared scratch get their address at run time.
struct DnnlCall {
  dnnl::primitive prim;
  std::unordered_map<int, dnnl::memory> args;
  /// (argument, scratch offset) pairs re-pointed before every execution.
  std::vector<std::pair<int, size_t>> scratchArgs;
  /// A reorder between the plain and the channel-blocked layout runs as
  /// this instead of `prim` (from args' SRC to DST).
  std::optional<ChannelBlockReorder> channelReorder;

  void execute(dnnl::stream &s, uint8_t *scratch) {
    for (auto &[arg, off] : scratchArgs)
      args[arg].set_data_handle(scratch + off);
    if (channelReorder)
      return channelReorder->run(args[DNNL_ARG_SRC].get_data_handle(),
                                 args[DNNL_ARG_DST].get_data_handle());
    prim.execute(s, args);
  }
};

} // namespace ampc::rt::cpu
