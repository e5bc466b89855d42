//===- Schemas.cpp - ONNX schemas of ampc's own operators ------------------===//
//
// Each `ampc` operator is declared here once, with its inputs, outputs,
// attributes and a shape inference function, so that onnx::checker and strict
// shape inference accept every model ampc writes. The operators themselves
// are defined by their reference-interpreter kernels (lib/Interpreter).
//
//===----------------------------------------------------------------------===//

#include "ampc/ONNX/Schemas.h"

#include "ampc/IR/Graph.h"

#include "AmpcOps.h"

#include "onnx/defs/schema.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringMap.h"

#include <mutex>

namespace ampc {

void registerAmpcSchemas() {
  static std::once_flag once;
  std::call_once(once, [] {
    onnx::OpSchemaRegistry::DomainToVersionRange::Instance().AddDomainToVersion(
        std::string(kAmpcDomainName), 1, 1);
    for (onnx::OpSchema &schema : ampcOpSchemas())
      onnx::RegisterSchema(std::move(schema));
  });
}

const onnx::OpSchema *lookupSchema(std::string_view op, int version, std::string_view domain) {
  registerAmpcSchemas();
  llvm::SmallString<64> key(llvm::StringRef(domain.data(), domain.size()));
  key.push_back('\0');
  key.append(llvm::StringRef(op.data(), op.size()));
  key.push_back('\0');
  key.append(std::to_string(version));
  // Per thread: the registry is read-only once registered, the cache is not.
  thread_local llvm::StringMap<const onnx::OpSchema *> cache;
  auto [it, fresh] = cache.try_emplace(key, nullptr);
  if (fresh)
    it->second = onnx::OpSchemaRegistry::Schema(std::string(op), version, std::string(domain));
  return it->second;
}

} // namespace ampc
