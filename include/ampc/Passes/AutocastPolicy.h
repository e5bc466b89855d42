//===- AutocastPolicy.h - Which ops autocast runs in low precision -*- C++ -*-===//
//
// The precision policy of the autocast pass: four classes of operators (as in
// TensorFlow's auto_mixed_precision) plus per-node overrides. The defaults and
// their sources are explained in docs/precision-policy.md, which also
// documents the policy file format parsed here.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ampc {

/// ALLOW: always low precision. DENY: always fp32. INFER: low precision only
/// when its neighbours paint it so. CLEAR: type-agnostic, follows neighbours.
enum class PrecisionClass { Allow, Deny, Infer, Clear };

/// "allow", "deny", "infer" or "clear".
llvm::StringRef precisionClassName(PrecisionClass c);

/// Where a policy entry came from, for the report: "default", "--fp32-ops",
/// "policy.txt:3"...
struct PolicyEntry {
  PrecisionClass cls;
  std::string origin;
};

/// A node forced to one precision by the user.
struct ForcedNode {
  bool lowPrecision;
  std::string origin; ///< "--fp32-nodes", "policy.txt:7"...
};

class AutocastPolicy {
public:
  /// The default lists of docs/precision-policy.md.
  static AutocastPolicy defaults();

  /// Puts `op` in `cls`, taking it off any other list. `op` is an operator
  /// name ("MatMul", "ampc.Foo" for another domain) or a prefix pattern
  /// ending in '*' ("Reduce*"); exact names win over patterns.
  void setClass(const std::string &op, PrecisionClass cls, std::string origin);
  /// Takes `op` (a name or pattern) off every list: it becomes an op on no
  /// list, which autocast keeps in fp32.
  void unlist(const std::string &op, std::string origin);
  /// The class of an operator given as Node::qualifiedOpType(); nullopt when
  /// it is on no list.
  std::optional<PolicyEntry> classify(const std::string &qualifiedOp) const;
  /// The names and patterns in a class, sorted (for documentation and tests).
  std::vector<std::string> entries(PrecisionClass cls) const;

  /// Forces the node named `name` to fp32 or to low precision. Forcing one
  /// node both ways is an error.
  llvm::Error forceNode(const std::string &name, bool lowPrecision, std::string origin);
  const std::map<std::string, ForcedNode> &forcedNodes() const { return forced_; }

  /// Applies a policy file (format in docs/precision-policy.md) on top of
  /// this policy. Errors name the file and line.
  llvm::Error applyFile(const std::string &path);
  /// Same, from text; `source` names it in errors and origins.
  llvm::Error applyText(llvm::StringRef text, llvm::StringRef source);

  /// Where the policy came from: "default lists", "default lists + p.txt"...
  const std::vector<std::string> &sources() const { return sources_; }
  void addSource(std::string s) { sources_.push_back(std::move(s)); }

private:
  /// nullopt: explicitly taken off every list (hides a matching pattern).
  std::map<std::string, std::optional<PolicyEntry>> exact_;
  /// Prefix (without the '*') -> entry.
  std::map<std::string, PolicyEntry> patterns_;
  std::map<std::string, ForcedNode> forced_;
  std::vector<std::string> sources_;
};

} // namespace ampc
