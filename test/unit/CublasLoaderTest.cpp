//===- CublasLoaderTest.cpp - cuBLAS opened at run time ---------------------===//
//
// amp-run links no CUDA library (runtime/cuda/CublasLoader.cpp). Where the
// toolkit is installed (this machine: /usr/local/cuda, no GPU) the loader
// must find cuBLAS and bind every entry point; where it is not, it must say
// what it tried.
//
//===----------------------------------------------------------------------===//

#include <gtest/gtest.h>

#include <string>
#include <sys/stat.h>

#ifdef AMPC_HAVE_CUDA
#include "cuda/CublasLoader.h"

namespace {

bool exists(const char *path) {
  struct stat st;
  return ::stat(path, &st) == 0;
}

TEST(CublasLoader, OpensTheToolkitsCublasOrSaysWhatItTried) {
  std::string why;
  bool loaded = ampc::rt::cuda::loadCublas(why);
  bool installed = exists("/usr/local/cuda/lib64/libcublas.so.13") ||
                   exists("/usr/local/cuda/lib/libcublas.so.13");
  if (installed) {
    EXPECT_TRUE(loaded) << why;
    EXPECT_TRUE(why.empty());
  } else {
    EXPECT_FALSE(loaded);
    EXPECT_EQ(why.rfind("cuBLAS not found (tried ", 0), 0u) << why;
  }
  // Loading is done once: asking again gives the same answer.
  std::string again;
  EXPECT_EQ(ampc::rt::cuda::loadCublas(again), loaded);
  EXPECT_EQ(again, why);
}

} // namespace
#endif
