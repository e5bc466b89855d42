//===- softmax/SoftmaxLowering.cpp - Softmax and its gradients ------------===//
//
// Lowers Softmax, LogSoftmax, Hardmax and their gradients to
// softmax/SoftmaxKernels.h.
//
//===----------------------------------------------------------------------===//

#include "../StepLowering.h"

namespace ampc::rt::cuda {

//===----------------------------------------------------------------------===//
// Softmax, normalization, losses
//===----------------------------------------------------------------------===//

bool StepLowering::lowerSoftmax(SoftOp op, std::string &error) {
  bool grad = op == SoftOp::SoftmaxGrad || op == SoftOp::LogSoftmaxGrad;
  Operand x = input(0), yv = grad ? input(1) : Operand(), y = output(0);
  if (!x.present() || (grad && !yv.present()) || !y.present()) {
    error = "missing operands";
    return false;
  }
  if (!requireFloat({0, 1}, {0}, error))
    return false;
  if (y.shape != x.shape || (grad && yv.shape != x.shape)) {
    error = "operands and result must share their shape";
    return false;
  }
  int64_t axis = normalizeAxis(attrInt("axis", -1), x.rank());
  if (axis < 0) {
    error = "axis out of range for " + argString(x);
    return false;
  }
  SoftmaxArgs s;
  s.x = x.p;
  s.xType = x.type;
  s.y = yv.p;
  s.yType = yv.type;
  s.out = y.p;
  s.outType = y.type;
  s.op = op;
  s.len = x.shape[axis];
  s.inner = product(x.shape, axis + 1);
  int64_t outer = s.len * s.inner != 0 ? x.numel / (s.len * s.inner) : 0;
  // Contiguous rows: a warp or a block per row (the launch counts rows).
  if (s.inner == 1 && op != SoftOp::Hardmax)
    s.lanes = rowLanes(s.len);
  kernel(KernelKind::Softmax, s, outer * s.inner);
  return true;
}

} // namespace ampc::rt::cuda
