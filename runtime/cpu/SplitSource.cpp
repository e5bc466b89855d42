//===- SplitSource.cpp - Transposes reading a Split's operand -------------===//

#include "SplitSource.h"

#include "NormEpilogue.h"

#include "ampc/rt/PlanFile.h"
#include "ampc/rt/PlanQueries.h"

namespace ampc::rt::cpu {

namespace {

/// The tensor through which `y` is read: y itself, or its one view.
int readAs(const plan::Plan &p, int y) {
  if (planTensorUses(p, y, -1) != 1)
    return -1;
  for (int i = 0; i < p.tensors_size(); ++i)
    if (p.tensors(i).has_view_of() && p.tensors(i).view_of() == y)
      return planTensorUses(p, i, -1) == 1 ? i : -1;
  return y;
}

/// Strides in the operand (last dim `rowLength`) of each axis of the part's
/// view `v`, whose parts are `chunk` long: empty when an axis of v spans the
/// end of a part's row.
std::vector<int64_t> stridesIn(const plan::Tensor &v, int64_t chunk, int64_t rowLength) {
  int rank = v.shape_size();
  std::vector<int64_t> strides(rank);
  int64_t inner = 1;
  int d = rank - 1;
  for (; d >= 0 && inner < chunk; --d) {
    strides[d] = inner;
    inner *= v.shape(d);
  }
  if (inner != chunk)
    return {};
  for (int64_t rows = rowLength; d >= 0; --d) {
    strides[d] = rows;
    rows *= v.shape(d);
  }
  return strides;
}

/// The SplitSources of the Transposes reading Split step `s`, or none.
std::vector<std::pair<int, SplitSource>> sourcesOf(const plan::Plan &p, const plan::Program &prog,
                                                   int s, const std::vector<int> &soleReaders) {
  const plan::Step &split = prog.steps(s);
  if (split.op() != "Split" || split.inputs_size() < 1 || !planValidTensor(p, split.inputs(0)) ||
      split.outputs_size() < 1)
    return {};
  int x = split.inputs(0);
  const plan::Tensor &xt = p.tensors(x);
  int rank = xt.shape_size();
  int64_t axis = -1;
  for (const plan::Attribute &a : split.attrs())
    if (a.name() == "axis")
      axis = a.i() < 0 ? a.i() + rank : a.i();
  if (rank < 1 || axis != rank - 1 || xt.storage() != plan::ARENA || planNumElements(xt) == 0)
    return {};
  int64_t rowLength = xt.shape(rank - 1), offset = 0;
  std::vector<std::pair<int, SplitSource>> out;
  for (int y : split.outputs()) {
    if (!planValidTensor(p, y))
      return {};
    const plan::Tensor &yt = p.tensors(y);
    if (yt.type() != xt.type() || yt.shape_size() != rank || yt.has_view_of() ||
        yt.storage() != plan::ARENA)
      return {};
    // The Split kernel, not run, would have checked the parts' shapes: a
    // corrupt plan must not make a Transpose gather past the operand.
    for (int d = 0; d + 1 < rank; ++d)
      if (yt.shape(d) != xt.shape(d))
        return {};
    int64_t chunk = yt.shape(rank - 1);
    int v = readAs(p, y);
    int t = v < 0 ? -1 : soleReaders[v];
    if (t <= s || prog.steps(t).op() != "Transpose" || prog.steps(t).inputs_size() != 1 ||
        chunk == 0)
      return {};
    if (planNumElements(p.tensors(v)) != planNumElements(yt))
      return {};
    std::vector<int64_t> strides = stridesIn(p.tensors(v), chunk, rowLength);
    if (strides.empty())
      return {};
    for (int w = s + 1; w <= t; ++w)
      if (planStepWrites(p, prog.steps(w), x))
        return {};
    out.push_back({t, SplitSource{x, offset, std::move(strides), s}});
    offset += chunk;
  }
  return offset == rowLength ? out : std::vector<std::pair<int, SplitSource>>{};
}

} // namespace

std::vector<SplitSource> splitSources(const plan::Plan &p, const plan::Program &prog) {
  std::vector<SplitSource> out(prog.steps_size());
  if (cpuEpiloguesOff())
    return out;
  std::vector<int> soleReaders = planSoleReaders(p, prog);
  for (int s = 0; s < prog.steps_size(); ++s)
    for (auto &[t, src] : sourcesOf(p, prog, s, soleReaders))
      out[t] = std::move(src);
  return out;
}

} // namespace ampc::rt::cpu
