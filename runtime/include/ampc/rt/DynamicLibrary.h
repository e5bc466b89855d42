//===- DynamicLibrary.h - Libraries opened at run time ----------*- C++ -*-===//
//
// cuBLAS and NCCL are opened with dlopen when needed (runtime/cuda/
// CublasLoader.cpp, runtime/dist/NcclCollective.cpp), so amp-run links no
// CUDA library by name.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdlib>
#include <dlfcn.h>
#include <string>
#include <vector>

namespace ampc::rt {

/// Candidates for `soname`: the path in environment variable `envVar` if
/// set, the loader's own search, then the CUDA toolkit's folders.
inline std::vector<std::string> cudaLibraryCandidates(const char *envVar, const char *soname) {
  std::vector<std::string> names;
  if (const char *p = std::getenv(envVar); p && *p)
    names.push_back(p);
  names.push_back(soname);
  for (const char *dir :
       {"/usr/local/cuda/lib64/", "/usr/local/cuda/lib/", "/usr/local/cuda-13.0/lib64/"})
    names.push_back(std::string(dir) + soname);
  return names;
}

/// The first of `names` that opens; nullptr with `tried` listing them all.
inline void *openFirstLibrary(const std::vector<std::string> &names, std::string &tried) {
  tried.clear();
  for (const std::string &name : names) {
    if (void *lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))
      return lib;
    tried += (tried.empty() ? "" : ", ") + name;
  }
  return nullptr;
}

/// Binds `fn` to symbol `name` of `lib`; false with the reason.
template <typename F>
bool bindSymbol(void *lib, const char *what, const char *name, F &fn, std::string &error) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn)
    error = std::string(what) + " has no " + name;
  return fn != nullptr;
}

} // namespace ampc::rt
