//===- Pass.h - Passes, their options, registry and manager -----*- C++ -*-===//
//
// A pass has a name, a one-line summary and typed options. It is registered
// once (PassRegistration) and can then run alone (`amp-opt --<name>`, or
// `--<name>=<value>` for its main option, or `--<name>='opt=v,opt2=w'`) or in
// a pipeline string (`--pass-pipeline='canonicalize,autocast{dtype=bf16}'`).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/Timer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

namespace ampc {

//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

enum class OptionType { Bool, Int, Float, String, Enum, List };

struct OptionSpec {
  std::string name;
  OptionType type;
  std::string help;
  std::string defaultValue;         ///< Textual default ("" means unset).
  std::vector<std::string> choices; ///< For Enum.
};

/// Option values of one pass instance, validated against its specs.
class PassOptions {
public:
  bool has(llvm::StringRef name) const { return values_.count(name.str()); }
  bool getBool(llvm::StringRef name) const;
  int64_t getInt(llvm::StringRef name) const;
  double getFloat(llvm::StringRef name) const;
  std::string getString(llvm::StringRef name) const;
  std::vector<std::string> getList(llvm::StringRef name) const;
  /// Every option with its value, for printing a pipeline.
  const std::map<std::string, std::string> &values() const { return values_; }

  /// Parses `opt=v,opt2=w` (or a bare value for `mainOption`) against specs;
  /// unspecified options take their defaults.
  static llvm::Expected<PassOptions> parse(llvm::StringRef passName,
                                           const std::vector<OptionSpec> &specs,
                                           llvm::StringRef mainOption, llvm::StringRef text);
  void set(const std::string &name, std::string value) { values_[name] = std::move(value); }

private:
  std::map<std::string, std::string> values_;
};

//===----------------------------------------------------------------------===//
// Pass context: what passes report back to the driver
//===----------------------------------------------------------------------===//

class PassContext {
public:
  /// Appends a section to the report printed by `--emit=report`.
  void addReport(const std::string &title, std::string text) {
    reports_.push_back({title, std::move(text)});
  }
  const std::vector<std::pair<std::string, std::string>> &reports() const { return reports_; }

  /// Graphviz node colours chosen by a pass (node -> colour), for `--emit=dot`.
  std::map<const Node *, std::string> dotColors;

  /// Remarks printed to stderr (one line each) when not empty.
  std::vector<std::string> remarks;
  /// Warnings printed to stderr (one line each): something the user most
  /// likely did not mean, which the pass did anyway.
  std::vector<std::string> warnings;

  /// What autodiff chose to train (for the driver's summary line).
  struct Trained {
    size_t tensors = 0;
    int64_t elements = 0;
  };
  std::optional<Trained> trained;

private:
  std::vector<std::pair<std::string, std::string>> reports_;
};

//===----------------------------------------------------------------------===//
// Pass
//===----------------------------------------------------------------------===//

class Pass {
public:
  virtual ~Pass() = default;
  virtual llvm::StringRef name() const = 0;
  virtual llvm::Error run(Graph &g, PassContext &ctx) = 0;
};

struct PassInfo {
  std::string name;
  std::string summary;
  std::vector<OptionSpec> options;
  /// The option set by `--<name>=<value>` when the value has no '='.
  std::string mainOption;
  std::function<std::unique_ptr<Pass>(const PassOptions &)> create;
};

class PassRegistry {
public:
  static void add(PassInfo info);
  static const PassInfo *lookup(llvm::StringRef name);
  /// All registered passes, sorted by name.
  static std::vector<const PassInfo *> all();
};

/// Registers a pass at static-initialization time of its translation unit;
/// passes/Passes.cpp references every pass so none is dropped by the linker.
struct PassRegistration {
  explicit PassRegistration(PassInfo info) { PassRegistry::add(std::move(info)); }
};

//===----------------------------------------------------------------------===//
// Pass manager
//===----------------------------------------------------------------------===//

class PassManager {
public:
  void addPass(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  /// Adds a registered pass by name with textual options.
  llvm::Error addPass(llvm::StringRef name, llvm::StringRef options = "");
  /// Parses "p1,p2{opt=v,opt2=w}" and appends its passes. `rewrite`, when
  /// given, may amend each pass's option text (the driver adds forwarded flags).
  llvm::Error addPipeline(
      llvm::StringRef pipeline,
      const std::function<std::string(llvm::StringRef, llvm::StringRef)> &rewrite = nullptr);

  bool verifyEach = false;
  /// When set, the graph is printed here after every pass.
  llvm::raw_ostream *printAfterAll = nullptr;
  /// When set, each pass run is timed with the timer it returns for the
  /// pass's name (amp-opt --time-passes); a pass that runs twice adds up.
  std::function<llvm::Timer *(llvm::StringRef pass)> timerFor;

  llvm::Error run(Graph &g, PassContext &ctx);
  size_t size() const { return passes_.size(); }
  bool contains(llvm::StringRef name) const {
    return std::any_of(passes_.begin(), passes_.end(),
                       [&](const std::unique_ptr<Pass> &p) { return p->name() == name; });
  }

private:
  std::vector<std::unique_ptr<Pass>> passes_;
};

/// Full verification: structure (IR/Verifier.h) and operator types.
llvm::Error verifyGraphAndTypes(const Graph &g);

} // namespace ampc
