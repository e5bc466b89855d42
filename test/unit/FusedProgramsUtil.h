//===- FusedProgramsUtil.h - The fixtures' fused programs, for tests -*- C++ -*-===//
//
// What the compiled-fused-kernel tests (CudaFusedCodegenTest.cpp,
// CudaFusedCompilerTest.cpp) share: the fixtures' training plans, their
// launch lists, every distinct fused program in them, a scratch folder.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "FixturePlans.h"
#include "cuda/Lowering.h"

#include "plan.pb.h"

#include <filesystem>
#include <string>
#include <vector>

namespace ampc::test {

/// The launches of every program of `p`, against placeholder addresses
/// (64-byte aligned).
std::vector<rt::cuda::Launch> lowerAll(const plan::Plan &p);

struct FusedProgram {
  std::string source;
  rt::cuda::FusedArgs args; ///< a launch of it (placeholder addresses)
  std::string where;        ///< "mlp fp16 adamw"
};

/// Every distinct fused program of the mlp, cnn and transformer training
/// plans in fp32, fp16 and bf16 with SGD and AdamW (computed once).
const std::vector<FusedProgram> &fixtureFusedPrograms();

/// A scratch folder, removed with the object.
struct TempDir {
  std::filesystem::path path;
  TempDir();
  ~TempDir();
};

} // namespace ampc::test
