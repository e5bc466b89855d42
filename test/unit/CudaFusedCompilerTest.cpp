//===- CudaFusedCompilerTest.cpp - NVRTC, the cubin cache, the fallback --===//
//
// runtime/cuda/elementwise/FusedCompiler.cpp without a GPU (NVRTC needs
// none): every distinct fused program of the fixtures' training plans
// compiles for sm_90 (skipped only where NVRTC cannot be opened); the disk
// cache misses, hits, and recompiles damaged or foreign files; programs that
// do not compile or load stay interpreted with one note.
//
//===----------------------------------------------------------------------===//

#include "FusedProgramsUtil.h"

#include "cuda/elementwise/FusedCodegen.h"
#include "cuda/elementwise/FusedCompiler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>

using namespace ampc;
using namespace ampc::test;
namespace rcuda = ampc::rt::cuda;
namespace fs = std::filesystem;

TEST(CudaFusedCompiler, NvrtcCompilesEveryFixtureProgram) {
  std::string why;
  if (!rcuda::loadNvrtc(why))
    GTEST_SKIP() << why;
  EXPECT_FALSE(rcuda::nvrtcVersion().empty());
  for (const FusedProgram &p : fixtureFusedPrograms()) {
    std::string cubin, error;
    ASSERT_TRUE(rcuda::compileFusedSource(p.source, 90, cubin, error))
        << p.where << "\n" << error << "\n" << p.source;
    EXPECT_EQ(cubin.compare(0, 4, "\x7f" "ELF"), 0) << "not a cubin";
  }
  // A compile error comes back as NVRTC's log, not as a crash.
  std::string cubin, error;
  EXPECT_FALSE(rcuda::compileFusedSource("this is not CUDA", 90, cubin, error));
  EXPECT_NE(error.find("nvrtcCompileProgram"), std::string::npos) << error;
}

TEST(CudaFusedCompiler, DiskCacheHitMissAndDamagedFiles) {
  std::string why;
  if (!rcuda::loadNvrtc(why))
    GTEST_SKIP() << why;
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string &source = fixtureFusedPrograms().front().source;
  const std::string &other = fixtureFusedPrograms().back().source;
  fs::path file = dir.path / "fused" / rcuda::fusedCacheKey(source, 90, rcuda::nvrtcVersion());
  std::string cacheDir = (dir.path / "fused").string();
  std::string first, again, error;
  rcuda::FusedBinarySource from;
  ASSERT_TRUE(rcuda::fusedKernelBinary(source, 90, cacheDir, first, from, error)) << error;
  EXPECT_EQ(from, rcuda::FusedBinarySource::Compiled);
  ASSERT_TRUE(fs::is_regular_file(file));
  ASSERT_TRUE(rcuda::fusedKernelBinary(source, 90, cacheDir, again, from, error)) << error;
  EXPECT_EQ(from, rcuda::FusedBinarySource::Cache);
  EXPECT_EQ(again, first);
  // Another architecture is another file.
  ASSERT_TRUE(rcuda::fusedKernelBinary(source, 80, cacheDir, again, from, error)) << error;
  EXPECT_EQ(from, rcuda::FusedBinarySource::Compiled);

  auto damageAndReload = [&](const std::function<void(std::string &)> &damage, const char *what) {
    std::string bytes;
    {
      std::ifstream in(file, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    damage(bytes);
    {
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      out << bytes;
    }
    std::string bin;
    ASSERT_TRUE(rcuda::fusedKernelBinary(source, 90, cacheDir, bin, from, error)) << what;
    EXPECT_EQ(from, rcuda::FusedBinarySource::Compiled) << what;
    EXPECT_EQ(bin, first) << what;
    // Repaired: the next load hits.
    ASSERT_TRUE(rcuda::fusedKernelBinary(source, 90, cacheDir, bin, from, error)) << what;
    EXPECT_EQ(from, rcuda::FusedBinarySource::Cache) << what;
  };
  damageAndReload([](std::string &b) { b.resize(b.size() / 2); }, "truncated");
  damageAndReload([](std::string &b) { b[b.size() - 40] ^= 0x55; }, "a flipped cubin byte");
  damageAndReload([](std::string &b) { b = "garbage"; }, "garbage");
  damageAndReload([](std::string &b) { b.clear(); }, "empty");
  damageAndReload(
      [&](std::string &b) {
        // A whole valid record, but of another program (a hash collision).
        std::string bin, e;
        rcuda::FusedBinarySource f;
        TempDir d2;
        ASSERT_TRUE(rcuda::fusedKernelBinary(other, 90, d2.path.string(), bin, f, e)) << e;
        std::ifstream in(d2.path / rcuda::fusedCacheKey(other, 90, rcuda::nvrtcVersion()),
                         std::ios::binary);
        b.assign(std::istreambuf_iterator<char>(in), {});
      },
      "another program's record");
  // No temporary files are left behind.
  for (const auto &entry : fs::directory_iterator(dir.path / "fused"))
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  // A cache folder that cannot be created only costs the compilation.
  fs::path blocker = dir.path / "file";
  std::ofstream(blocker) << "x";
  std::string bin;
  ASSERT_TRUE(rcuda::fusedKernelBinary(source, 90, (blocker / "sub").string(), bin, from, error));
  EXPECT_EQ(from, rcuda::FusedBinarySource::Compiled);
  EXPECT_EQ(bin, first);
}

TEST(CudaFusedCompiler, ProgramsThatFailStayInterpretedWithOneNote) {
  plan::Plan p;
  ASSERT_TRUE(compileTrainingPlan("mlp", "fp16", "adamw", p));
  const std::vector<rcuda::Launch> interpreted = lowerAll(p);
  auto countCompiled = [](const std::vector<rcuda::Launch> &ls) {
    return std::count_if(ls.begin(), ls.end(), [](const rcuda::Launch &l) {
      return l.kind == rcuda::Launch::CompiledFused;
    });
  };
  int loads = 0;
  rcuda::FusedKernelLoader load = [&](const std::string &cubin, void *&handle, std::string &) {
    ++loads;
    handle = const_cast<char *>(cubin.data());
    return true;
  };
  // No such architecture (or no NVRTC at all): nothing is compiled or
  // loaded, one reason.
  {
    std::vector<rcuda::Launch> ls = interpreted;
    rcuda::FusedKernelTable table;
    std::string note;
    EXPECT_EQ(rcuda::compileFusedLaunches(ls, table, 1, "", load, note), 0);
    EXPECT_EQ(countCompiled(ls), 0);
    EXPECT_EQ(loads, 0);
    EXPECT_FALSE(note.empty());
    EXPECT_EQ(note.find('\n'), std::string::npos) << note;
  }
  std::string why;
  if (!rcuda::loadNvrtc(why))
    GTEST_SKIP() << why;
  // Compiled, but the device refuses the cubin: interpreted, the reason kept.
  {
    std::vector<rcuda::Launch> ls = interpreted;
    rcuda::FusedKernelTable table;
    std::string note;
    rcuda::FusedKernelLoader refuse = [](const std::string &, void *&, std::string &w) {
      w = "cudaLibraryLoadData: device kernel image is invalid";
      return false;
    };
    EXPECT_EQ(rcuda::compileFusedLaunches(ls, table, 90, "", refuse, note), 0);
    EXPECT_EQ(note, "cudaLibraryLoadData: device kernel image is invalid");
  }
  // Compiled and loaded: every fused launch runs its program's kernel.
  std::vector<rcuda::Launch> ls = interpreted;
  rcuda::FusedKernelTable table;
  std::string note;
  int used = rcuda::compileFusedLaunches(ls, table, 90, "", load, note);
  EXPECT_TRUE(note.empty()) << note;
  EXPECT_GT(used, 0);
  EXPECT_EQ(countCompiled(ls), used);
  EXPECT_EQ(loads, static_cast<int>(table.kernels().size()));
  for (const rcuda::CompiledFusedKernel &k : table.kernels()) {
    EXPECT_TRUE(k.ok);
    EXPECT_EQ(k.handle, k.binary.data());
  }
}
