//===- FusedProgramsUtil.cpp - The fixtures' fused programs, for tests ----===//
//
// The training pipeline is CudaBackendTest.cpp's (autocast, autodiff, loss
// scaling, the optimizer, cached casts, recomputation) without accumulation.
//
//===----------------------------------------------------------------------===//

#include "FusedProgramsUtil.h"
#include "FixtureUtil.h"

#include "ampc/IR/Graph.h"

#include "cuda/elementwise/FusedCodegen.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

namespace ampc::test {

namespace fs = std::filesystem;
namespace rcuda = ampc::rt::cuda;

std::vector<rcuda::Launch> lowerAll(const plan::Plan &p) {
  static uint8_t fake[64];
  rcuda::DeviceMemory mem{[](int) { return static_cast<void *>(fake); }, fake};
  std::vector<rcuda::Launch> all, one;
  for (int i = 0; i < p.programs_size(); ++i) {
    size_t ws = 0;
    std::string error;
    EXPECT_TRUE(rcuda::lowerProgram(p, i, mem, one, ws, error)) << error;
    all.insert(all.end(), one.begin(), one.end());
  }
  return all;
}

const std::vector<FusedProgram> &fixtureFusedPrograms() {
  static const std::vector<FusedProgram> programs = [] {
    std::vector<FusedProgram> out;
    std::map<std::string, size_t> seen;
    for (const char *f : {"mlp", "cnn", "transformer"})
      for (const char *prec : {"fp32", "fp16", "bf16"})
        for (const char *opt : {"sgd", "adamw"}) {
          plan::Plan p;
          if (!compileTrainingPlan(f, prec, opt, p))
            continue;
          for (const rcuda::Launch &l : lowerAll(p)) {
            if (l.kind != rcuda::Launch::Kernel || l.kernel != rcuda::KernelKind::Fused)
              continue;
            const auto &a = l.as<rcuda::FusedArgs>();
            std::string src = rcuda::fusedKernelSource(a);
            if (seen.emplace(src, out.size()).second)
              out.push_back({src, a, std::string(f) + " " + prec + " " + opt});
          }
        }
    return out;
  }();
  return programs;
}

TempDir::TempDir() {
  std::string tmpl = (fs::temp_directory_path() / "ampc-fused-XXXXXX").string();
  path = mkdtemp(tmpl.data()) ? fs::path(tmpl) : fs::path();
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path.empty())
    fs::remove_all(path, ec);
}

} // namespace ampc::test
