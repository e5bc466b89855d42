//===- ChannelLayout.h - Activations kept in channel blocks of 16 -*- C++ -*-===//
//
// The CPU backend's layout assignment. oneDNN's convolutions run in channel
// blocks of 16 (aBcd16b: [N, C/16, spatial, 16]); an activation stored in
// plain NCHW is reordered into that layout before every convolution that
// reads it and back after every one that writes it. Between two convolutions
// of a CNN the values go only through steps that can work on the blocked
// layout as well: batch normalization and its gradient (per channel), and
// the fused elementwise steps, for which the place of an element does not
// matter as long as every operand is laid out alike. So the backend keeps
// such activations blocked: the convolutions' reorders go, and a step that
// needs the plain layout gets a converted copy (ChannelLayoutKernel).
//
// Decided when the plan is loaded, from the plan alone, like the oneDNN
// layouts inside the kernels: the plan format does not change, the values
// are the same bits (a reorder only moves them, and the blocked kernels add
// in the plain ones' order), and AMPC_CPU_LAYOUT=plain turns it off (the
// tests compare the two).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ChannelBlockReorder.h"
#include "Kernel.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace ampc::rt::cpu {

/// How a step reads or writes one of its tensor operands.
enum class OperandLayout : uint8_t {
  Plain,  ///< only in the plain row-major layout
  Free,   ///< in either layout, chosen for this operand alone (Conv, ConvGrad)
  Shared, ///< in either layout, the same for all the step's Shared operands
};

/// The layout rule of operand `index` (an input, or an output when `output`)
/// of `step`.
OperandLayout operandLayout(const plan::Plan &plan, const plan::Step &step, bool output,
                            int index);

/// Per tensor id, 1 where the backend keeps the tensor in channel blocks of
/// 16: arena activations of rank 3 to 5 in fp32, fp16 or bf16 with a multiple of
/// 16 channels, no view and no program input or output, in groups that
/// Shared operands tie together, where the group's convolution operands
/// outnumber the plain-only uses that need a converted copy. All zero when
/// AMPC_CPU_LAYOUT=plain.
std::vector<uint8_t> chooseChannelBlocked(const plan::Plan &plan);

/// The move of tensor `t` into channel blocks of 16 (toBlocked) or out of
/// them.
ChannelBlockReorder channelLayoutMove(const TensorArg &t, bool toBlocked);

/// Runs `inner` on plain copies of some channel-blocked operands: converts
/// each such input into its copy before the step, and each such output from
/// its copy after it (after finish() for an asynchronous step).
class ChannelLayoutKernel : public Kernel {
public:
  struct Copy {
    ChannelBlockReorder move;
    const void *src;
    void *dst;
  };
  ChannelLayoutKernel(std::unique_ptr<Kernel> inner, std::vector<Copy> before,
                      std::vector<Copy> after)
      : inner_(std::move(inner)), before_(std::move(before)), after_(std::move(after)) {}

  void run() override;
  bool asynchronous() const override { return inner_->asynchronous(); }
  void finish() override;

private:
  std::unique_ptr<Kernel> inner_;
  std::vector<Copy> before_, after_;
};

} // namespace ampc::rt::cpu
