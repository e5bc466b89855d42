//===- NcclTest.cpp - GPU ranks' gradient averaging over NCCL -------------===//
//
// NCCL is opened at run time (runtime/dist/NcclCollective.cpp). Here, where
// the CUDA toolkit ships libnccl.so.2 but there is no GPU, the loader must
// find it; on a GPU (the GPU kit runs these) a one-rank communicator,
// bootstrapped by the single-process collective, averages a device buffer.
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>

#ifdef AMPC_HAVE_NCCL
#include "ampc/rt/Backend.h"
#include "ampc/rt/Collective.h"
#include "dist/NcclCollective.h"

#include <cuda_runtime.h>

#include <sys/stat.h>
#include <vector>

namespace {

TEST(NcclLoader, OpensTheToolkitsNcclOrSaysWhatItTried) {
  std::string why;
  bool loaded = ampc::rt::loadNccl(why);
  struct stat st;
  if (::stat("/usr/local/cuda/lib64/libnccl.so.2", &st) == 0) {
    EXPECT_TRUE(loaded) << why;
  } else if (!loaded) {
    EXPECT_EQ(why.rfind("NCCL not found (tried ", 0), 0u) << why;
  }
}

TEST(NcclDevice, OneRankAveragesADeviceBuffer) {
  std::string why;
  if (!ampc::rt::cudaAvailable(why))
    GTEST_SKIP() << "no CUDA device available (" << why << ")";
  std::string error;
  auto single = ampc::rt::createCollective(10, error);
  ASSERT_TRUE(single) << error;
  auto nccl = ampc::rt::createNcclCollective(*single, 0, error);
  ASSERT_TRUE(nccl) << error;
  EXPECT_EQ(nccl->kind(), "nccl");
  EXPECT_EQ(nccl->size(), 1);
  std::vector<float> host(1 << 20), back(host.size());
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = 0.001f * static_cast<float>(i % 977) - 0.3f;
  float *dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(nccl->allReduceMean(dev, host.size(), error)) << error;
  ASSERT_EQ(cudaMemcpy(back.data(), dev, host.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(dev);
  EXPECT_EQ(back, host) << "the average over one rank is the value, bit for bit";
}

} // namespace
#endif
