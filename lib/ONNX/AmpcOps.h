//===- AmpcOps.h - Declarations of ampc's operator schemas ------*- C++ -*-===//
#pragma once

#include "onnx/defs/schema.h"

#include <vector>

namespace ampc {

inline constexpr const char *kAmpcDomainName = "ampc";

/// The schemas of every operator of the `ampc` domain (version 1).
std::vector<onnx::OpSchema> ampcOpSchemas();

} // namespace ampc
