//===- PlanFile.cpp - Reading, writing and validating plan files -----------===//

#include "ampc/rt/PlanFile.h"

#include "ampc/rt/Npy.h"

#include <google/protobuf/stubs/logging.h>
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace ampc::rt {

namespace {
const char kMagic[8] = {'A', 'M', 'P', 'C', 'P', 'L', 'A', 'N'};

uint64_t crcOf(const std::string &bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const size_t chunk = 1u << 30;
  for (size_t off = 0; off < bytes.size(); off += chunk) {
    size_t n = std::min(chunk, bytes.size() - off);
    crc = crc32(crc, reinterpret_cast<const Bytef *>(bytes.data() + off), static_cast<uInt>(n));
  }
  return crc;
}

template <typename T> void put(std::string &s, T v) {
  s.append(reinterpret_cast<const char *>(&v), sizeof(T));
}
template <typename T> T get(const std::string &s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

/// The exact widenings a binding may ask for (Binding.widen_to).
bool isWidening(plan::ElemType from, plan::ElemType to) {
  return (from == plan::F16 || from == plan::BF16) && to == plan::F32;
}
} // namespace

size_t planElemSize(plan::ElemType t) {
  switch (t) {
  case plan::F64:
  case plan::I64:
    return 8;
  case plan::F32:
  case plan::I32:
    return 4;
  case plan::F16:
  case plan::BF16:
    return 2;
  case plan::I8:
  case plan::U8:
  case plan::BOOL:
    return 1;
  default:
    return 0;
  }
}

const char *planElemTypeName(plan::ElemType t) {
  switch (t) {
  case plan::F32:
    return "float";
  case plan::F16:
    return "float16";
  case plan::BF16:
    return "bfloat16";
  case plan::F64:
    return "double";
  case plan::I64:
    return "int64";
  case plan::I32:
    return "int32";
  case plan::I8:
    return "int8";
  case plan::U8:
    return "uint8";
  case plan::BOOL:
    return "bool";
  default:
    return "?";
  }
}

int64_t planNumElements(const plan::Tensor &t) {
  int64_t n = 1;
  for (int64_t d : t.shape())
    n *= d;
  return n;
}

size_t planTensorBytes(const plan::Tensor &t) {
  return static_cast<size_t>(planNumElements(t)) * planElemSize(t.type());
}

bool serializePlan(const plan::Plan &p, std::string &bytes, std::string &error) {
  std::string payload;
  if (!p.SerializeToString(&payload)) {
    error = "the plan could not be serialized (larger than 2 GiB?)";
    return false;
  }
  bytes.clear();
  bytes.append(kMagic, 8);
  put<uint32_t>(bytes, kPlanVersion);
  put<uint32_t>(bytes, 0);
  put<uint64_t>(bytes, payload.size());
  put<uint64_t>(bytes, crcOf(payload));
  bytes += payload;
  return true;
}

bool writePlanFile(const std::string &path, const plan::Plan &p, std::string &error) {
  std::string bytes;
  if (!serializePlan(p, bytes, error)) {
    error = path + ": " + error;
    return false;
  }
  return writeFileAtomic(path, bytes, error);
}

bool readPlanFile(const std::string &path, plan::Plan &p, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot open the plan file";
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return parsePlanBytes(ss.str(), path, p, error);
}

bool parsePlanBytes(const std::string &bytes, const std::string &path, plan::Plan &p,
                    std::string &error) {
  if (bytes.size() < kPlanHeaderSize || std::memcmp(bytes.data(), kMagic, 8) != 0) {
    error = path + ": not an ampc plan file";
    return false;
  }
  uint32_t version = get<uint32_t>(bytes, 8);
  if (version != kPlanVersion) {
    error = path + ": plan format version " + std::to_string(version) +
            ", this runtime reads version " + std::to_string(kPlanVersion) +
            " (recompile the model with this amp-opt)";
    return false;
  }
  uint64_t size = get<uint64_t>(bytes, 16);
  if (size != bytes.size() - kPlanHeaderSize) {
    error = path + ": truncated plan file (" + std::to_string(bytes.size() - kPlanHeaderSize) +
            " of " + std::to_string(size) + " payload bytes)";
    return false;
  }
  std::string payload = bytes.substr(kPlanHeaderSize);
  if (get<uint64_t>(bytes, 24) != crcOf(payload)) {
    error = path + ": the plan file is corrupt (checksum mismatch)";
    return false;
  }
  if (!p.ParseFromString(payload)) {
    error = path + ": the plan file is corrupt (cannot be parsed)";
    return false;
  }
  if (!validatePlan(p, error)) {
    error = path + ": " + error;
    return false;
  }
  return true;
}

namespace {

/// Arena tensors whose bytes overlap must never be live at once: every
/// offset set to 0 trained with loss 0 and exit 0 (found by fuzzing). Per
/// program, each arena tensor (a view counts as its base) lives from the
/// step that first touches it (before the run for a fed input) to the step
/// that last does (after the run for an output or a state update). Two may
/// share bytes at one step only: the last reader of one and the writer of
/// the other (the planner's in-place results). A sweep over the steps keeps
/// the live byte ranges in a map, so the check is O(n log n).
bool checkArenaLifetimes(const plan::Plan &p, std::string &error) {
  auto base = [&](int id) { return p.tensors(id).has_view_of() ? p.tensors(id).view_of() : id; };
  for (const plan::Program &prog : p.programs()) {
    int steps = prog.steps_size();
    std::map<int, std::pair<int, int>> life; // base tensor -> (first, last)
    auto touch = [&](int id, int at) {
      if (id < 0)
        return;
      int b = base(id);
      if (p.tensors(b).storage() != plan::ARENA || planTensorBytes(p.tensors(b)) == 0)
        return;
      auto [it, fresh] = life.try_emplace(b, at, at);
      if (!fresh) {
        it->second.first = std::min(it->second.first, at);
        it->second.second = std::max(it->second.second, at);
      }
    };
    for (const plan::Binding &b : prog.inputs())
      touch(b.tensor(), -1);
    for (int s = 0; s < steps; ++s) {
      for (int id : prog.steps(s).inputs())
        touch(id, s);
      for (int id : prog.steps(s).outputs())
        touch(id, s);
    }
    for (const plan::Binding &b : prog.outputs())
      touch(b.tensor(), steps);
    for (const plan::StateUpdate &u : prog.updates())
      touch(u.updated(), steps);
    // Events by time: tensors starting at t, tensors ending at t.
    std::map<int, std::vector<int>> starts, ends;
    for (const auto &[id, span] : life) {
      starts[span.first].push_back(id);
      ends[span.second].push_back(id);
    }
    std::map<uint64_t, std::pair<uint64_t, int>> live; // offset -> (end, tensor)
    auto remove = [&](int id) { live.erase(p.tensors(id).offset()); };
    for (int t = -1; t <= steps; ++t) {
      // Ranges that end at t may be taken by results written at t.
      if (auto e = ends.find(t); e != ends.end())
        for (int id : e->second)
          if (life[id].first < t)
            remove(id);
      for (int id : starts[t]) {
        uint64_t lo = p.tensors(id).offset(), hi = lo + planTensorBytes(p.tensors(id));
        auto next = live.lower_bound(lo);
        int clash = -1;
        if (next != live.end() && next->first < hi)
          clash = next->second.second;
        if (next != live.begin() && std::prev(next)->second.first > lo)
          clash = std::prev(next)->second.second;
        if (clash >= 0) {
          error = "program '" + prog.name() + "': tensors '" + p.tensors(clash).name() + "' and '" +
                  p.tensors(id).name() + "' share arena bytes while both are live";
          return false;
        }
        live[lo] = {hi, id};
      }
      // Tensors live for this step alone end now too.
      if (auto e = ends.find(t); e != ends.end())
        for (int id : e->second)
          if (life[id].first == t)
            remove(id);
    }
  }
  return true;
}

} // namespace

bool validatePlan(const plan::Plan &p, std::string &error) {
  int n = p.tensors_size();
  auto tensorOk = [&](int id) { return id >= 0 && id < n; };
  // A tensor with bytes of its own or of its base: VIRTUAL ones were fused away.
  auto stored = [&](int id) { return tensorOk(id) && p.tensors(id).storage() != plan::VIRTUAL; };
  uint64_t arena = p.memory().arena_bytes();
  for (int i = 0; i < n; ++i) {
    const plan::Tensor &t = p.tensors(i);
    std::string what = "tensor " + std::to_string(i) + " '" + t.name() + "'";
    if (planElemSize(t.type()) == 0) {
      error = what + " has an unknown element type";
      return false;
    }
    int64_t count = 1;
    for (int64_t d : t.shape()) {
      if (d < 0 || (d != 0 && count > (int64_t(1) << 40) / d)) {
        error = what + " has an invalid shape";
        return false;
      }
      count *= d;
    }
    size_t bytes = planTensorBytes(t);
    if (t.has_view_of()) {
      int base = t.view_of();
      if (!tensorOk(base) || base == i || p.tensors(base).has_view_of() ||
          planTensorBytes(p.tensors(base)) != bytes || p.tensors(base).storage() != t.storage()) {
        error = what + " is a view of a tensor it cannot view";
        return false;
      }
      continue;
    }
    switch (t.storage()) {
    case plan::ARENA:
      // Kernels load and store whole elements: a misaligned offset is
      // undefined behaviour in every one of them.
      if (t.offset() % planElemSize(t.type()) != 0) {
        error = what + " is misaligned (offset " + std::to_string(t.offset()) + " for " +
                std::to_string(planElemSize(t.type())) + "-byte elements)";
        return false;
      }
      if (t.offset() > arena || bytes > arena - t.offset()) {
        error = what + " lies outside the arena (" + std::to_string(t.offset()) + "+" +
                std::to_string(bytes) + " > " + std::to_string(arena) + ")";
        return false;
      }
      break;
    case plan::VIRTUAL:
      break;
    case plan::STATE:
    case plan::CONSTANT:
      if (t.data().size() != bytes) {
        error = what + " holds " + std::to_string(t.data().size()) + " bytes of data, its type needs " +
                std::to_string(bytes);
        return false;
      }
      break;
    default:
      error = what + " has an unknown storage class";
      return false;
    }
  }
  std::set<std::string> names;
  std::set<int> dropoutCounters; // each advanced by one Dropout step only
  for (const plan::Program &prog : p.programs()) {
    if (!names.insert(prog.name()).second) {
      error = "program '" + prog.name() + "' is defined twice";
      return false;
    }
    for (int s = 0; s < prog.steps_size(); ++s) {
      const plan::Step &step = prog.steps(s);
      std::string what = "program '" + prog.name() + "' step " + std::to_string(s) + " (" +
                         step.op() + " '" + step.name() + "')";
      for (int id : step.inputs())
        if (id != -1 && (!tensorOk(id) || p.tensors(id).storage() == plan::VIRTUAL)) {
          error = what + " reads tensor " + std::to_string(id) + ", which does not exist";
          return false;
        }
      for (int id : step.outputs())
        if (id != -1 && (!tensorOk(id) || p.tensors(id).storage() == plan::CONSTANT ||
                         p.tensors(id).storage() == plan::VIRTUAL)) {
          error = what + " writes tensor " + std::to_string(id) + ", which it may not";
          return false;
        }
      // Dropout advances its run counter, operand 3, in place: it must be
      // plan state of its own (not a constant, not a view into another tensor).
      if (step.op() == "Dropout" && step.inputs_size() > 3 && step.inputs(3) != -1) {
        const plan::Tensor &counter = p.tensors(step.inputs(3));
        if (counter.storage() != plan::STATE || counter.has_view_of() || counter.type() != plan::I64 ||
            counter.shape_size() != 0 || !dropoutCounters.insert(step.inputs(3)).second) {
          error = what + " advances tensor " + std::to_string(step.inputs(3)) +
                  " as its run counter, which must be an int64 scalar state of its own";
          return false;
        }
      }
      for (const auto &a : step.attrs())
        if (a.value_case() == plan::Attribute::kTensor &&
            (!tensorOk(a.tensor()) || p.tensors(a.tensor()).storage() != plan::CONSTANT)) {
          error = what + " has a tensor attribute that is not a constant";
          return false;
        }
    }
    for (const auto *list : {&prog.inputs(), &prog.outputs()})
      for (const plan::Binding &b : *list)
        if (!stored(b.tensor())) {
          error = "program '" + prog.name() + "': binding '" + b.name() + "' names no tensor";
          return false;
        }
    for (const plan::Binding &b : prog.outputs())
      if (b.has_widen_to() && !isWidening(p.tensors(b.tensor()).type(), b.widen_to())) {
        error = "program '" + prog.name() + "': output '" + b.name() + "' widens " +
                planElemTypeName(p.tensors(b.tensor()).type()) + " to " +
                planElemTypeName(b.widen_to()) + " (only float16 and bfloat16 widen, to float)";
        return false;
      }
    for (const plan::Binding &b : prog.inputs())
      if (b.has_default() && b.default_data().size() != planTensorBytes(p.tensors(b.tensor()))) {
        error = "program '" + prog.name() + "': the default of input '" + b.name() +
                "' has the wrong size";
        return false;
      }
    for (const plan::StateUpdate &u : prog.updates()) {
      if (!tensorOk(u.state()) || !stored(u.updated()) ||
          p.tensors(u.state()).storage() != plan::STATE) {
        error = "program '" + prog.name() + "': a state update names a wrong tensor";
        return false;
      }
      const plan::Tensor &s = p.tensors(u.state()), &v = p.tensors(u.updated());
      if (planTensorBytes(s) != planTensorBytes(v) || s.type() != v.type()) {
        error = "program '" + prog.name() + "': the update of state '" + s.name() +
                "' has another type";
        return false;
      }
    }
  }
  for (const plan::Parameter &param : p.parameters())
    if (!tensorOk(param.state()) || p.tensors(param.state()).storage() != plan::STATE ||
        (param.grad() != -1 &&
         (!stored(param.grad()) ||
          planNumElements(p.tensors(param.grad())) != planNumElements(p.tensors(param.state()))))) {
      error = "parameter '" + param.onnx_name() + "' names a wrong tensor";
      return false;
    }
  return checkArenaLifetimes(p, error);
}

void silenceProtobufLog() { google::protobuf::SetLogHandler(nullptr); }

} // namespace ampc::rt
