//===- FusedKernelBaseline.cpp - The fused kernel for any x86-64 -----------===//

#include "FusedKernel.h"

#include "ampc/rt/PlanFile.h"

#include <limits>

#define AMPC_FUSED_FACTORY makeFusedKernelBaseline
#include "FusedKernelImpl.inc"
