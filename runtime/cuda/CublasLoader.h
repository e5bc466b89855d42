//===- CublasLoader.h - cuBLAS, opened at run time --------------*- C++ -*-===//
//
// See CublasLoader.cpp: amp-run does not link cuBLAS; it opens it when the
// CUDA backend is created.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace ampc::rt::cuda {

/// Opens libcublas.so.13 (once) and binds the entry points the backend uses;
/// false with the reason (what was tried) when it cannot.
bool loadCublas(std::string &why);

} // namespace ampc::rt::cuda
