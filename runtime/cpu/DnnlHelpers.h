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

#include "KernelHelpers.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <unordered_map>

namespace ampc::rt::cpu {

inline dnnl::engine &dnnlEngine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

/// Element type of oneDNN memory for a storage type (fp16 is computed in fp32).
inline dnnl::memory::data_type dnnlComputeType(plan::ElemType t) {
  return t == plan::BF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

inline dnnl::memory::dims toDims(const std::vector<int64_t> &v) {
  return dnnl::memory::dims(v.begin(), v.end());
}

inline dnnl::memory::desc plainDesc(const std::vector<int64_t> &dims, dnnl::memory::data_type dt) {
  return dnnl::memory::desc(toDims(dims), dt, toDims(stridesOf(dims)));
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

  void execute(dnnl::stream &s, uint8_t *scratch) {
    for (auto &[arg, off] : scratchArgs)
      args[arg].set_data_handle(scratch + off);
    prim.execute(s, args);
  }
};

} // namespace ampc::rt::cpu
