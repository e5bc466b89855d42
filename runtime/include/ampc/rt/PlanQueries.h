//===- PlanQueries.h - What load-time fusions ask of a plan -----*- C++ -*-===//
//
// A backend that merges two steps when it loads a plan (the CUDA GEMM's Relu
// epilogue, the CPU normalization's) must know that the bytes it writes early
// are read by no one else and clobber nothing still needed: these answer
// that from the plan alone.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "plan.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampc::rt {

/// The tensor whose storage `id` uses: itself, or the base of its views.
int planBaseTensor(const plan::Plan &p, int id);

/// Whether tensors `x` and `y` may share bytes: the same base, or arena
/// ranges that intersect (state and constants never share between tensors).
bool planTensorsMayOverlap(const plan::Plan &p, int x, int y);

/// Whether `x` and `y` are the same bytes from the same first byte (the same
/// base, or arena ranges starting at the same offset): an elementwise step
/// may then write one while it reads the other, element by element.
bool planTensorsStartTogether(const plan::Plan &p, int x, int y);

/// How many times tensor `id` is read or bound anywhere in the plan (step
/// operands, program bindings, state updates), views of it other than
/// tensor `exceptView` counted as reads.
int planTensorUses(const plan::Plan &p, int id, int exceptView);

/// Every step's results share no byte with its operands, except those of
/// the steps that may compute in place (planStepMayComputeInPlace). False
/// with a one-line error naming the step and the two tensors otherwise: a
/// corrupt plan, whose kernel would read an operand after writing over it.
bool checkStepOperandsApart(const plan::Plan &p, std::string &error);

/// Whether `id` names a tensor of the plan.
bool planValidTensor(const plan::Plan &p, int id);

/// Whether step `s` writes a byte of tensor `x` (a result that names no
/// tensor counts as writing: a corrupt plan is not trusted).
bool planStepWrites(const plan::Plan &p, const plan::Step &s, int x);

/// For each tensor id: the one step of `prog` that reads it as an operand;
/// -1 when no step does, -2 when more than one does (or one step twice).
std::vector<int> planSoleReaders(const plan::Plan &p, const plan::Program &prog);

/// Transpose step `t`'s permutation when it names each of `rank` axes once
/// and keeps the last axis last; empty otherwise.
std::vector<int64_t> planLastAxisKeptPerm(const plan::Step &t, int64_t rank);

/// The Transpose step after MatMul step `m` that alone reads its result, when that
/// result has rank 3 or more, is no view, and the Transpose keeps its last
/// axis last: a backend may have the MatMul write the Transpose's result
/// (runtime/cpu/TransposedResult.h), and the lowering keeps that result
/// alive for it. -1 otherwise. `soleReaders`: planSoleReaders(p, prog).
int planTransposeOfMatMulResult(const plan::Plan &p, const plan::Program &prog, int m,
                                const std::vector<int> &soleReaders);

/// Attribute `name` of `step`, or nullptr; its int value, or `dflt` when it
/// is missing or not an int.
const plan::Attribute *planStepAttr(const plan::Step &step, const std::string &name);
int64_t planStepAttrInt(const plan::Step &step, const std::string &name, int64_t dflt);

/// Step `t` is Relu of its one input into its one output (a Relu step, or
/// an ampc.Fused program of that one instruction).
bool isReluStep(const plan::Step &t);

/// Step `t` is an ampc.Fused program of one instruction, a Cast of its one
/// input to type `to` (bf16 for isCastToBf16Step), into its one output.
bool isCastStep(const plan::Step &t, plan::ElemType to);

/// Step `t` is one whose CPU kernel reads its input 0 (dY) as rows of any
/// float type, widened exactly (LayerNormalizationGrad, SoftmaxGrad): it may
/// be given the bf16 operand of the Cast that widens its dY instead
/// (runtime/cpu/CastPrologue.h), and the lowering keeps that operand alive
/// for it.
bool readsInput0AsAnyFloat(const plan::Step &t);
bool isCastToBf16Step(const plan::Step &t);

/// Step `t`'s program when it is an ampc.Fused step of two inputs and one
/// output computing two instructions, the second one's value the result;
/// nullptr otherwise.
const plan::FusedProgram *twoInstructionProgram(const plan::Step &t);

/// Step `t` is an ampc.Fused program computing Relu(in0 + in1) into its one
/// output, both instructions in the output's type (each rounded to it, as
/// the unfused Add and Relu would be).
bool isAddReluStep(const plan::Step &t);

} // namespace ampc::rt
