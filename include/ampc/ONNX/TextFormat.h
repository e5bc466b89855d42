//===- TextFormat.h - ONNX textual syntax reader ----------------*- C++ -*-===//
//
// Reads ONNX's textual syntax into a ModelProto. It accepts the grammar of
// ONNX's own parser (docs/Syntax.md of onnx) as of its current release, which is
// newer than the libonnx 1.12 that Debian ships:
//   - value and node names may be double-quoted ("fc1.weight", "/fc1/Gemm"),
//     as torch exports use names that are not plain identifiers;
//   - a node may be preceded by its name in brackets: [name] y = Op (x);
//   - tensor literals of every element type ampc supports, fp16 and bf16
//     included (written as decimal values);
//   - '#' or '//' starts a comment that runs to the end of the line.
// Printing is done from the IR (ampc/IR/Printer.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "llvm/Support/Error.h"

#include <string_view>

namespace onnx {
class ModelProto;
}

namespace ampc {

/// Parses `text` into `model`. Errors name the line and column.
llvm::Error parseOnnxText(std::string_view text, onnx::ModelProto &model);

} // namespace ampc
