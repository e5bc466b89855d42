//===- AutocastPolicy.cpp - Default precision lists and policy files -------===//
//
// The default lists follow PyTorch autocast and TensorFlow's
// auto_mixed_precision; docs/precision-policy.md gives the source of every
// entry. Keep that document in step with the tables below.
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/AutocastPolicy.h"

#include "ampc/Support/Error.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>

namespace ampc {

namespace {

// The GEMM-like ops: tensor cores make them fast in low precision and they
// accumulate in fp32 on every backend ampc targets.
const char *const kAllowOps[] = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum"};

// Ops whose result is inaccurate or overflows in fp16: exponentials and
// logarithms, large reductions, normalizations, losses, and the ops the ONNX
// float16 converters block. Erf too: exported GELU is x (1 + erf(x/sqrt 2)) / 2,
// and 1 + erf cancels in low precision where x < 0 (PyTorch computes GELU in
// fp32 and rounds once).
const char *const kDenyOps[] = {
    "Exp",   "Log",   "Pow",   "Reciprocal", "Softmax", "LogSoftmax", "LayerNormalization",
    "GroupNormalization", "InstanceNormalization", "LpNormalization", "Reduce*", "CumSum",
    "Softplus", "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "Asin", "Acos", "Atan",
    "Sinh",  "Cosh",  "Asinh", "Acosh",      "Atanh",   "Tan",        "Resize",
    "Range", "TopK",  "Erf"};

// Arithmetic and activations that are safe in low precision between low
// precision ops, but should not pull fp32 data down on their own.
const char *const kInferOps[] = {"Add",      "Sub",         "Mul",     "Div",
                                 "Sum",      "Mean",        "Sqrt",    "Sigmoid",
                                 "Tanh",     "Elu",         "Selu",
                                 "LeakyRelu", "PRelu",      "HardSigmoid", "HardSwish", "Clip",
                                 "AveragePool", "GlobalAveragePool", "BatchNormalization"};

// Ops that compute nothing that rounding could change: data movement,
// selection, sign changes and comparisons.
const char *const kClearOps[] = {
    "Relu",    "Reshape", "Transpose",      "Flatten", "Squeeze",       "Unsqueeze",
    "Concat",  "Split",   "Slice",          "Gather",  "GatherElements", "Pad",
    "Tile",    "Expand",  "Where",          "Identity", "Dropout",      "MaxPool",
    "GlobalMaxPool", "Max", "Min",          "Abs",     "Neg",           "Sign",
    "Equal",   "Less",    "LessOrEqual",    "Greater", "GreaterOrEqual"};

bool isPattern(llvm::StringRef op) { return op.endswith("*"); }

} // namespace

llvm::StringRef precisionClassName(PrecisionClass c) {
  switch (c) {
  case PrecisionClass::Allow:
    return "allow";
  case PrecisionClass::Deny:
    return "deny";
  case PrecisionClass::Infer:
    return "infer";
  case PrecisionClass::Clear:
    return "clear";
  }
  return "?";
}

AutocastPolicy AutocastPolicy::defaults() {
  AutocastPolicy p;
  auto add = [&](const auto &ops, PrecisionClass cls) {
    for (const char *op : ops)
      p.setClass(op, cls, "default");
  };
  add(kAllowOps, PrecisionClass::Allow);
  add(kDenyOps, PrecisionClass::Deny);
  add(kInferOps, PrecisionClass::Infer);
  add(kClearOps, PrecisionClass::Clear);
  p.sources_.push_back("default lists");
  return p;
}

void AutocastPolicy::setClass(const std::string &op, PrecisionClass cls, std::string origin) {
  if (isPattern(op)) {
    patterns_[op.substr(0, op.size() - 1)] = {cls, std::move(origin)};
    return;
  }
  exact_[op] = PolicyEntry{cls, std::move(origin)};
}

void AutocastPolicy::unlist(const std::string &op, std::string) {
  if (isPattern(op)) {
    patterns_.erase(op.substr(0, op.size() - 1));
    return;
  }
  exact_[op] = std::nullopt;
}

std::optional<PolicyEntry> AutocastPolicy::classify(const std::string &qualifiedOp) const {
  auto it = exact_.find(qualifiedOp);
  if (it != exact_.end())
    return it->second;
  // The longest matching prefix wins, so "ReduceMax*" can refine "Reduce*".
  const PolicyEntry *best = nullptr;
  size_t bestLength = 0;
  for (const auto &[prefix, entry] : patterns_)
    if (llvm::StringRef(qualifiedOp).startswith(prefix) && (!best || prefix.size() > bestLength)) {
      best = &entry;
      bestLength = prefix.size();
    }
  if (!best)
    return std::nullopt;
  return *best;
}

std::vector<std::string> AutocastPolicy::entries(PrecisionClass cls) const {
  std::vector<std::string> out;
  for (const auto &[op, entry] : exact_)
    if (entry && entry->cls == cls)
      out.push_back(op);
  for (const auto &[prefix, entry] : patterns_)
    if (entry.cls == cls)
      out.push_back(prefix + "*");
  std::sort(out.begin(), out.end());
  return out;
}

llvm::Error AutocastPolicy::forceNode(const std::string &name, bool lowPrecision,
                                      std::string origin) {
  auto it = forced_.find(name);
  if (it != forced_.end() && it->second.lowPrecision != lowPrecision)
    return makeError("autocast: node '" + name + "' is forced to both fp32 (" +
                     (lowPrecision ? it->second.origin : origin) + ") and low precision (" +
                     (lowPrecision ? origin : it->second.origin) + ")");
  forced_[name] = {lowPrecision, std::move(origin)};
  return llvm::Error::success();
}

llvm::Error AutocastPolicy::applyFile(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return makeError("autocast policy '" + path + "': cannot read the file: " +
                     buffer.getError().message());
  if (auto err = applyText((*buffer)->getBuffer(), path))
    return err;
  sources_.push_back(path);
  return llvm::Error::success();
}

llvm::Error AutocastPolicy::applyText(llvm::StringRef text, llvm::StringRef source) {
  llvm::SmallVector<llvm::StringRef> lines;
  text.split(lines, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string where = source.str() + ":" + std::to_string(i + 1);
    llvm::StringRef line = lines[i].split('#').first.trim();
    if (line.empty())
      continue;
    // Names are separated by spaces, tabs or commas.
    llvm::SmallVector<llvm::StringRef> words;
    llvm::SplitString(line, words, " \t,");
    llvm::StringRef directive = words.front();
    std::vector<std::string> names;
    for (llvm::StringRef w : llvm::makeArrayRef(words).drop_front())
      names.push_back(w.str());
    if (names.empty())
      return makeError(where + ": '" + directive + "' names nothing");

    std::optional<PrecisionClass> cls;
    if (directive == "allow")
      cls = PrecisionClass::Allow;
    else if (directive == "deny")
      cls = PrecisionClass::Deny;
    else if (directive == "infer")
      cls = PrecisionClass::Infer;
    else if (directive == "clear")
      cls = PrecisionClass::Clear;
    if (cls) {
      for (const std::string &op : names)
        setClass(op, *cls, where);
      continue;
    }
    if (directive == "unlist") {
      for (const std::string &op : names)
        unlist(op, where);
      continue;
    }
    if (directive == "fp32-nodes" || directive == "lowp-nodes") {
      for (const std::string &n : names)
        if (auto err = forceNode(n, directive == "lowp-nodes", where))
          return err;
      continue;
    }
    return makeError(where + ": unknown directive '" + directive +
                     "' (allow, deny, infer, clear, unlist, fp32-nodes, lowp-nodes)");
  }
  return llvm::Error::success();
}

} // namespace ampc
