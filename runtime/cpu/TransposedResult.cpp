//===- TransposedResult.cpp - MatMuls writing the Transpose after them ----===//

#include "TransposedResult.h"

#include "NormEpilogue.h"

#include "ampc/rt/PlanFile.h"
#include "ampc/rt/PlanQueries.h"

#include <algorithm>

namespace ampc::rt::cpu {

namespace {

/// Whether step `s` reads or writes a byte of tensor `z`.
bool touches(const plan::Plan &p, const plan::Step &s, int z) {
  for (const auto *ids : {&s.inputs(), &s.outputs()})
    for (int id : *ids)
      if (id >= 0 && (!planValidTensor(p, id) || planTensorsMayOverlap(p, id, z)))
        return true;
  return false;
}

/// The Transpose's permutation, when it names each of `rank` axes once and
/// keeps the last one last; empty otherwise.
std::vector<int64_t> lastAxisKept(const plan::Step &t, int64_t rank) {
  std::vector<int64_t> perm;
  for (const plan::Attribute &a : t.attrs())
    if (a.name() == "perm")
      perm.assign(a.ints().values().begin(), a.ints().values().end());
  if (static_cast<int64_t>(perm.size()) != rank || perm.back() != rank - 1)
    return {};
  std::vector<char> seen(rank, 0);
  for (int64_t a : perm)
    if (a < 0 || a >= rank || seen[a]++)
      return {};
  return perm;
}

TransposedResult resultOf(const plan::Plan &p, const plan::Program &prog, int m) {
  const plan::Step &mm = prog.steps(m);
  if (mm.op() != "MatMul" || mm.outputs_size() != 1 || !planValidTensor(p, mm.outputs(0)))
    return {};
  int y = mm.outputs(0);
  const plan::Tensor &yt = p.tensors(y);
  int64_t rank = yt.shape_size();
  if (rank < 3 || (yt.type() != plan::F32 && yt.type() != plan::BF16) || yt.has_view_of() ||
      yt.storage() != plan::ARENA || planTensorUses(p, y, -1) != 1)
    return {};
  int t = m + 1;
  while (t < prog.steps_size() &&
         std::find(prog.steps(t).inputs().begin(), prog.steps(t).inputs().end(), y) ==
             prog.steps(t).inputs().end())
    ++t;
  if (t == prog.steps_size())
    return {};
  const plan::Step &tr = prog.steps(t);
  if (tr.op() != "Transpose" || tr.inputs_size() != 1 || tr.outputs_size() != 1 ||
      !planValidTensor(p, tr.outputs(0)))
    return {};
  int z = tr.outputs(0);
  const plan::Tensor &zt = p.tensors(z);
  std::vector<int64_t> perm = lastAxisKept(tr, rank);
  if (perm.empty() || zt.type() != yt.type() || zt.shape_size() != rank || zt.has_view_of() ||
      zt.storage() != plan::ARENA)
    return {};
  for (int64_t d = 0; d < rank; ++d)
    if (zt.shape(d) != yt.shape(perm[d]))
      return {};
  for (int s = m; s < t; ++s)
    if (touches(p, prog.steps(s), z))
      return {};
  // Z[..., i_{perm[d]}, ...] = Y[i]: axis perm[d] of Y walks Z's axis d.
  TransposedResult r{t, std::vector<int64_t>(rank)};
  int64_t stride = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    r.strides[perm[d]] = stride;
    stride *= zt.shape(d);
  }
  return r;
}

} // namespace

std::vector<TransposedResult> transposedResults(const plan::Plan &p, const plan::Program &prog) {
  std::vector<TransposedResult> out(prog.steps_size());
  if (cpuEpiloguesOff())
    return out;
  for (int m = 0; m < prog.steps_size(); ++m)
    out[m] = resultOf(p, prog, m);
  return out;
}

} // namespace ampc::rt::cpu
