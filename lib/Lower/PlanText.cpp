//===- PlanText.cpp - Human-readable plans ---------------------------------===//

#include "ampc/Lower/Lower.h"

#include "ampc/rt/PlanFile.h"

#include "plan.pb.h"

namespace ampc {

namespace {

std::string typeStr(const plan::Tensor &t) {
  std::string s = rt::planElemTypeName(t.type());
  s += "[";
  for (int i = 0; i < t.shape_size(); ++i)
    s += (i ? "," : "") + std::to_string(t.shape(i));
  return s + "]";
}

std::string ref(const plan::Plan &p, int id) {
  if (id < 0)
    return "_";
  return "%" + std::to_string(id);
}

const char *storageName(const plan::Tensor &t) {
  if (t.has_view_of())
    return "view";
  switch (t.storage()) {
  case plan::ARENA:
    return "arena";
  case plan::STATE:
    return "state";
  case plan::CONSTANT:
    return "const";
  case plan::VIRTUAL:
    return "fused";
  default:
    return "?";
  }
}

} // namespace

void printPlanText(const plan::Plan &p, llvm::raw_ostream &os) {
  os << "plan version " << p.version() << " (" << p.producer() << ")\n";
  for (const auto &[k, v] : std::map<std::string, std::string>(p.info().begin(), p.info().end()))
    os << "info " << k << " = " << v << "\n";
  unsigned counts[5] = {0, 0, 0, 0, 0};
  for (const plan::Tensor &t : p.tensors())
    ++counts[t.has_view_of() ? 4 : std::min<int>(t.storage(), 3)];
  os << "tensors: " << p.tensors_size() << " (" << counts[0] << " arena, " << counts[1]
     << " state, " << counts[2] << " constant, " << counts[3] << " fused away, " << counts[4]
     << " views)\n";
  for (int i = 0; i < p.tensors_size(); ++i)
    if (p.tensors(i).has_cast_of())
      os << "  state " << ref(p, i) << " " << typeStr(p.tensors(i)) << " = conversion of "
         << ref(p, p.tensors(i).cast_of()) << ", made at load\n";
  for (const plan::Program &prog : p.programs()) {
    os << "program " << prog.name() << ": " << prog.steps_size() << " steps, " << prog.launches()
       << " kernel launches\n";
    for (const plan::Binding &b : prog.inputs()) {
      os << "  input " << b.name() << " " << ref(p, b.tensor()) << " "
         << typeStr(p.tensors(b.tensor()));
      if (b.has_default())
        os << " (has a default)";
      os << "\n";
    }
    for (const plan::Binding &b : prog.outputs()) {
      os << "  output " << b.name() << " " << ref(p, b.tensor()) << " "
         << typeStr(p.tensors(b.tensor()));
      if (b.has_widen_to())
        os << " (read as " << rt::planElemTypeName(b.widen_to()) << ")";
      os << "\n";
    }
    for (int s = 0; s < prog.steps_size(); ++s) {
      const plan::Step &step = prog.steps(s);
      os << "  " << s << ": ";
      for (int i = 0; i < step.outputs_size(); ++i)
        os << (i ? ", " : "") << ref(p, step.outputs(i));
      os << " = " << step.op();
      if (step.op() == "ampc.Fused") {
        os << "{";
        for (int i = 0; i < step.fused().instructions_size(); ++i)
          os << (i ? "," : "") << step.fused().instructions(i).op();
        os << "}";
      }
      // Operands a MatMul reads transposed (folded Transposes).
      std::string flags;
      for (const plan::Attribute &a : step.attrs())
        if ((a.name() == "transA" || a.name() == "transB") && a.i() == 1)
          flags += (flags.empty() ? "" : ",") + a.name();
      if (!flags.empty())
        os << "<" << flags << ">";
      os << "(";
      for (int i = 0; i < step.inputs_size(); ++i)
        os << (i ? ", " : "") << ref(p, step.inputs(i));
      os << ")";
      if (step.outputs_size() && step.outputs(0) >= 0)
        os << "  # " << typeStr(p.tensors(step.outputs(0)));
      os << "  '" << step.name() << "'\n";
    }
    for (const plan::StateUpdate &u : prog.updates()) {
      const plan::Tensor &upd = p.tensors(u.updated());
      bool inPlace = upd.has_view_of() && upd.view_of() == u.state();
      os << "  update " << p.tensors(u.state()).name() << " <- " << ref(p, u.updated())
         << (inPlace ? " (in place)" : " (copy)") << "\n";
    }
  }
  os << "tensor table:\n";
  for (int i = 0; i < p.tensors_size(); ++i) {
    const plan::Tensor &t = p.tensors(i);
    os << "  " << ref(p, i) << " " << typeStr(t) << " " << storageName(t);
    if (t.has_view_of())
      os << " of " << ref(p, t.view_of());
    else if (t.storage() == plan::ARENA)
      os << " @" << t.offset() << "+" << rt::planTensorBytes(t);
    os << "  '" << t.name() << "'\n";
  }
  const plan::MemoryStats &m = p.memory();
  os << "state: " << m.state_bytes() << " bytes, constants: " << m.constant_bytes() << " bytes\n";
  os << "temporaries: " << m.arena_bytes() - m.io_bytes() << " bytes (arena without the "
     << m.io_bytes() << " bytes of program inputs and outputs)\n";
  os << "activations: " << m.saved_activation_bytes()
     << " bytes (kept from the forward pass for the backward pass)\n";
  os << "arena: " << m.arena_bytes() << " bytes, lower bound " << m.lower_bound_bytes()
     << " bytes (peak live), unplanned " << m.unplanned_bytes() << " bytes (sum of all buffers)\n";
}

} // namespace ampc
