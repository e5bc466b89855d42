//===- Dot.h - Graphviz rendering of a graph --------------------*- C++ -*-===//
#pragma once

#include "ampc/IR/Graph.h"

#include <map>
#include <string>

namespace ampc {

/// Graphviz text: one box per node (filled with colors[node] when given),
/// edges labelled with the value's type.
std::string printDotToString(const Graph &g, const std::map<const Node *, std::string> &colors);

} // namespace ampc
