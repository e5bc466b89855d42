//===- Printer.cpp - Print the IR as ONNX textual syntax -------------------===//

#include "ampc/IR/Printer.h"

#include <charconv>
#include <cmath>

namespace ampc {

std::string quoteName(const std::string &name) {
  bool plain = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
  for (char c : name)
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  // A plain name that spells a type would be read as one.
  if (plain && !dtypeFromName(name))
    return name;
  std::string out = "\"";
  for (char c : name) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string formatFloat(double v, DType precision) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v < 0 ? "-inf" : "inf";
  char buf[64];
  std::to_chars_result r;
  if (precision == DType::F64)
    r = std::to_chars(buf, buf + sizeof(buf), v);
  else
    r = std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v));
  std::string s(buf, r.ptr);
  // Keep it a float literal when read back.
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

namespace {

class GraphPrinter {
public:
  GraphPrinter(const Graph &g, llvm::raw_ostream &os, const PrintOptions &opts)
      : g_(g), os_(os), opts_(opts) {}

  void print() {
    printHeader();
    printSignature();
    printInitializers();
    os_ << "{\n";
    for (const Node *n : g_.nodes())
      printNode(*n);
    os_ << "}\n";
  }

private:
  void printHeader() {
    os_ << "<\n  ir_version: " << g_.irVersion << ",\n  opset_import: [";
    bool first = true;
    for (const auto &[domain, version] : g_.opsets) {
      os_ << (first ? "" : ", ") << "\"" << domain << "\" : " << version;
      first = false;
    }
    os_ << "]";
    if (!g_.producerName.empty())
      os_ << ",\n  producer_name: \"" << g_.producerName << "\"";
    auto metadata = metadataWithIRFacts(g_);
    if (!metadata.empty()) {
      os_ << ",\n  metadata_props: [";
      bool firstProp = true;
      for (const auto &[k, v] : metadata) {
        os_ << (firstProp ? "" : ", ") << quoteString(k) << " : " << quoteString(v);
        firstProp = false;
      }
      os_ << "]";
    }
    os_ << "\n>\n";
  }

  static std::string quoteString(const std::string &s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\')
        out += '\\';
      out += c;
    }
    return out + "\"";
  }

  static std::string typeStr(const TensorType &t) {
    // A scalar is written without brackets; "float[]" would mean unknown rank.
    if (t.shape.empty())
      return std::string(dtypeName(t.dtype));
    return t.str();
  }

  void printSignature() {
    os_ << quoteName(g_.name) << " (";
    bool first = true;
    for (const Value *v : g_.inputs()) {
      os_ << (first ? "" : ", ") << typeStr(v->type()) << " " << quoteName(v->name());
      if (v->hasDefault()) {
        os_ << " = ";
        printData(*v->data()); // defaults are small scalars: always in full
      }
      first = false;
    }
    os_ << ") => (";
    first = true;
    for (const Value *v : g_.outputs()) {
      os_ << (first ? "" : ", ") << typeStr(v->type()) << " " << quoteName(v->name());
      first = false;
    }
    os_ << ")\n";
  }

  void printData(const Tensor &t) {
    os_ << "{";
    for (int64_t i = 0; i < t.size(); ++i) {
      if (i)
        os_ << ", ";
      if (isFloat(t.dtype()))
        os_ << formatFloat(t.getDouble(i), t.dtype() == DType::F64 ? DType::F64 : DType::F32);
      else
        os_ << t.getInt(i);
    }
    os_ << "}";
  }

  void printSummary(const Tensor &t) {
    os_ << "{...}";
    summary_ = std::to_string(t.size()) + " values";
    if (isFloat(t.dtype()) && t.size() > 0) {
      double lo = t.getDouble(0), hi = lo;
      for (int64_t i = 1; i < t.size(); ++i) {
        lo = std::min(lo, t.getDouble(i));
        hi = std::max(hi, t.getDouble(i));
      }
      summary_ += " in [" + formatFloat(lo, DType::F32) + ", " + formatFloat(hi, DType::F32) + "]";
    }
  }

  bool elide(const Tensor &t) const {
    return opts_.elideLargeData && t.size() > opts_.elideThreshold;
  }

  void printInitializers() {
    const auto &inits = g_.initializers();
    if (inits.empty())
      return;
    os_ << "<\n";
    for (size_t i = 0; i < inits.size(); ++i) {
      const Value *v = inits[i];
      os_ << "  " << typeStr(v->type()) << " " << quoteName(v->name()) << " = ";
      summary_.clear();
      if (elide(*v->data()))
        printSummary(*v->data());
      else
        printData(*v->data());
      if (i + 1 < inits.size())
        os_ << ",";
      if (!summary_.empty())
        os_ << "  # " << summary_;
      os_ << "\n";
    }
    os_ << ">\n";
  }

  void printAttribute(const std::string &name, const Attribute &a) {
    os_ << name;
    switch (a.kind) {
    case Attribute::Kind::Float:
      os_ << " = " << formatFloat(a.f, DType::F32);
      return;
    case Attribute::Kind::Int:
      os_ << " = " << a.i;
      return;
    case Attribute::Kind::String:
      os_ << " = " << quoteString(a.s);
      return;
    case Attribute::Kind::Tensor:
      os_ << " = " << typeStr(a.t->type()) << " ";
      if (elide(*a.t))
        printSummary(*a.t);
      else
        printData(*a.t);
      return;
    case Attribute::Kind::Floats:
      os_ << ": floats = [";
      for (size_t i = 0; i < a.floats.size(); ++i)
        os_ << (i ? ", " : "") << formatFloat(a.floats[i], DType::F32);
      os_ << "]";
      return;
    case Attribute::Kind::Ints:
      os_ << ": ints = [";
      for (size_t i = 0; i < a.ints.size(); ++i)
        os_ << (i ? ", " : "") << a.ints[i];
      os_ << "]";
      return;
    case Attribute::Kind::Strings:
      os_ << ": strings = [";
      for (size_t i = 0; i < a.strings.size(); ++i)
        os_ << (i ? ", " : "") << quoteString(a.strings[i]);
      os_ << "]";
      return;
    }
  }

  void printNode(const Node &n) {
    os_ << "  ";
    if (!n.name().empty())
      os_ << "[" << quoteName(n.name()) << "] ";
    for (unsigned i = 0; i < n.numOutputs(); ++i) {
      const Value *v = n.output(i);
      os_ << (i ? ", " : "") << (v ? quoteName(v->name()) : "\"\"");
    }
    os_ << " = " << n.qualifiedOpType();
    summary_.clear();
    if (!n.attributes().empty()) {
      os_ << " <";
      bool first = true;
      for (const auto &[name, a] : n.attributes()) {
        os_ << (first ? "" : ", ");
        printAttribute(name, a);
        first = false;
      }
      os_ << ">";
    }
    os_ << " (";
    for (unsigned i = 0; i < n.numInputs(); ++i) {
      const Value *v = n.input(i);
      os_ << (i ? ", " : "") << (v ? quoteName(v->name()) : "\"\"");
    }
    os_ << ")";
    if (opts_.printTypes) {
      os_ << "  # ";
      for (unsigned i = 0; i < n.numOutputs(); ++i) {
        const Value *v = n.output(i);
        os_ << (i ? ", " : "") << (v ? typeStr(v->type()) : "-");
      }
      if (!summary_.empty())
        os_ << "; " << summary_;
    }
    os_ << "\n";
  }

  const Graph &g_;
  llvm::raw_ostream &os_;
  const PrintOptions &opts_;
  std::string summary_;
};

} // namespace

void printGraph(const Graph &g, llvm::raw_ostream &os, const PrintOptions &opts) {
  GraphPrinter(g, os, opts).print();
}

std::string printGraphToString(const Graph &g, const PrintOptions &opts) {
  std::string s;
  llvm::raw_string_ostream os(s);
  printGraph(g, os, opts);
  return os.str();
}

} // namespace ampc
