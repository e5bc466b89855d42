//===- elementwise/FusedCompiler.h - Generated fused kernels, compiled -*- C++ -*-===//
//
// NVRTC, opened with dlopen like cuBLAS (libnvrtc.so.13: AMPC_NVRTC_PATH,
// the loader's search, /usr/local/cuda/lib64), compiles a generated fused
// kernel (FusedCodegen.h) into a cubin for one architecture, with
// FusedKernel.h, FusedEval.h and what they include embedded as strings (no
// header path at run time). Compiled cubins are cached on disk, keyed by the
// source's hash, the architecture and NVRTC's version. Plain C++: it needs
// neither a GPU nor the CUDA headers, so the unit tests compile every
// fixture's programs on machines without a GPU.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "FusedCodegen.h"

#include <functional>
#include <string>
#include <vector>

namespace ampc::rt::cuda {

/// Opens NVRTC once; false with the reason (which libraries were tried).
bool loadNvrtc(std::string &why);

/// NVRTC's version ("13.0"), or "" when it did not load.
std::string nvrtcVersion();

/// Compiles `source` for sm_<arch> (90 for sm_90) into a cubin; false with
/// NVRTC's log.
bool compileFusedSource(const std::string &source, int arch, std::string &cubin,
                        std::string &error);

/// The cache folder: AMPC_FUSED_CACHE_DIR, else $XDG_CACHE_HOME/ampc/fused,
/// else $HOME/.cache/ampc/fused ("" when none of them is set).
std::string fusedCacheDir();

/// The cache file name of (source, arch) under NVRTC `version`.
std::string fusedCacheKey(const std::string &source, int arch, const std::string &version);

/// Where a cubin came from.
enum class FusedBinarySource { Compiled, Cache };

/// The cubin of `source` for sm_<arch>: from `cacheDir` when a cache file of
/// its key holds this very source and an intact cubin, else compiled and
/// written there (a temporary file renamed into place, so concurrent runs
/// never see half a file). A cache that cannot be read or written only
/// costs a compilation. `cacheDir` "" disables the cache.
bool fusedKernelBinary(const std::string &source, int arch, const std::string &cacheDir,
                       std::string &cubin, FusedBinarySource &from, std::string &error);

/// Loads a cubin on the device: its kernel's handle, or false with why.
using FusedKernelLoader =
    std::function<bool(const std::string &cubin, void *&handle, std::string &why)>;

/// What the CUDA backend does at plan load: every distinct fused program of
/// `launches` gets its cubin for sm_<arch> (fusedKernelBinary) and is loaded
/// with `load`, and its launches become CompiledFused launches. A program
/// that does not compile or load stays interpreted, and `note` (if empty)
/// gets the first line of why. Returns how many launches run compiled.
int compileFusedLaunches(std::vector<Launch> &launches, FusedKernelTable &table, int arch,
                         const std::string &cacheDir, const FusedKernelLoader &load,
                         std::string &note);

} // namespace ampc::rt::cuda
