//===- OptimizerMath.h - Per-element optimizer updates, CPU and CUDA -*- C++ -*-===//
//
// The update of ampc.AdamW (passes/Optimizer.cpp), one definition for the
// reference interpreter, the CPU kernel and the CUDA kernel: torch.optim.AdamW
// on fp32 master parameters, every operation in fp32 in the order of the
// unfused graph it replaces, so the fused update rounds exactly as the
// elementwise chain did:
//   p' = p * (1 - lr wd)  -  (m' / (sqrt(v') / sqrt(1 - b2^t) + eps)) * (lr / (1 - b1^t))
//   m' = b1 m + (1 - b1) g,   v' = b2 v + (1 - b2) g^2.
// The constants (1 - b1) and (1 - b2) are computed in double and rounded once,
// as torch does with Python floats (see adamwConstants).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/rt/ElementMath.h"

namespace ampc::rt::math {

/// The fp32 constants of one AdamW configuration.
struct AdamWConstants {
  float beta1 = 0.9f, oneMinusBeta1 = 0.1f, beta2 = 0.999f, oneMinusBeta2 = 0.001f;
  float eps = 1e-8f, weightDecay = 0.0f;
  bool decays = false; ///< weight decay != 0 (otherwise p is not multiplied)
};

/// From the node's attributes. ONNX float attributes are float32, so
/// (1 - b1) and (1 - b2) are attributes of their own, computed by the
/// optimizer pass from the double betas (float(1 - 0.9) is 0.1f, while
/// 1 - float(0.9) rounds to 0.10000002f); without them they are derived.
AMPC_HD AdamWConstants adamwConstants(double beta1, double oneMinusBeta1, double beta2,
                                      double oneMinusBeta2, double eps, double weightDecay) {
  AdamWConstants c;
  c.beta1 = static_cast<float>(beta1);
  c.oneMinusBeta1 = static_cast<float>(oneMinusBeta1);
  c.beta2 = static_cast<float>(beta2);
  c.oneMinusBeta2 = static_cast<float>(oneMinusBeta2);
  c.eps = static_cast<float>(eps);
  c.weightDecay = static_cast<float>(weightDecay);
  c.decays = weightDecay != 0.0;
  return c;
}

/// The scalars of step t (counted from 1), shared by every element.
struct AdamWStepScalars {
  float decay = 1.0f;    ///< 1 - lr * weight_decay
  float stepSize = 0.0f; ///< lr / (1 - b1^t)
  float sqrtBc2 = 1.0f;  ///< sqrt(1 - b2^t)
};

AMPC_HD AdamWStepScalars adamwStepScalars(const AdamWConstants &c, float lr, float t) {
  AdamWStepScalars s;
#ifdef __CUDA_ARCH__
  float bc1 = 1.0f - powf(c.beta1, t), bc2 = 1.0f - powf(c.beta2, t);
  s.sqrtBc2 = sqrtf(bc2);
#else
  float bc1 = 1.0f - std::pow(c.beta1, t), bc2 = 1.0f - std::pow(c.beta2, t);
  s.sqrtBc2 = std::sqrt(bc2);
#endif
  s.decay = 1.0f - lr * c.weightDecay;
  s.stepSize = lr / bc1;
  return s;
}

/// One element: reads p, m, v and the gradient g (already in fp32), writes
/// the updated three.
AMPC_HD void adamwUpdate(const AdamWConstants &c, const AdamWStepScalars &s, float g, float &p,
                         float &m, float &v) {
  float newM = m * c.beta1 + g * c.oneMinusBeta1;
  float newV = v * c.beta2 + (g * g) * c.oneMinusBeta2;
#ifdef __CUDA_ARCH__
  float root = sqrtf(newV);
#else
  float root = std::sqrt(newV);
#endif
  float denom = root / s.sqrtBc2 + c.eps;
  float decayed = c.decays ? p * s.decay : p;
  p = decayed - (newM / denom) * s.stepSize;
  m = newM;
  v = newV;
}

} // namespace ampc::rt::math
