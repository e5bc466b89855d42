//===- AmpOpt.cpp - amp-opt: import, run passes, emit ----------------------===//

#include "ampc/Driver/Driver.h"

#include "ampc/IR/Dot.h"
#include "ampc/IR/Printer.h"
#include "ampc/IR/Verifier.h"
#include "ampc/Lower/Lower.h"
#include "plan.pb.h"
#include "ampc/ONNX/Export.h"
#include "ampc/ONNX/Import.h"
#include "ampc/ONNX/ProtoConversion.h"
#include "ampc/ONNX/Schemas.h"
#include "ampc/Pass/Pass.h"
#include "ampc/Passes/Passes.h"
#include "ampc/Support/Error.h"
#include "ampc/rt/PlanFile.h"
#include "ampc/rt/Printable.h"

#include "onnx/onnx_pb.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <deque>
#include <future>
#include <map>
#include <unordered_set>

namespace cl = llvm::cl;

namespace ampc {

namespace {

cl::OptionCategory kGeneral("amp-opt options");
cl::OptionCategory kPasses("Passes (each runs where it appears on the command line)");

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx | model.onnxtxt | ->"),
                               cl::Required, cl::cat(kGeneral));
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"), cl::cat(kGeneral));
cl::opt<std::string> emit("emit",
                          cl::desc("What to write: onnxtxt (default), onnx, report, dot, plan, "
                                   "plan-text"),
                          cl::value_desc("kind"), cl::init(""), cl::cat(kGeneral));
cl::list<std::string> pipelines("pass-pipeline",
                                cl::desc("A pass pipeline, e.g. 'canonicalize,cse'"),
                                cl::value_desc("pipeline"), cl::cat(kGeneral));
cl::opt<bool> printAfterAll("print-ir-after-all", cl::desc("Print the graph after every pass"),
                            cl::cat(kGeneral));
cl::opt<bool> timePasses("time-passes",
                         cl::desc("Time each pass and the lowering; print the table on stderr"),
                         cl::cat(kGeneral));
cl::opt<bool> verifyEach("verify-each",
                         cl::desc("Verify the graph (structure and types) after every pass"),
                         cl::cat(kGeneral));
cl::opt<bool> printFullData("print-full-data",
                            cl::desc("Print every initializer's values (no summaries)"),
                            cl::cat(kGeneral));
cl::list<std::string> shapes("shape", cl::desc("Static shape of a graph input: NAME=d0,d1,..."),
                             cl::value_desc("NAME=dims"), cl::cat(kGeneral));
cl::opt<bool> splitInputFile(
    "split-input-file",
    cl::desc("Split the ONNX text input at '# -----' lines and process each part on its own"),
    cl::cat(kGeneral));
cl::opt<int64_t> batch("batch", cl::desc("Bind the first dimension of every graph input"),
                       cl::value_desc("N"), cl::init(-1), cl::cat(kGeneral));

cl::opt<std::string> precision(
    "precision",
    cl::desc("fp16 or bf16: run autocast here (fp32: no autocast). With --train it picks the "
             "precision of the training step"),
    cl::value_desc("fp32|fp16|bf16"), cl::init(""), cl::cat(kGeneral));

cl::opt<bool> train(
    "train",
    cl::desc("Build the whole training step: canonicalize, decompose, autocast (with "
             "--precision=fp16|bf16), "
             "autodiff, accumulate (with --accumulate=N), loss-scale, optimizer, canonicalize, "
             "cast-cache (fp16/bf16, unless --no-cast-cache), remat, split-matmul-transposes, "
             "fold-matmul-bias. "
             "--loss-scale=..., --optimizer=... and --accumulate=... then set those stages"),
    cl::cat(kGeneral));

cl::opt<bool> noCastCache(
    "no-cast-cache",
    cl::desc("With --train in fp16/bf16: cast the parameters every step instead of keeping "
             "their low-precision copies as state (the cast-cache pass: faster, 2 bytes of "
             "state per parameter)"),
    cl::cat(kGeneral));

/// Top-level flags that set an option of a pass wherever that pass runs (from
/// its own flag, a pipeline string, --precision or --train), unless the pass's
/// own option text sets it. Passes own the meaning; this table only routes.
struct ForwardedFlag {
  const char *flag;
  const char *pass;
  const char *option;
  const char *help;
};
const ForwardedFlag kForwardedFlags[] = {
    {"policy", "autocast", "policy", "Autocast policy file (see docs/precision-policy.md)"},
    {"fp32-ops", "autocast", "fp32-ops", "Operators autocast keeps in fp32: A,B,..."},
    {"lowp-ops", "autocast", "lowp-ops", "Operators autocast runs in low precision: A,B,..."},
    {"fp32-nodes", "autocast", "fp32-nodes", "Nodes (by name) autocast keeps in fp32"},
    {"lowp-nodes", "autocast", "lowp-nodes", "Nodes (by name) autocast runs in low precision"},
    {"bf16-conv", "autocast", "bf16-conv",
     "With bf16: run Conv and pooling in bf16 too (the default, as PyTorch's autocast does; "
     "beyond ONNX opset 17's schemas)"},
    {"onnx17-types", "autocast", "onnx17-types",
     "Keep every op in a type its opset-17 schema allows (with bf16, Conv and pooling stay "
     "fp32), so that --emit=onnx writes checker-valid ONNX"},
    {"loss", "autodiff", "loss", "The loss to differentiate (a scalar float graph output)"},
    {"params", "autodiff", "params", "Parameters to train: all, or n1,n2,..."},
    {"freeze", "autodiff", "freeze", "Parameters not to train: n1,n2,..."},
    {"loss-scale-init", "loss-scale", "init", "Initial loss scale (65536)"},
    {"loss-scale-growth-factor", "loss-scale", "growth-factor", "Loss scale growth factor (2)"},
    {"loss-scale-backoff", "loss-scale", "backoff", "Loss scale backoff factor (0.5)"},
    {"loss-scale-growth-interval", "loss-scale", "growth-interval",
     "Clean steps before the loss scale grows (2000)"},
    {"loss-scale-min", "loss-scale", "min", "Smallest loss scale (default: none)"},
    {"lr", "optimizer", "lr", "Learning rate (the default of the step's 'lr' input)"},
    {"momentum", "optimizer", "momentum", "SGD momentum"},
    {"dampening", "optimizer", "dampening", "SGD dampening"},
    {"nesterov", "optimizer", "nesterov", "SGD Nesterov momentum"},
    {"weight-decay", "optimizer", "weight-decay", "Weight decay (sgd: 0, adamw: 0.01)"},
    {"beta1", "optimizer", "beta1", "AdamW beta1 (0.9)"},
    {"beta2", "optimizer", "beta2", "AdamW beta2 (0.999)"},
    {"eps", "optimizer", "eps", "AdamW epsilon (1e-8)"},
    {"clip-grad-norm", "optimizer", "clip-grad-norm", "Clip gradients to this global L2 norm"},
};

/// The cl::opt objects of kForwardedFlags, created in ampOptMain.
std::vector<std::unique_ptr<cl::opt<std::string>>> &forwardedOpts() {
  static std::vector<std::unique_ptr<cl::opt<std::string>>> opts;
  return opts;
}

/// `options` (a pass's own option text) plus the forwarded flags for `pass`
/// that the text does not set.
/// A flag's value as one pass option: quoted when it is empty or holds a
/// separator, '=', a bracket or a quote (a loss named 'total loss' was two
/// options, and --loss='l1 params=w' set a second option).
std::string quoteOptionValue(const std::string &value) {
  if (!value.empty() && value.find_first_of(" ,=[]'\"") == std::string::npos)
    return value;
  char quote = value.find('"') == std::string::npos ? '"' : '\'';
  return quote + value + quote;
}

std::string withForwardedOptions(llvm::StringRef pass, llvm::StringRef options) {
  const PassInfo *info = PassRegistry::lookup(pass);
  std::string out = options.trim().str();
  // A bare value sets the pass's main option: spell it out before appending.
  if (info && !out.empty() && !llvm::StringRef(out).contains('=') && !info->mainOption.empty())
    out = info->mainOption + "=" + quoteOptionValue(out);
  for (size_t i = 0; i < std::size(kForwardedFlags); ++i) {
    const ForwardedFlag &f = kForwardedFlags[i];
    const cl::opt<std::string> &opt = *forwardedOpts()[i];
    if (pass != f.pass || !opt.getNumOccurrences())
      continue;
    if (!info || std::none_of(info->options.begin(), info->options.end(),
                              [&](const OptionSpec &s) { return s.name == f.option; }))
      continue; // the pass does not (yet) take this option
    if (llvm::StringRef(" " + out).contains(" " + std::string(f.option) + "=") ||
        llvm::StringRef("," + out).contains("," + std::string(f.option) + "="))
      continue;
    auto spec = std::find_if(info->options.begin(), info->options.end(),
                             [&](const OptionSpec &s) { return s.name == f.option; });
    std::string value = opt.getValue();
    if (spec->type == OptionType::Bool && value.empty())
      value = "true"; // --nesterov alone
    else if (spec->type == OptionType::List && llvm::StringRef(value).contains(','))
      value = "[" + value + "]";
    else
      value = quoteOptionValue(value);
    out += (out.empty() ? "" : " ") + std::string(f.option) + "=" + value;
  }
  return out;
}

int fail(const llvm::Twine &msg) {
  llvm::WithColor::error(llvm::errs(), "amp-opt") << rt::printable(msg.str()) << "\n";
  return 1;
}

int fail(llvm::Error err) { return fail(llvm::toString(std::move(err))); }

llvm::Expected<ImportOptions> importOptions() {
  ImportOptions opts;
  for (const std::string &s : shapes) {
    auto [name, dims] = llvm::StringRef(s).split('=');
    if (name.empty() || !llvm::StringRef(s).contains('='))
      return makeError("--shape expects NAME=d0,d1,..., got '" + s + "'");
    auto shape = parseShapeList(dims);
    if (!shape)
      return withContext(shape.takeError(), "--shape " + s);
    opts.shapes[name.str()] = *shape;
  }
  if (batch.getNumOccurrences()) {
    if (batch <= 0)
      return makeError("--batch must be positive");
    opts.batch = batch;
  }
  return opts;
}

/// One pass flag or --pass-pipeline occurrence, in command-line order.
struct PipelineItem {
  unsigned position;
  std::string pass;     ///< a pass name, or empty for a pipeline string
  std::string argument; ///< pass options or the pipeline text
};

/// The passes of --train; their own flags give their options.
const char *const kTrainStages[] = {"autodiff", "accumulate", "data-parallel", "loss-scale",
                                    "optimizer", "remat"};

/// A flag forwarded to a pass the pipeline does not run would do nothing
/// (--bf16-conv without bf16, --fp32-ops with --train at fp32): say so.
llvm::Error checkForwardedFlagsUsed(const PassManager &pm) {
  for (size_t i = 0; i < std::size(kForwardedFlags); ++i) {
    const ForwardedFlag &f = kForwardedFlags[i];
    if (forwardedOpts()[i]->getNumOccurrences() && !pm.contains(f.pass))
      return makeError(std::string("--") + f.flag + " is an option of the " + f.pass +
                       " pass, which this pipeline does not run" +
                       (llvm::StringRef(f.pass) == "autocast"
                            ? " (it runs with --precision=fp16 or bf16)"
                            : ""));
  }
  return llvm::Error::success();
}

llvm::Error buildTrainPipeline(PassManager &pm,
                               const std::vector<std::unique_ptr<cl::list<std::string>>> &passFlags) {
  std::map<std::string, std::string> stageOptions;
  for (const auto &flag : passFlags) {
    if (flag->empty())
      continue;
    std::string name = flag->ArgStr.str();
    if (std::find(std::begin(kTrainStages), std::end(kTrainStages), name) == std::end(kTrainStages))
      return makeError("--train builds the whole pipeline; --" + name + " cannot be added to it");
    stageOptions[name] = (*flag)[flag->size() - 1];
  }
  if (!pipelines.empty())
    return makeError("--train builds the whole pipeline; it cannot be combined with --pass-pipeline");
  if (precision.getNumOccurrences() && precision != "fp32" && precision != "fp16" &&
      precision != "bf16")
    return makeError("--precision must be fp32, fp16 or bf16, got '" + precision + "'");
  auto add = [&](llvm::StringRef name, std::string options) {
    return pm.addPass(name, withForwardedOptions(name, options));
  };
  if (auto err = add("canonicalize", ""))
    return err;
  if (auto err = add("decompose", ""))
    return err;
  if (precision == "fp16" || precision == "bf16")
    if (auto err = add("autocast", "dtype=" + precision.getValue()))
      return err;
  if (auto err = add("autodiff", stageOptions["autodiff"]))
    return err;
  if (stageOptions.count("accumulate"))
    if (auto err = add("accumulate", stageOptions["accumulate"]))
      return err;
  if (stageOptions.count("data-parallel"))
    if (auto err = add("data-parallel", stageOptions["data-parallel"]))
      return err;
  if (auto err = add("loss-scale", stageOptions["loss-scale"]))
    return err;
  if (auto err = add("optimizer", stageOptions["optimizer"]))
    return err;
  if (auto err = add("canonicalize", ""))
    return err;
  if ((precision == "fp16" || precision == "bf16") && !noCastCache)
    if (auto err = add("cast-cache", ""))
      return err;
  if (auto err = add("remat", stageOptions["remat"]))
    return err;
  if (auto err = add("split-matmul-transposes", ""))
    return err;
  return add("fold-matmul-bias", "");
}

llvm::Error buildPipeline(PassManager &pm,
                          const std::vector<std::unique_ptr<cl::list<std::string>>> &passFlags) {
  if (train)
    return buildTrainPipeline(pm, passFlags);
  std::vector<PipelineItem> items;
  for (const auto &flag : passFlags)
    for (unsigned i = 0; i < flag->size(); ++i)
      items.push_back({flag->getPosition(i), flag->ArgStr.str(), (*flag)[i]});
  for (unsigned i = 0; i < pipelines.size(); ++i)
    items.push_back({pipelines.getPosition(i), "", pipelines[i]});
  if (precision.getNumOccurrences()) {
    if (precision != "fp32" && precision != "fp16" && precision != "bf16")
      return makeError("--precision must be fp32, fp16 or bf16, got '" + precision + "'");
    if (precision != "fp32")
      items.push_back({precision.getPosition(), "autocast", "dtype=" + precision});
  }
  std::sort(items.begin(), items.end(),
            [](const PipelineItem &a, const PipelineItem &b) { return a.position < b.position; });
  for (const PipelineItem &item : items) {
    llvm::Error err = item.pass.empty()
                          ? pm.addPipeline(item.argument, withForwardedOptions)
                          : pm.addPass(item.pass, withForwardedOptions(item.pass, item.argument));
    if (err)
      return err;
  }
  return llvm::Error::success();
}

std::string defaultEmit() {
  if (!emit.empty())
    return emit;
  if (llvm::StringRef(outputFile).endswith(".plan"))
    return "plan";
  return llvm::StringRef(outputFile).endswith(".onnx") ? "onnx" : "onnxtxt";
}

std::string reportText(const Graph &g, const PassContext &ctx) {
  std::string s;
  llvm::raw_string_ostream os(s);
  for (const auto &[title, text] : ctx.reports())
    os << "== " << title << "\n" << text << (llvm::StringRef(text).endswith("\n") ? "" : "\n");
  unsigned params = 0, constants = 0;
  for (const Value *v : g.initializers())
    (v->isParameter() ? params : constants)++;
  os << "== graph\n"
     << "nodes: " << g.numNodes() << ", inputs: " << g.inputs().size()
     << ", outputs: " << g.outputs().size() << ", parameters: " << params
     << ", constants: " << constants << "\n";
  if (!g.stateBindings.empty()) {
    os << "== state bindings (updated output -> state)\n";
    for (const StateBinding &b : g.stateBindings)
      os << b.updated->name() << " -> " << b.state->name() << "  # " << b.state->type().str()
         << "\n";
  }
  return os.str();
}

bool emitsPlan() { return defaultEmit() == "plan" || defaultEmit() == "plan-text"; }

/// What the plan needs from the model as imported, before any pass runs.
struct ImportedModel {
  std::vector<std::string> parameters;
  std::shared_ptr<onnx::ModelProto> model;
  /// The ONNX checker and strict shape inference on `model` (the model of
  /// --export-onnx), run on a second thread while the passes run: it reads
  /// the snapshot only, and was 6% of compiling a graph of 10,000 nodes.
  /// Empty when the model passed.
  std::shared_future<std::string> check;

  llvm::Error waitForCheck() const {
    if (!check.valid())
      return llvm::Error::success();
    std::string error = check.get();
    return error.empty() ? llvm::Error::success() : makeError(error);
  }
};

llvm::Expected<ImportedModel> snapshotImport(const Graph &g) {
  ImportedModel m;
  for (const Value *v : g.initializers())
    if (v->isParameter())
      m.parameters.push_back(v->name());
  // The parameters' values stay out of the snapshot: the trained ones are
  // the plan's state, the others are filled in from the graph at the end.
  // (GPT-2 small: 0.5 GB less held through every pass.)
  std::unordered_set<std::string> dataless;
  for (const Value *v : g.initializers())
    if (v->isParameter() && v->hasUses())
      dataless.insert(v->name());
  m.model = std::make_shared<onnx::ModelProto>();
  graphToModelProto(g, *m.model, &dataless);
  registerAmpcSchemas(); // before a second thread reads the registry
  m.check = std::async(std::launch::async, [model = m.model] {
              llvm::Error err = checkModelProto(*model);
              return err ? llvm::toString(std::move(err)) : std::string();
            }).share();
  return m;
}

/// --time-passes: one timer per pass name and for the lowering steps, all in
/// one group whose table LLVM prints on stderr when the last timer goes (the
/// map is destroyed at exit, before the group it was created after).
std::map<std::string, std::unique_ptr<llvm::Timer>> &driverTimers() {
  static std::map<std::string, std::unique_ptr<llvm::Timer>> timers;
  return timers;
}

llvm::Timer *timerFor(llvm::StringRef name) {
  if (!timePasses)
    return nullptr;
  static llvm::TimerGroup group("amp-opt", "amp-opt pass and lowering times");
  std::unique_ptr<llvm::Timer> &t = driverTimers()[name.str()];
  if (!t)
    t = std::make_unique<llvm::Timer>(name, name, group);
  return t.get();
}

/// Gives the snapshot's parameters that the plan does not train their values
/// back, from the graph (the trained ones are the plan's state).
llvm::Error fillUntrainedParameters(const Graph &g, const plan::Plan &p, onnx::ModelProto &model) {
  std::unordered_set<std::string> trained;
  for (const plan::Parameter &param : p.parameters())
    trained.insert(param.onnx_name());
  for (onnx::TensorProto &init : *model.mutable_graph()->mutable_initializer()) {
    if (trained.count(init.name()) || init.has_raw_data() || init.dims_size() == 0)
      continue;
    const Value *v = g.findValue(init.name());
    if (!v || !v->data())
      return makeError("parameter '" + init.name() +
                       "' is not trained and no longer in the step: its value cannot be kept "
                       "for --export-onnx");
    // A copy: tensorToProto clears the proto before it sets the name.
    std::string name = init.name();
    tensorToProto(*v->data(), name, init);
  }
  return llvm::Error::success();
}

/// The process is about to exit: freeing a graph of 100,000 nodes node by
/// node took 3% of a compile (the plan's messages 2%), for memory the OS
/// takes back at once (clang's -disable-free). Sanitizer builds free it, so
/// leak checks stay meaningful.
template <typename T> void leakAtExit(std::unique_ptr<T> g) {
#if defined(__SANITIZE_ADDRESS__)
  (void)g;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  (void)g;
#else
  (void)g.release();
#endif
#else
  (void)g.release();
#endif
}

llvm::Expected<std::string> emitPlan(const Graph &g, const ImportedModel &imported) {
  bool binary = defaultEmit() == "plan";
  if (binary && outputFile == "-")
    return makeError("--emit=plan writes a binary file: give it with -o FILE");
  LowerOptions opts;
  opts.modelParameters = imported.parameters;
  opts.info.push_back({"precision", precision.empty() ? "fp32" : precision.getValue()});
  opts.timerFor = timerFor;
  // A binary plan is written with the graph's large values in place, not
  // copied into the plan first.
  rt::ExternalValues external;
  if (binary)
    opts.externalValues = &external;
  auto p = lowerToPlan(g, opts);
  if (!p)
    return p.takeError();
  // The model for --export-onnx: the trained parameters' values are the
  // plan's state, so the model keeps their names, types and dims only.
  if (auto err = fillUntrainedParameters(g, *p, *imported.model))
    return std::move(err);
  std::vector<std::string> trained;
  for (const plan::Parameter &param : p->parameters())
    trained.push_back(param.onnx_name());
  auto model = serializeWithoutData(*imported.model, trained);
  if (!model)
    return model.takeError();
  p->set_original_model(std::move(*model));
  if (binary) {
    llvm::TimeRegion region(timerFor("serialize the plan"));
    llvm::outs().flush();
    std::string error;
    bool written = rt::writePlanFile(outputFile, *p, error, external);
    leakAtExit(std::make_unique<plan::Plan>(std::move(*p)));
    if (!written)
      return makeError(error);
    return std::string();
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  printPlanText(*p, os);
  return os.str();
}

/// The text to write for a processed graph; empty for binary ONNX, which
/// writeResult serializes itself.
llvm::Expected<std::string> emitText(const Graph &g, const PassContext &ctx) {
  std::string kind = defaultEmit();
  if (kind == "onnx") {
    if (outputFile == "-" || splitInputFile)
      return makeError("--emit=onnx writes one binary file: give it with -o FILE");
    return std::string();
  }
  std::string text;
  if (kind == "onnxtxt") {
    PrintOptions opts;
    // Files get every value so they can be read back; the terminal a summary.
    opts.elideLargeData = outputFile == "-" && !printFullData;
    text = printGraphToString(g, opts);
  } else if (kind == "report") {
    text = reportText(g, ctx);
  } else if (kind == "dot") {
    text = printDotToString(g, ctx.dotColors);
  } else {
    return makeError("unknown --emit kind '" + kind +
                     "' (onnxtxt, onnx, report, dot, plan, plan-text)");
  }
  return text;
}

llvm::Error writeResult(const Graph &g, const std::string &text) {
  if (defaultEmit() == "plan")
    return llvm::Error::success(); // emitPlan wrote the file
  if (defaultEmit() == "onnx")
    return exportModel(g, outputFile, ModelFormat::Binary);
  return writeFileAtomically(outputFile, text);
}

/// Bytes the training step keeps from step to step: parameters, optimizer
/// moments, low-precision copies, BatchNorm statistics, counters.
int64_t stateBytes(const Graph &g) {
  int64_t bytes = 0;
  for (const StateBinding &b : g.stateBindings)
    bytes += b.state->type().byteSize();
  return bytes;
}

/// Verifies (with --verify-each), runs the passes and renders the result.
llvm::Expected<std::string> process(Graph &g, PassManager &pm, const std::string &name) {
  if (verifyEach)
    if (auto err = verifyGraphAndTypes(g))
      return withContext(std::move(err), name + ": verification after import");
  ImportedModel imported;
  if (emitsPlan()) {
    auto snapshot = snapshotImport(g);
    if (!snapshot)
      return withContext(snapshot.takeError(), name);
    imported = std::move(*snapshot);
  }
  PassContext ctx;
  llvm::Error passError = pm.run(g, ctx);
  // A model the checker rejects is reported first, as when it ran before
  // the passes.
  if (auto err = imported.waitForCheck()) {
    llvm::consumeError(std::move(passError));
    return withContext(std::move(err), name);
  }
  if (passError)
    return withContext(std::move(passError), name);
  for (const std::string &remark : ctx.remarks)
    llvm::WithColor::remark(llvm::errs(), "amp-opt") << remark << "\n";
  for (const std::string &warning : ctx.warnings)
    llvm::WithColor::warning(llvm::errs(), "amp-opt") << warning << "\n";
  if (train && ctx.trained)
    llvm::errs() << "amp-opt: training " << ctx.trained->tensors << " tensors, "
                 << ctx.trained->elements << " parameters, " << stateBytes(g)
                 << " bytes of state\n";
  if (emitsPlan()) {
    auto text = emitPlan(g, imported);
    return text ? std::move(text) : withContext(text.takeError(), name);
  }
  return emitText(g, ctx);
}

/// Splits ONNX text at lines that start with "# -----".
void splitParts(llvm::StringRef text, llvm::SmallVectorImpl<llvm::StringRef> &parts) {
  size_t start = 0, pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == llvm::StringRef::npos)
      eol = text.size();
    if (text.substr(pos, eol - pos).startswith("# -----")) {
      parts.push_back(text.slice(start, pos));
      start = eol + 1;
    }
    pos = eol + 1;
  }
  if (start < text.size())
    parts.push_back(text.substr(start));
}

} // namespace

int ampOptMain(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  rt::silenceProtobufLog();
  registerAllPasses();
  std::vector<std::unique_ptr<cl::list<std::string>>> passFlags;
  // cl::desc keeps a StringRef: the texts must outlive option parsing.
  std::deque<std::string> descriptions;
  for (const PassInfo *info : PassRegistry::all()) {
    descriptions.push_back(info->summary);
    if (!info->mainOption.empty())
      descriptions.back() += " (--" + info->name + "=<" + info->mainOption + ">)";
    passFlags.push_back(std::make_unique<cl::list<std::string>>(
        llvm::StringRef(info->name), cl::desc(descriptions.back()), cl::ValueOptional,
        cl::ZeroOrMore, cl::cat(kPasses)));
  }
  for (const ForwardedFlag &f : kForwardedFlags)
    forwardedOpts().push_back(std::make_unique<cl::opt<std::string>>(
        llvm::StringRef(f.flag), cl::desc(f.help), cl::value_desc("value"), cl::ValueOptional,
        cl::cat(kGeneral)));
  cl::SetVersionPrinter([](llvm::raw_ostream &os) { os << "amp-opt (ampc) 0.1.0\n"; });
  cl::HideUnrelatedOptions({&kGeneral, &kPasses});
  cl::ParseCommandLineOptions(argc, argv,
                              "amp-opt: compile ONNX models into mixed-precision training "
                              "programs, or run any ampc pass\n");

  auto opts = importOptions();
  if (!opts)
    return fail(opts.takeError());
  PassManager pm;
  pm.verifyEach = verifyEach;
  if (timePasses)
    pm.timerFor = timerFor;
  if (printAfterAll)
    pm.printAfterAll = &llvm::errs();
  if (auto err = buildPipeline(pm, passFlags))
    return fail(std::move(err));
  // Lowering takes a canonical graph (Constant nodes folded into constants,
  // no dead nodes): a plan of a pipeline that did not end in canonicalize,
  // such as --precision=bf16 --emit=plan, gets it. --train ends in remat,
  // which canonicalize's CSE would undo, after a canonicalize of its own.
  // Both end in split-matmul-transposes and fold-matmul-bias, which
  // canonicalize would undo or leave to do.
  if (emitsPlan() && !train) {
    if (auto err = pm.addPass("canonicalize", ""))
      return fail(std::move(err));
    if (auto err = pm.addPass("split-matmul-transposes", ""))
      return fail(std::move(err));
    if (auto err = pm.addPass("fold-matmul-bias", ""))
      return fail(std::move(err));
  }
  if (auto err = checkForwardedFlagsUsed(pm))
    return fail(std::move(err));

  if (!splitInputFile) {
    auto graph = importModelFile(inputFile, *opts);
    if (!graph)
      return fail(graph.takeError());
    auto text = process(**graph, pm, inputFile);
    if (!text)
      return fail(text.takeError());
    if (auto err = writeResult(**graph, *text))
      return fail(std::move(err));
    leakAtExit(std::move(*graph));
    return 0;
  }

  // --split-input-file: each part is its own model; errors are reported per
  // part and the exit status says whether any failed. The results are text
  // joined by separators, so binary emits are refused; a file given with -o
  // is written only when every part succeeded (the terminal, as mlir-opt's,
  // shows the parts that did).
  if (defaultEmit() == "plan" || defaultEmit() == "onnx")
    return fail("--split-input-file joins the parts' results as text; --emit=" + defaultEmit() +
                " writes one binary file per model: compile the parts separately");
  auto buffer = inputFile == "-" ? llvm::MemoryBuffer::getSTDIN()
                                 : llvm::MemoryBuffer::getFile(inputFile);
  if (!buffer)
    return fail(inputFile + ": cannot read the file: " + buffer.getError().message());
  llvm::SmallVector<llvm::StringRef> parts;
  splitParts((*buffer)->getBuffer(), parts);
  if (parts.empty())
    return fail(inputFile + ": the file is empty");
  std::string combined;
  bool failed = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string name = inputFile + ":part " + std::to_string(i + 1);
    auto graph = importModelText(parts[i].str(), name, *opts);
    llvm::Expected<std::string> text =
        graph ? process(**graph, pm, name) : llvm::Expected<std::string>(graph.takeError());
    if (!text) {
      fail(text.takeError());
      failed = true;
      continue;
    }
    if (!combined.empty())
      combined += "# -----\n";
    combined += *text;
  }
  if (failed && outputFile != "-")
    return 1; // each failure has been reported; the output file stays as it was
  if (auto err = writeFileAtomically(outputFile, combined))
    return fail(std::move(err));
  return failed ? 1 : 0;
}

} // namespace ampc
