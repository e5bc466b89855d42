//===- CpuUnavailable.cpp - The CPU backend of a runtime-only build --------===//
//
// Compiled instead of runtime/cpu/ in a runtime-only build (AMPC_RUNTIME_ONLY:
// no oneDNN there, so no CPU backend); amp-run --backend=cpu then says why.
//
//===----------------------------------------------------------------------===//

#include "ampc/rt/Backend.h"

namespace ampc::rt {

std::unique_ptr<Backend> createCpuBackend(const CpuOptions &) { return nullptr; }

} // namespace ampc::rt
