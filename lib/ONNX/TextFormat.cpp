//===- TextFormat.cpp - ONNX textual syntax reader -------------------------===//

#include "ampc/ONNX/TextFormat.h"

#include "ampc/IR/Tensor.h"
#include "ampc/Support/Error.h"

#include "onnx/onnx_pb.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace ampc {
namespace {

class TextParser {
public:
  explicit TextParser(std::string_view text) : text_(text) {}

  llvm::Error parseModel(onnx::ModelProto &model);

private:
  // Lexing helpers.
  void skipSpace();
  bool atEnd() {
    skipSpace();
    return pos_ >= text_.size();
  }
  char peek() {
    skipSpace();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool accept(char c) {
    if (peek() != c)
      return false;
    ++pos_;
    return true;
  }
  bool acceptArrow() {
    skipSpace();
    if (text_.substr(pos_, 2) != "=>")
      return false;
    pos_ += 2;
    return true;
  }
  llvm::Error expect(char c);
  llvm::Error error(const llvm::Twine &msg);

  std::string identifier(); // empty when none
  llvm::Error parseIdentifier(std::string &id);
  llvm::Error parseString(std::string &s);
  /// A plain or double-quoted name; `found` says whether one was present.
  llvm::Error parseName(std::string &name, bool &found);
  llvm::Error parseInt(int64_t &v);
  /// A numeric literal (int or float, inf, nan); isFloat says which.
  llvm::Error parseNumber(double &d, int64_t &i, bool &isFloat);

  // Grammar.
  llvm::Error parseHeader(onnx::ModelProto &model);
  llvm::Error parseGraph(onnx::GraphProto &graph);
  bool nextIsType();
  llvm::Error parseType(onnx::TypeProto &type);
  llvm::Error parseValueInfo(onnx::ValueInfoProto &vi);
  llvm::Error parseTensorData(onnx::TensorProto &t, const onnx::TypeProto &type);
  llvm::Error parseNode(onnx::NodeProto &node);
  llvm::Error parseNameList(google::protobuf::RepeatedPtrField<std::string> &names);
  llvm::Error parseAttributes(onnx::NodeProto &node);
  llvm::Error parseAttribute(onnx::AttributeProto &attr);

  std::string_view text_;
  size_t pos_ = 0;
};

void TextParser::skipSpace() {
  while (pos_ < text_.size()) {
    char c = text_[pos_];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++pos_;
    } else if (c == '#' || (c == '/' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '/')) {
      while (pos_ < text_.size() && text_[pos_] != '\n')
        ++pos_;
    } else {
      break;
    }
  }
}

llvm::Error TextParser::error(const llvm::Twine &msg) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
    if (text_[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return makeError("line " + llvm::Twine(line) + ", column " + llvm::Twine(col) + ": " + msg);
}

llvm::Error TextParser::expect(char c) {
  if (accept(c))
    return llvm::Error::success();
  char found = peek();
  return error(llvm::Twine("expected '") + llvm::Twine(c) + "' but found " +
               (found ? "'" + std::string(1, found) + "'" : std::string("end of input")));
}

std::string TextParser::identifier() {
  skipSpace();
  size_t start = pos_;
  if (pos_ < text_.size() && (std::isalpha(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
    ++pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
      ++pos_;
  }
  return std::string(text_.substr(start, pos_ - start));
}

llvm::Error TextParser::parseIdentifier(std::string &id) {
  id = identifier();
  if (id.empty())
    return error("identifier expected");
  return llvm::Error::success();
}

llvm::Error TextParser::parseString(std::string &s) {
  if (peek() != '"')
    return error("string literal expected");
  ++pos_;
  s.clear();
  while (pos_ < text_.size() && text_[pos_] != '"') {
    if (text_[pos_] == '\\' && pos_ + 1 < text_.size())
      ++pos_;
    s.push_back(text_[pos_++]);
  }
  if (pos_ >= text_.size())
    return error("unterminated string literal");
  ++pos_;
  return llvm::Error::success();
}

llvm::Error TextParser::parseName(std::string &name, bool &found) {
  if (peek() == '"') {
    found = true;
    return parseString(name);
  }
  name = identifier();
  found = !name.empty();
  return llvm::Error::success();
}

llvm::Error TextParser::parseNumber(double &d, int64_t &i, bool &isFloat) {
  skipSpace();
  size_t start = pos_;
  bool negative = false;
  if (pos_ < text_.size() && (text_[pos_] == '-' || text_[pos_] == '+')) {
    negative = text_[pos_] == '-';
    ++pos_;
  }
  // Special float words.
  std::string word;
  while (pos_ < text_.size() && std::isalpha(static_cast<unsigned char>(text_[pos_])))
    word.push_back(static_cast<char>(std::tolower(text_[pos_++])));
  if (!word.empty()) {
    isFloat = true;
    if (word == "inf" || word == "infinity")
      d = negative ? -std::numeric_limits<double>::infinity()
                   : std::numeric_limits<double>::infinity();
    else if (word == "nan")
      d = std::numeric_limits<double>::quiet_NaN();
    else {
      pos_ = start;
      return error("number expected");
    }
    return llvm::Error::success();
  }
  size_t digitsStart = pos_;
  isFloat = false;
  while (pos_ < text_.size()) {
    char c = text_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      ++pos_;
    } else if (c == '.') {
      isFloat = true;
      ++pos_;
    } else if ((c == 'e' || c == 'E') && pos_ > digitsStart) {
      isFloat = true;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-'))
        ++pos_;
    } else {
      break;
    }
  }
  if (pos_ == digitsStart) {
    pos_ = start;
    return error("number expected");
  }
  std::string tok(text_.substr(start, pos_ - start));
  if (isFloat) {
    d = std::strtod(tok.c_str(), nullptr);
  } else {
    errno = 0;
    i = std::strtoll(tok.c_str(), nullptr, 10);
    if (errno == ERANGE)
      return error("integer literal out of range: " + tok);
    d = static_cast<double>(i);
  }
  return llvm::Error::success();
}

llvm::Error TextParser::parseInt(int64_t &v) {
  double d;
  bool isFloat;
  if (auto err = parseNumber(d, v, isFloat))
    return err;
  if (isFloat)
    return error("integer expected");
  return llvm::Error::success();
}

llvm::Error TextParser::parseModel(onnx::ModelProto &model) {
  model.set_ir_version(8);
  if (peek() == '<')
    if (auto err = parseHeader(model))
      return err;
  if (auto err = parseGraph(*model.mutable_graph()))
    return err;
  if (!atEnd())
    return error("unexpected text after the graph");
  return llvm::Error::success();
}

llvm::Error TextParser::parseHeader(onnx::ModelProto &model) {
  if (auto err = expect('<'))
    return err;
  if (accept('>'))
    return llvm::Error::success();
  do {
    std::string key;
    if (auto err = parseIdentifier(key))
      return err;
    if (auto err = expect(':'))
      return err;
    if (key == "ir_version" || key == "model_version") {
      int64_t v;
      if (auto err = parseInt(v))
        return err;
      if (key == "ir_version")
        model.set_ir_version(v);
      else
        model.set_model_version(v);
    } else if (key == "opset_import") {
      if (auto err = expect('['))
        return err;
      if (!accept(']')) {
        do {
          std::string domain;
          int64_t version;
          if (auto err = parseString(domain))
            return err;
          if (auto err = expect(':'))
            return err;
          if (auto err = parseInt(version))
            return err;
          auto *op = model.add_opset_import();
          op->set_domain(domain);
          op->set_version(version);
        } while (accept(','));
        if (auto err = expect(']'))
          return err;
      }
    } else if (key == "metadata_props") {
      if (auto err = expect('['))
        return err;
      if (!accept(']')) {
        do {
          std::string k, v;
          if (auto err = parseString(k))
            return err;
          if (auto err = expect(':'))
            return err;
          if (auto err = parseString(v))
            return err;
          auto *prop = model.add_metadata_props();
          prop->set_key(k);
          prop->set_value(v);
        } while (accept(','));
        if (auto err = expect(']'))
          return err;
      }
    } else if (key == "producer_name" || key == "producer_version" || key == "domain" ||
               key == "doc_string") {
      std::string v;
      if (auto err = parseString(v))
        return err;
      if (key == "producer_name")
        model.set_producer_name(v);
      else if (key == "producer_version")
        model.set_producer_version(v);
      else if (key == "domain")
        model.set_domain(v);
      else
        model.set_doc_string(v);
    } else {
      return error("unknown model header key '" + key + "'");
    }
  } while (accept(','));
  return expect('>');
}

bool TextParser::nextIsType() {
  size_t save = pos_;
  std::string id = identifier();
  pos_ = save;
  return dtypeFromName(id).has_value() || id == "string" || id == "int16" || id == "uint16" ||
         id == "uint32" || id == "uint64";
}

llvm::Error TextParser::parseType(onnx::TypeProto &type) {
  std::string id;
  if (auto err = parseIdentifier(id))
    return err;
  std::optional<DType> dt = dtypeFromName(id);
  if (!dt)
    return error("unsupported element type '" + id + "'");
  auto *tt = type.mutable_tensor_type();
  tt->set_elem_type(dtypeToOnnx(*dt));
  if (!accept('[')) {
    tt->mutable_shape(); // scalar
    return llvm::Error::success();
  }
  if (accept(']'))
    return llvm::Error::success(); // unknown rank
  auto *shape = tt->mutable_shape();
  do {
    auto *dim = shape->add_dim();
    if (accept('?'))
      continue;
    std::string sym = identifier();
    if (!sym.empty()) {
      dim->set_dim_param(sym);
      continue;
    }
    int64_t v;
    if (auto err = parseInt(v))
      return err;
    dim->set_dim_value(v);
  } while (accept(','));
  return expect(']');
}

llvm::Error TextParser::parseValueInfo(onnx::ValueInfoProto &vi) {
  if (nextIsType())
    if (auto err = parseType(*vi.mutable_type()))
      return err;
  std::string name;
  bool found;
  if (auto err = parseName(name, found))
    return err;
  if (!found)
    return error("value name expected");
  vi.set_name(name);
  return llvm::Error::success();
}

llvm::Error TextParser::parseTensorData(onnx::TensorProto &t, const onnx::TypeProto &type) {
  if (!type.has_tensor_type() || !type.tensor_type().has_shape())
    return error("tensor '" + t.name() + "' needs a type with a shape");
  DType dt = dtypeFromOnnx(type.tensor_type().elem_type());
  Shape shape;
  for (const auto &d : type.tensor_type().shape().dim()) {
    if (!d.has_dim_value())
      return error("tensor '" + t.name() + "' needs numeric dimensions");
    shape.push_back(d.dim_value());
  }
  t.set_data_type(dtypeToOnnx(dt));
  for (int64_t d : shape)
    t.add_dims(d);
  if (auto err = expect('{'))
    return err;
  skipSpace();
  if (text_.substr(pos_, 3) == "...")
    return error("tensor '" + t.name() +
                 "' has elided data ('{...}'); print it with --print-full-data to re-read it");
  int64_t count = numElements(shape);
  if (count < 0 || count > (int64_t(1) << 31))
    return error("tensor '" + t.name() + "' is too large for a text literal");
  // Each value takes at least one character and a separator: a shape larger
  // than the rest of the text could hold is refused before its storage is
  // allocated (a 174-byte file asked for 8 GB).
  int64_t room = static_cast<int64_t>(text_.size() - pos_) / 2 + 1;
  if (count > room)
    return error("tensor '" + t.name() + "' has shape " + shapeStr(shape) + ", more values than the " +
                 "text holds");
  Tensor data(TensorType(dt, shape));
  int64_t n = 0;
  if (!accept('}')) {
    do {
      double d;
      int64_t i = 0;
      bool literalIsFloat;
      if (auto err = parseNumber(d, i, literalIsFloat))
        return err;
      if (n >= count)
        return error("tensor '" + t.name() + "' has more values than its shape " + shapeStr(shape));
      if (literalIsFloat || isFloat(dt))
        data.setDouble(n, d);
      else
        data.setInt(n, i);
      ++n;
    } while (accept(','));
    if (auto err = expect('}'))
      return err;
  }
  if (n != count)
    return error("tensor '" + t.name() + "' has " + llvm::Twine(n) + " values but its shape " +
                 shapeStr(shape) + " needs " + llvm::Twine(count));
  t.set_raw_data(std::string(reinterpret_cast<const char *>(data.data()), data.byteSize()));
  return llvm::Error::success();
}

llvm::Error TextParser::parseGraph(onnx::GraphProto &graph) {
  std::string name = identifier();
  graph.set_name(name.empty() ? "main" : name);
  // Inputs, possibly with default values (initializers).
  if (auto err = expect('('))
    return err;
  if (!accept(')')) {
    do {
      onnx::ValueInfoProto vi;
      if (auto err = parseValueInfo(vi))
        return err;
      if (accept('=')) {
        auto *t = graph.add_initializer();
        t->set_name(vi.name());
        if (auto err = parseTensorData(*t, vi.type()))
          return err;
      }
      *graph.add_input() = vi;
    } while (accept(','));
    if (auto err = expect(')'))
      return err;
  }
  if (!acceptArrow())
    return error("expected '=>' after the graph inputs");
  if (auto err = expect('('))
    return err;
  if (!accept(')')) {
    do {
      if (auto err = parseValueInfo(*graph.add_output()))
        return err;
    } while (accept(','));
    if (auto err = expect(')'))
      return err;
  }
  // Value infos and initializers.
  if (accept('<') && !accept('>')) {
    do {
      onnx::ValueInfoProto vi;
      if (auto err = parseValueInfo(vi))
        return err;
      if (accept('=')) {
        auto *t = graph.add_initializer();
        t->set_name(vi.name());
        if (auto err = parseTensorData(*t, vi.type()))
          return err;
      } else {
        *graph.add_value_info() = vi;
      }
    } while (accept(','));
    if (auto err = expect('>'))
      return err;
  }
  if (auto err = expect('{'))
    return err;
  while (!accept('}')) {
    if (atEnd())
      return error("expected '}' at the end of the graph");
    if (auto err = parseNode(*graph.add_node()))
      return err;
  }
  return llvm::Error::success();
}

llvm::Error TextParser::parseNameList(google::protobuf::RepeatedPtrField<std::string> &names) {
  // Empty names are written as "" or left out between commas: Op(, x).
  char c = peek();
  if (c == ')' || c == '=')
    return llvm::Error::success();
  do {
    std::string name;
    bool found;
    if (auto err = parseName(name, found))
      return err;
    char next = peek();
    if (!found && (next == ')' || next == '=') && names.empty())
      break;
    *names.Add() = name;
  } while (accept(','));
  // Trailing empty names ("Op(x,)") mean omitted optional operands: drop them.
  while (!names.empty() && names.Get(names.size() - 1).empty())
    names.RemoveLast();
  return llvm::Error::success();
}

llvm::Error TextParser::parseNode(onnx::NodeProto &node) {
  if (accept('[')) {
    std::string name;
    bool found;
    if (auto err = parseName(name, found))
      return err;
    node.set_name(name);
    if (auto err = expect(']'))
      return err;
  }
  if (auto err = parseNameList(*node.mutable_output()))
    return err;
  if (auto err = expect('='))
    return err;
  std::string id;
  if (auto err = parseIdentifier(id))
    return err;
  std::string domain;
  while (accept('.')) {
    domain += domain.empty() ? id : "." + id;
    if (auto err = parseIdentifier(id))
      return err;
  }
  node.set_domain(domain);
  node.set_op_type(id);
  if (peek() == '<')
    if (auto err = parseAttributes(node))
      return err;
  if (auto err = expect('('))
    return err;
  if (auto err = parseNameList(*node.mutable_input()))
    return err;
  if (auto err = expect(')'))
    return err;
  if (node.attribute_size() == 0 && peek() == '<')
    if (auto err = parseAttributes(node))
      return err;
  return llvm::Error::success();
}

llvm::Error TextParser::parseAttributes(onnx::NodeProto &node) {
  if (auto err = expect('<'))
    return err;
  do {
    if (auto err = parseAttribute(*node.add_attribute()))
      return err;
  } while (accept(','));
  return expect('>');
}

llvm::Error TextParser::parseAttribute(onnx::AttributeProto &attr) {
  std::string name;
  if (auto err = parseIdentifier(name))
    return err;
  attr.set_name(name);
  std::string typeName;
  if (accept(':'))
    if (auto err = parseIdentifier(typeName))
      return err;
  if (auto err = expect('='))
    return err;
  using AP = onnx::AttributeProto;
  auto setScalar = [&](double d, int64_t i, bool isFloat) -> llvm::Error {
    bool wantFloat = typeName == "float" || typeName == "floats" ||
                     (typeName.empty() && isFloat);
    if (attr.type() == AP::FLOATS || attr.type() == AP::INTS) {
      if (attr.type() == AP::FLOATS)
        attr.add_floats(static_cast<float>(d));
      else if (isFloat)
        return error("attribute '" + name + "': mixed int and float list");
      else
        attr.add_ints(i);
      return llvm::Error::success();
    }
    if (wantFloat) {
      attr.set_type(AP::FLOAT);
      attr.set_f(static_cast<float>(d));
    } else {
      if (isFloat)
        return error("attribute '" + name + "': integer expected");
      attr.set_type(AP::INT);
      attr.set_i(i);
    }
    return llvm::Error::success();
  };

  if (accept('[')) {
    if (typeName == "floats")
      attr.set_type(AP::FLOATS);
    else if (typeName == "ints")
      attr.set_type(AP::INTS);
    else if (typeName == "strings")
      attr.set_type(AP::STRINGS);
    if (accept(']')) {
      if (attr.type() == AP::UNDEFINED)
        return error("attribute '" + name + "': an empty list needs a type (ints, floats, strings)");
      return llvm::Error::success();
    }
    do {
      if (peek() == '"') {
        std::string s;
        if (auto err = parseString(s))
          return err;
        attr.set_type(AP::STRINGS);
        attr.add_strings(s);
        continue;
      }
      double d;
      int64_t i = 0;
      bool isFloat;
      if (auto err = parseNumber(d, i, isFloat))
        return err;
      if (attr.type() == AP::UNDEFINED)
        attr.set_type(isFloat ? AP::FLOATS : AP::INTS);
      else if (attr.type() == AP::INTS && isFloat) {
        // Promote an int list that turns out to hold floats.
        std::vector<int64_t> ints(attr.ints().begin(), attr.ints().end());
        attr.clear_ints();
        attr.set_type(AP::FLOATS);
        for (int64_t v : ints)
          attr.add_floats(static_cast<float>(v));
      }
      if (auto err = setScalar(d, i, isFloat))
        return err;
    } while (accept(','));
    return expect(']');
  }
  if (peek() == '"') {
    std::string s;
    if (auto err = parseString(s))
      return err;
    attr.set_type(AP::STRING);
    attr.set_s(s);
    return llvm::Error::success();
  }
  if (nextIsType()) {
    onnx::TypeProto type;
    if (auto err = parseType(type))
      return err;
    auto *t = attr.mutable_t();
    bool found;
    std::string tname;
    if (auto err = parseName(tname, found))
      return err;
    t->set_name(tname);
    attr.set_type(AP::TENSOR);
    return parseTensorData(*t, type);
  }
  double d;
  int64_t i = 0;
  bool isFloat;
  if (auto err = parseNumber(d, i, isFloat))
    return err;
  return setScalar(d, i, isFloat);
}

} // namespace

llvm::Error parseOnnxText(std::string_view text, onnx::ModelProto &model) {
  TextParser parser(text);
  return parser.parseModel(model);
}

} // namespace ampc
