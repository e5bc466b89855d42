//===- Error.h - Error helpers on top of llvm::Error ------------*- C++ -*-===//
//
// The compiler reports failures as llvm::Error / llvm::Expected values whose
// message is one line naming the file, node or tensor at fault. Tools print
// that line and exit with status 1.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"

#include <string>

namespace ampc {

/// An error carrying a one-line message.
inline llvm::Error makeError(const llvm::Twine &msg) {
  return llvm::make_error<llvm::StringError>(msg, llvm::inconvertibleErrorCode());
}

/// An error formatted with llvm::formatv syntax ("node '{0}': ...").
template <typename... Ts> llvm::Error formatError(const char *fmt, Ts &&...args) {
  return makeError(llvm::formatv(fmt, std::forward<Ts>(args)...).str());
}

/// Prefixes an error's message with `context: `.
inline llvm::Error withContext(llvm::Error err, const llvm::Twine &context) {
  if (!err)
    return err;
  return makeError(context + ": " + llvm::toString(std::move(err)));
}

} // namespace ampc
