//===- PlanFile.h - Reading, writing and validating plan files --*- C++ -*-===//
#pragma once

#include "plan.pb.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ampc::rt {

/// The plan format version this runtime reads and the compiler writes.
/// Version 3 moved tensor values out of the message into a data section.
inline constexpr uint32_t kPlanVersion = 3;
inline constexpr size_t kPlanHeaderSize = 64;
/// Every value in the data section starts at a multiple of this.
inline constexpr uint64_t kPlanDataAlignment = 64;

/// Values this large or larger go to the data section; smaller ones stay
/// inline, where 64-byte alignment would waste more than it saves.
inline constexpr size_t kPlanInlineDataLimit = 256;

/// Values of the data section held outside the plan, by tensor id: the
/// compiler's own tensors, written to the file without a copy in the plan.
using ExternalValues = std::vector<std::pair<int, std::string_view>>;

/// A plan file as pieces to write one after the other: `head`, `tensors` and
/// `tail` (the header and the message), then each value of the data section
/// and its padding, pointing into the plan's tensors and the external values
/// (valid while those are alive and unchanged).
struct PlanFilePieces {
  std::string head;    // the header and the message's fields before its tensors
  std::string tensors; // the message's tensors
  std::string tail;    // the rest of the message, padded to the data section
  std::string zeros;
  std::vector<std::string_view> pieces;
};
bool planFilePieces(plan::Plan &p, const ExternalValues &external, PlanFilePieces &out,
                    std::string &error);

/// Serializes a plan: header (magic, version, sizes, CRC-32s), the message,
/// and the data section holding every value of kPlanInlineDataLimit bytes or
/// more. The values leave `p` during the call and are back in it when it
/// returns.
bool serializePlan(plan::Plan &p, std::string &bytes, std::string &error);
/// Writes a plan file atomically, piece by piece (no copy of the file in
/// memory); `external` gives the values the plan does not hold.
bool writePlanFile(const std::string &path, plan::Plan &p, std::string &error,
                   const ExternalValues &external = {});
/// Reads and checks a plan file (mapped, not read through a stream): magic,
/// version, sizes, checksums, validatePlan, then the data section's values
/// into their tensors. Errors are one line starting with the path.
bool readPlanFile(const std::string &path, plan::Plan &p, std::string &error);
/// The same from a plan file's bytes in memory (`path` names it in errors).
bool parsePlanBytes(const std::string &bytes, const std::string &path, plan::Plan &p,
                    std::string &error);
bool parsePlanBytes(const char *bytes, size_t size, const std::string &path, plan::Plan &p,
                    std::string &error);

/// Structural checks: tensor ids in range, sizes consistent with shapes and
/// element types, arena buffers inside the arena, state and constant data of
/// the right size, known programs and bindings. Errors name the tensor or step.
bool validatePlan(const plan::Plan &p, std::string &error);

/// Steps of kernel `op` compute every result element from the same element
/// of their operands only, so the lowering may give a result the bytes of an
/// operand it reads last, from the same first byte (ampc.Fused, ampc.AdamW);
/// a session refuses that for any other step (checkStepOperandsApart).
bool planStepMayComputeInPlace(const std::string &op);

/// Bytes of one element / of a whole tensor.
size_t planElemSize(plan::ElemType t);
/// The ONNX text name of an element type ("float16"), "?" when unknown.
const char *planElemTypeName(plan::ElemType t);
int64_t planNumElements(const plan::Tensor &t);
size_t planTensorBytes(const plan::Tensor &t);

/// Checks a host transfer of `bytes` to or from tensor `id` for a backend:
/// `stored(id)` says whether the backend holds bytes for a tensor in range.
/// False with a one-line error for an id out of range or without storage,
/// or a size other than the tensor's.
template <typename StoredFn>
bool checkTransfer(const plan::Plan &p, int id, size_t bytes, StoredFn stored,
                   std::string &error) {
  if (id < 0 || id >= p.tensors_size() || !stored(id)) {
    error = "tensor " + std::to_string(id) + " has no storage";
    return false;
  }
  size_t expected = planTensorBytes(p.tensors(id));
  if (bytes != expected) {
    error = "tensor '" + p.tensors(id).name() + "' holds " + std::to_string(expected) +
            " bytes, not " + std::to_string(bytes);
    return false;
  }
  return true;
}

/// Writes the initial value of a `cast_of` state `t` (fp16 or bf16) from its
/// source's fp32 values, rounding to nearest even as every kernel does.
void initCastState(const plan::Tensor &t, const void *from, void *to);

/// `to` becomes `from` without the tensors' values (`data`): what a backend
/// keeps once the values are in its own buffers. Every Plan field is copied
/// (PlanFile.CopyWithoutValuesKeepsEverythingElse checks that no new field is
/// forgotten).
void copyPlanWithoutValues(const plan::Plan &from, plan::Plan &to);
/// Frees every tensor's value in `p` (a plan already loaded by its backend;
/// validatePlan no longer accepts it).
void dropPlanValues(plan::Plan &p);

/// The first step of `prog` after `step` that reads one of its outputs,
/// through any view; the number of steps when none does. Where a backend
/// must finish an asynchronous step (ampc.AllReduce) at the latest.
int firstReaderStep(const plan::Plan &p, const plan::Program &prog, int step);

/// Stops protobuf from printing its own "[libprotobuf ERROR ...]" lines: every
/// parse failure is reported by ampc's one-line error, naming the file.
void silenceProtobufLog();

} // namespace ampc::rt
