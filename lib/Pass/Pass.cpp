//===- Pass.cpp - Pass options, registry and manager -----------------------===//

#include "ampc/Pass/Pass.h"

#include "ampc/IR/Printer.h"
#include "ampc/IR/Verifier.h"
#include "ampc/ONNX/TypeInference.h"
#include "ampc/Support/Error.h"

#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cmath>

namespace ampc {

//===----------------------------------------------------------------------===//
// PassOptions
//===----------------------------------------------------------------------===//

bool PassOptions::getBool(llvm::StringRef name) const {
  auto v = getString(name);
  return v == "true" || v == "1" || v == "on";
}

int64_t PassOptions::getInt(llvm::StringRef name) const {
  return std::strtoll(getString(name).c_str(), nullptr, 10);
}

double PassOptions::getFloat(llvm::StringRef name) const {
  return std::strtod(getString(name).c_str(), nullptr);
}

std::string PassOptions::getString(llvm::StringRef name) const {
  auto it = values_.find(name.str());
  return it == values_.end() ? std::string() : it->second;
}

std::vector<std::string> PassOptions::getList(llvm::StringRef name) const {
  std::vector<std::string> out;
  llvm::SmallVector<llvm::StringRef> parts;
  // The parts point into the text: keep it alive while they are read.
  std::string text = getString(name);
  llvm::StringRef(text).split(parts, ',', -1, /*KeepEmpty=*/false);
  for (auto p : parts)
    out.push_back(p.trim().str());
  return out;
}

namespace {

/// Splits "a=1,b=[x,y] c=2 d='a b'" at commas or spaces outside brackets
/// and quotes. A quote (' or ", as in MLIR's pass options) opens only where
/// a value or an item starts, and is removed, so a quoted value may hold
/// separators, '=' or nothing at all; elsewhere it is an ordinary character
/// (a node named it's). `unterminated` reports a quote never closed.
std::vector<std::string> splitOptions(llvm::StringRef text, bool &unterminated) {
  std::vector<std::string> out;
  std::string cur;
  bool any = false; // cur holds an item, perhaps an empty quoted value
  int depth = 0;
  char quote = 0;
  for (char c : text) {
    if (quote) {
      if (c == quote)
        quote = 0;
      else
        cur += c;
      continue;
    }
    bool valueStarts = depth == 0 && (cur.empty() || cur.back() == '=');
    if ((c == '\'' || c == '"') && valueStarts) {
      quote = c;
      any = true;
      continue;
    }
    if (c == '[')
      ++depth;
    if (c == ']')
      --depth;
    if ((c == ',' || c == ' ') && depth == 0) {
      if (any || !cur.empty())
        out.push_back(cur);
      cur.clear();
      any = false;
      continue;
    }
    cur += c;
  }
  if (any || !cur.empty())
    out.push_back(cur);
  unterminated = quote != 0;
  return out;
}

llvm::Error validate(llvm::StringRef pass, const OptionSpec &spec, std::string &value) {
  auto bad = [&](const std::string &what) {
    return makeError("pass '" + pass + "': option '" + spec.name + "' " + what + ", got '" +
                     value + "'");
  };
  switch (spec.type) {
  case OptionType::Bool:
    if (value.empty())
      value = "true";
    if (value != "true" && value != "false" && value != "1" && value != "0")
      return bad("must be true or false");
    return llvm::Error::success();
  case OptionType::Int: {
    long long v;
    if (llvm::StringRef(value).getAsInteger(10, v))
      return bad("must be an integer");
    return llvm::Error::success();
  }
  case OptionType::Float: {
    double v;
    if (llvm::StringRef(value).getAsDouble(v) || !std::isfinite(v))
      return bad("must be a finite number");
    return llvm::Error::success();
  }
  case OptionType::Enum:
    if (std::find(spec.choices.begin(), spec.choices.end(), value) == spec.choices.end())
      return bad("must be one of " + llvm::join(spec.choices, ", "));
    return llvm::Error::success();
  case OptionType::List:
    if (value.size() >= 2 && value.front() == '[' && value.back() == ']')
      value = value.substr(1, value.size() - 2);
    return llvm::Error::success();
  case OptionType::String:
    return llvm::Error::success();
  }
  return llvm::Error::success();
}

} // namespace

llvm::Expected<PassOptions> PassOptions::parse(llvm::StringRef passName,
                                               const std::vector<OptionSpec> &specs,
                                               llvm::StringRef mainOption, llvm::StringRef text) {
  PassOptions opts;
  for (const OptionSpec &spec : specs)
    if (!spec.defaultValue.empty())
      opts.values_[spec.name] = spec.defaultValue;
  text = text.trim();
  if (text.empty())
    return opts;
  bool unterminated = false;
  std::vector<std::string> items = splitOptions(text, unterminated);
  if (unterminated)
    return makeError("pass '" + passName + "': a quote in its options is never closed: " + text);
  // "--autocast=fp16": a bare value sets the main option.
  if (!mainOption.empty() && !text.contains('=') ) {
    items = {mainOption.str() + "=" + text.str()};
  }
  for (const std::string &item : items) {
    auto [key, value] = llvm::StringRef(item).split('=');
    llvm::StringRef name = key; // clang 14 cannot capture a structured binding
    auto spec = std::find_if(specs.begin(), specs.end(),
                             [&](const OptionSpec &s) { return s.name == name; });
    if (spec == specs.end()) {
      std::vector<std::string> names;
      for (const auto &s : specs)
        names.push_back(s.name);
      return makeError("pass '" + passName + "' has no option '" + key + "'" +
                       (names.empty() ? std::string(" (it takes none)")
                                      : " (options: " + llvm::join(names, ", ") + ")"));
    }
    std::string v = value.str();
    if (auto err = validate(passName, *spec, v))
      return std::move(err);
    opts.values_[spec->name] = v;
  }
  return opts;
}

//===----------------------------------------------------------------------===//
// Registry
//===----------------------------------------------------------------------===//

namespace {
std::map<std::string, PassInfo> &registry() {
  static std::map<std::string, PassInfo> r;
  return r;
}
} // namespace

void PassRegistry::add(PassInfo info) {
  std::string name = info.name;
  registry()[name] = std::move(info);
}

const PassInfo *PassRegistry::lookup(llvm::StringRef name) {
  auto it = registry().find(name.str());
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<const PassInfo *> PassRegistry::all() {
  std::vector<const PassInfo *> out;
  for (const auto &[name, info] : registry())
    out.push_back(&info);
  return out;
}

//===----------------------------------------------------------------------===//
// PassManager
//===----------------------------------------------------------------------===//

llvm::Error PassManager::addPass(llvm::StringRef name, llvm::StringRef options) {
  const PassInfo *info = PassRegistry::lookup(name);
  if (!info) {
    std::vector<std::string> names;
    for (const PassInfo *p : PassRegistry::all())
      names.push_back(p->name);
    return makeError("unknown pass '" + name + "' (passes: " + llvm::join(names, ", ") + ")");
  }
  auto opts = PassOptions::parse(info->name, info->options, info->mainOption, options);
  if (!opts)
    return opts.takeError();
  passes_.push_back(info->create(*opts));
  return llvm::Error::success();
}

llvm::Error PassManager::addPipeline(
    llvm::StringRef pipeline,
    const std::function<std::string(llvm::StringRef, llvm::StringRef)> &rewrite) {
  size_t i = 0;
  while (i < pipeline.size()) {
    while (i < pipeline.size() && (pipeline[i] == ',' || pipeline[i] == ' '))
      ++i;
    if (i >= pipeline.size())
      break;
    size_t start = i;
    while (i < pipeline.size() && pipeline[i] != ',' && pipeline[i] != '{')
      ++i;
    llvm::StringRef name = pipeline.slice(start, i).trim();
    llvm::StringRef options;
    if (i < pipeline.size() && pipeline[i] == '{') {
      size_t close = pipeline.find('}', i);
      if (close == llvm::StringRef::npos)
        return makeError("pass pipeline: missing '}' after the options of '" + name + "'");
      options = pipeline.slice(i + 1, close);
      i = close + 1;
    }
    if (name.empty())
      return makeError("pass pipeline: empty pass name in '" + pipeline + "'");
    std::string text = rewrite ? rewrite(name, options) : options.str();
    if (auto err = addPass(name, text))
      return err;
  }
  return llvm::Error::success();
}

llvm::Error verifyGraphAndTypes(const Graph &g) {
  if (auto err = verifyGraph(g))
    return err;
  return verifyTypes(g);
}

llvm::Error PassManager::run(Graph &g, PassContext &ctx) {
  for (auto &pass : passes_) {
    llvm::TimeRegion region(timerFor ? timerFor(pass->name()) : nullptr);
    if (auto err = pass->run(g, ctx))
      return withContext(std::move(err), "pass '" + pass->name() + "'");
    if (verifyEach)
      if (auto err = verifyGraphAndTypes(g))
        return withContext(std::move(err), "verification after pass '" + pass->name() + "'");
    if (printAfterAll) {
      *printAfterAll << "// -----// IR after " << pass->name() << " //----- //\n";
      printGraph(g, *printAfterAll);
    }
  }
  return llvm::Error::success();
}

} // namespace ampc
