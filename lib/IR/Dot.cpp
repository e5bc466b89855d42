//===- Dot.cpp - Graphviz rendering of a graph -----------------------------===//

#include "ampc/IR/Dot.h"

#include <sstream>
#include <unordered_map>

namespace ampc {

namespace {
std::string escape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out;
}
} // namespace

std::string printDotToString(const Graph &g, const std::map<const Node *, std::string> &colors) {
  std::ostringstream os;
  os << "digraph \"" << escape(g.name) << "\" {\n  rankdir=TB;\n  node [shape=box, style=filled, "
     << "fillcolor=white, fontname=\"Helvetica\"];\n";
  std::unordered_map<const Node *, int> ids;
  int next = 0;
  for (const Node *n : g.nodes())
    ids[n] = next++;
  auto valueId = [](const Value *v) { return "\"v:" + escape(v->name()) + "\""; };
  for (const Value *v : g.inputs())
    os << "  " << valueId(v) << " [shape=ellipse, label=\"" << escape(v->name()) << "\\n"
       << v->type().str() << "\"];\n";
  for (const Node *n : g.nodes()) {
    auto c = colors.find(n);
    os << "  n" << ids[n] << " [label=\"" << escape(n->qualifiedOpType()) << "\\n"
       << escape(n->displayName()) << "\"";
    if (c != colors.end())
      os << ", fillcolor=\"" << c->second << "\"";
    os << "];\n";
  }
  for (const Node *n : g.nodes())
    for (const Value *v : n->inputs()) {
      if (!v || v->isInitializer())
        continue;
      std::string from = v->producer() ? "n" + std::to_string(ids[v->producer()]) : valueId(v);
      os << "  " << from << " -> n" << ids[n] << " [label=\"" << v->type().str() << "\"];\n";
    }
  for (const Value *v : g.outputs()) {
    os << "  \"out:" << escape(v->name()) << "\" [shape=ellipse, label=\"" << escape(v->name())
       << "\\n" << v->type().str() << "\"];\n";
    std::string from = v->producer() ? "n" + std::to_string(ids[v->producer()]) : valueId(v);
    os << "  " << from << " -> \"out:" << escape(v->name()) << "\";\n";
  }
  os << "}\n";
  return os.str();
}

} // namespace ampc
