//===- TransposedResult.cpp - MatMuls writing the Transpose after them ----===//

#include "TransposedResult.h"

#include "NormEpilogue.h"

#include "ampc/rt/PlanFile.h"
#include "ampc/rt/PlanQueries.h"

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

TransposedResult resultOf(const plan::Plan &p, const plan::Program &prog, int m,
                          const std::vector<int> &soleReaders) {
  int t = planTransposeOfMatMulResult(p, prog, m, soleReaders);
  if (t < 0)
    return {};
  int y = prog.steps(m).outputs(0);
  const plan::Tensor &yt = p.tensors(y);
  int64_t rank = yt.shape_size();
  if ((yt.type() != plan::F32 && yt.type() != plan::BF16) || yt.storage() != plan::ARENA ||
      planTensorUses(p, y, -1) != 1)
    return {};
  const plan::Step &tr = prog.steps(t);
  int z = tr.outputs(0);
  const plan::Tensor &zt = p.tensors(z);
  std::vector<int64_t> perm = planLastAxisKeptPerm(tr, rank);
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
  std::vector<int> soleReaders = planSoleReaders(p, prog);
  for (int m = 0; m < prog.steps_size(); ++m)
    out[m] = resultOf(p, prog, m, soleReaders);
  return out;
}

} // namespace ampc::rt::cpu
