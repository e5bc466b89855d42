//===- elementwise/FusedCompiler.cpp - NVRTC and the cubin cache ----------===//
//
// NVRTC's C API is declared here (the few entry points used, as nvrtc.h
// documents them), so this file builds without the CUDA toolkit; the library
// is opened at run time like cuBLAS. NVRTC has no C++ standard library, so
// the three standard headers the embedded ones include are given to it as
// small stand-ins (the math functions' float and double overloads are
// NVRTC's own, the same libdevice code nvcc's kernels call).
//
//===----------------------------------------------------------------------===//

#include "FusedCompiler.h"

#include "ampc/rt/DynamicLibrary.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>
#include <vector>

namespace ampc::rt::cuda {

namespace {

// nvrtc.h: nvrtcResult is an enum whose success value is 0.
using NvrtcProgram = struct NvrtcProgramOpaque *;
using NvrtcResult = int;

struct NvrtcApi {
  NvrtcResult (*version)(int *, int *) = nullptr;
  NvrtcResult (*createProgram)(NvrtcProgram *, const char *, const char *, int,
                               const char *const *, const char *const *) = nullptr;
  NvrtcResult (*compileProgram)(NvrtcProgram, int, const char *const *) = nullptr;
  NvrtcResult (*getProgramLogSize)(NvrtcProgram, size_t *) = nullptr;
  NvrtcResult (*getProgramLog)(NvrtcProgram, char *) = nullptr;
  NvrtcResult (*getCubinSize)(NvrtcProgram, size_t *) = nullptr;
  NvrtcResult (*getCubin)(NvrtcProgram, char *) = nullptr;
  NvrtcResult (*destroyProgram)(NvrtcProgram *) = nullptr;
  const char *(*errorString)(NvrtcResult) = nullptr;
  std::string versionText;
  std::string error; // why it did not load; empty once loaded
};

NvrtcApi loadApi() {
  NvrtcApi api;
  std::string tried;
  void *lib = openFirstLibrary(cudaLibraryCandidates("AMPC_NVRTC_PATH", "libnvrtc.so.13"), tried);
  if (!lib) {
    api.error = "NVRTC not found (tried " + tried + "; set AMPC_NVRTC_PATH to libnvrtc.so.13)";
    return api;
  }
  const char *what = "libnvrtc";
  if (!bindSymbol(lib, what, "nvrtcVersion", api.version, api.error) ||
      !bindSymbol(lib, what, "nvrtcCreateProgram", api.createProgram, api.error) ||
      !bindSymbol(lib, what, "nvrtcCompileProgram", api.compileProgram, api.error) ||
      !bindSymbol(lib, what, "nvrtcGetProgramLogSize", api.getProgramLogSize, api.error) ||
      !bindSymbol(lib, what, "nvrtcGetProgramLog", api.getProgramLog, api.error) ||
      !bindSymbol(lib, what, "nvrtcGetCUBINSize", api.getCubinSize, api.error) ||
      !bindSymbol(lib, what, "nvrtcGetCUBIN", api.getCubin, api.error) ||
      !bindSymbol(lib, what, "nvrtcDestroyProgram", api.destroyProgram, api.error) ||
      !bindSymbol(lib, what, "nvrtcGetErrorString", api.errorString, api.error))
    return api;
  int major = 0, minor = 0;
  if (api.version(&major, &minor) != 0) {
    api.error = "nvrtcVersion failed";
    return api;
  }
  api.versionText = std::to_string(major) + "." + std::to_string(minor);
  api.error.clear();
  return api;
}

const NvrtcApi &api() {
  static const NvrtcApi loaded = loadApi();
  return loaded;
}

/// The embedded headers (EmbedHeaders.cmake) and the standard headers'
/// stand-ins: {include name, text}.
struct Header {
  const char *name, *text;
};
const Header kEmbedded[] = {
#include "FusedHeaders.inc"
    {"cstdint", R"(#pragma once
typedef signed char int8_t; typedef unsigned char uint8_t;
typedef short int16_t; typedef unsigned short uint16_t;
typedef int int32_t; typedef unsigned int uint32_t;
typedef long int64_t; typedef unsigned long uint64_t; typedef unsigned long uintptr_t;
namespace std { using ::int8_t; using ::uint8_t; using ::int16_t; using ::uint16_t;
using ::int32_t; using ::uint32_t; using ::int64_t; using ::uint64_t; using ::uintptr_t; }
)"},
    {"cmath", R"(#pragma once
namespace std { using ::fabs; using ::exp; using ::log; using ::sqrt; using ::tanh; using ::erf;
using ::floor; using ::ceil; using ::nearbyint; using ::sin; using ::cos; using ::pow;
using ::isinf; using ::isnan; using ::log1p; using ::expm1; }
)"},
    {"cstring", "#pragma once\n// Only host code of ElementMath.h uses <cstring>.\n"},
};

std::string readFile(const std::filesystem::path &path, bool &ok) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  ok = static_cast<bool>(in) || in.eof();
  return s.str();
}

/// A cache file: a header line, then the source and the cubin, each after
/// its length, then the cubin's hash; the source makes a hash collision
/// harmless and the lengths and hash catch truncated or damaged files.
const char kMagic[] = "ampc fused cubin 1\n";

std::string cacheRecord(const std::string &source, const std::string &cubin) {
  return kMagic + std::to_string(source.size()) + "\n" + source + std::to_string(cubin.size()) +
         "\n" + cubin + fusedHash(cubin) + "\n";
}

/// The cubin of a cache record holding `source`; false when it does not.
bool parseRecord(const std::string &record, const std::string &source, std::string &cubin) {
  size_t at = 0;
  auto field = [&](std::string &out) {
    size_t nl = record.find('\n', at);
    if (nl == std::string::npos || nl - at > 20)
      return false;
    out = record.substr(at, nl - at);
    at = nl + 1;
    return true;
  };
  auto blob = [&](std::string &out) {
    std::string len;
    if (!field(len) || len.empty() || len.find_first_not_of("0123456789") != std::string::npos)
      return false;
    size_t n = std::strtoull(len.c_str(), nullptr, 10);
    if (n > record.size() - at)
      return false;
    out = record.substr(at, n);
    at += n;
    return true;
  };
  std::string magic, text, bin, hash;
  if (record.compare(0, sizeof kMagic - 1, kMagic) != 0)
    return false;
  at = sizeof kMagic - 1;
  if (!blob(text) || text != source || !blob(bin) || !field(hash) || hash != fusedHash(bin) ||
      at != record.size() || bin.empty())
    return false;
  cubin = std::move(bin);
  return true;
}

} // namespace

bool loadNvrtc(std::string &why) {
  why = api().error;
  return why.empty();
}

std::string nvrtcVersion() { return api().versionText; }

bool compileFusedSource(const std::string &source, int arch, std::string &cubin,
                        std::string &error) {
  const NvrtcApi &a = api();
  if (!a.error.empty()) {
    error = a.error;
    return false;
  }
  std::vector<const char *> names, texts;
  for (const Header &h : kEmbedded) {
    names.push_back(h.name);
    texts.push_back(h.text);
  }
  NvrtcProgram prog = nullptr;
  NvrtcResult r = a.createProgram(&prog, source.c_str(), "ampc_fused.cu",
                                  static_cast<int>(names.size()), texts.data(), names.data());
  if (r != 0) {
    error = std::string("nvrtcCreateProgram: ") + a.errorString(r);
    return false;
  }
  // The options nvcc compiles the interpreted kernel with: FMA contraction
  // on (within an instruction, as there; fusedKeep stops it across them),
  // IEEE division and square root, no flush to zero. NVRTC refuses host
  // functions, so FusedEval.h's few unannotated helpers become device ones.
  std::string archOpt = "--gpu-architecture=sm_" + std::to_string(arch);
  const char *opts[] = {archOpt.c_str(), "-std=c++17",       "-default-device",
                        "--fmad=true",   "--prec-div=true", "--prec-sqrt=true",
                        "--ftz=false"};
  r = a.compileProgram(prog, static_cast<int>(sizeof opts / sizeof *opts), opts);
  bool ok = r == 0;
  if (!ok) {
    size_t logSize = 0;
    std::string log;
    if (a.getProgramLogSize(prog, &logSize) == 0 && logSize > 1) {
      log.resize(logSize);
      a.getProgramLog(prog, log.data());
      log.resize(logSize - 1);
    }
    error = std::string("nvrtcCompileProgram: ") + a.errorString(r) + (log.empty() ? "" : "\n") +
            log;
  } else {
    size_t size = 0;
    ok = a.getCubinSize(prog, &size) == 0 && size > 0;
    if (ok) {
      cubin.resize(size);
      ok = a.getCubin(prog, cubin.data()) == 0;
    }
    if (!ok)
      error = "nvrtcGetCUBIN failed for sm_" + std::to_string(arch);
  }
  a.destroyProgram(&prog);
  return ok;
}

std::string fusedCacheDir() {
  if (const char *d = std::getenv("AMPC_FUSED_CACHE_DIR"); d && *d)
    return d;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/ampc/fused";
  if (const char *h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/ampc/fused";
  return "";
}

std::string fusedCacheKey(const std::string &source, int arch, const std::string &version) {
  return fusedHash(source) + "-sm" + std::to_string(arch) + "-nvrtc" + version + ".cubin";
}

bool fusedKernelBinary(const std::string &source, int arch, const std::string &cacheDir,
                       std::string &cubin, FusedBinarySource &from, std::string &error) {
  namespace fs = std::filesystem;
  if (std::string why; !loadNvrtc(why)) {
    error = why;
    return false;
  }
  fs::path path;
  if (!cacheDir.empty()) {
    path = fs::path(cacheDir) / fusedCacheKey(source, arch, nvrtcVersion());
    bool read = false;
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
      std::string record = readFile(path, read);
      if (read && parseRecord(record, source, cubin)) {
        from = FusedBinarySource::Cache;
        return true;
      }
    }
  }
  if (!compileFusedSource(source, arch, cubin, error))
    return false;
  from = FusedBinarySource::Compiled;
  if (path.empty())
    return true;
  // Written beside its final name, then renamed over it: readers see the old
  // file or the whole new one. Failures leave only a missed cache.
  static std::atomic<unsigned> counter{0};
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    std::string record = cacheRecord(source, cubin);
    out.write(record.data(), static_cast<std::streamsize>(record.size()));
    if (!out.good()) {
      out.close();
      fs::remove(tmp, ec);
      return true;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec)
    fs::remove(tmp, ec);
  return true;
}

int compileFusedLaunches(std::vector<Launch> &launches, FusedKernelTable &table, int arch,
                         const std::string &cacheDir, const FusedKernelLoader &load,
                         std::string &note) {
  return table.use(launches, [&](CompiledFusedKernel &k) {
    std::string why;
    FusedBinarySource from;
    if (fusedKernelBinary(k.source, arch, cacheDir, k.binary, from, why) &&
        load(k.binary, k.handle, why))
      return true;
    if (note.empty())
      note = why.substr(0, why.find('\n'));
    return false;
  });
}

} // namespace ampc::rt::cuda
