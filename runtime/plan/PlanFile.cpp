//===- PlanFile.cpp - Reading, writing and validating plan files -----------===//

#include "ampc/rt/PlanFile.h"

#include "ampc/rt/ElementMath.h"
#include "ampc/rt/Npy.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <google/protobuf/stubs/logging.h>
#include <zlib.h>

#include <cstring>
#include <future>
#include <set>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace ampc::rt {

namespace {
const char kMagic[8] = {'A', 'M', 'P', 'C', 'P', 'L', 'A', 'N'};

template <typename T> void put(std::string &s, T v) {
  s.append(reinterpret_cast<const char *>(&v), sizeof(T));
}
/// The exact widenings a binding may ask for (Binding.widen_to).
bool isWidening(plan::ElemType from, plan::ElemType to) {
  return (from == plan::F16 || from == plan::BF16) && to == plan::F32;
}
} // namespace

bool planStepMayComputeInPlace(const std::string &op) {
  return op == "ampc.Fused" || op == "ampc.AdamW";
}

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

namespace {

uint64_t alignUp(uint64_t n) { return (n + kPlanDataAlignment - 1) / kPlanDataAlignment * kPlanDataAlignment; }

uint64_t crcOf(const char *data, size_t size, uLong crc = crc32(0L, Z_NULL, 0)) {
  const size_t chunk = 1u << 30;
  for (size_t off = 0; off < size; off += chunk) {
    size_t n = std::min(chunk, size - off);
    crc = crc32(crc, reinterpret_cast<const Bytef *>(data + off), static_cast<uInt>(n));
  }
  return crc;
}

} // namespace

namespace {

/// The plan's tensors as the bytes of Plan.tensors (field 3), each entry's
/// tag, length and message, as Plan's own serialization writes them.
std::string serializeTensorField(const google::protobuf::RepeatedPtrField<plan::Tensor> &tensors) {
  using google::protobuf::io::CodedOutputStream;
  using google::protobuf::internal::WireFormatLite;
  std::vector<uint32_t> sizes(tensors.size());
  size_t total = 0;
  for (int i = 0; i < tensors.size(); ++i) {
    size_t size = tensors.Get(i).ByteSizeLong();
    if (size > static_cast<size_t>(INT32_MAX))
      return std::string(); // the caller's size check fails
    sizes[i] = static_cast<uint32_t>(size);
    total += 1 + CodedOutputStream::VarintSize32(sizes[i]) + size;
    if (total > static_cast<size_t>(INT32_MAX))
      return std::string();
  }
  std::string bytes(total, '\0');
  auto *at = reinterpret_cast<uint8_t *>(bytes.data());
  for (int i = 0; i < tensors.size(); ++i) {
    at = WireFormatLite::WriteTagToArray(plan::Plan::kTensorsFieldNumber,
                                         WireFormatLite::WIRETYPE_LENGTH_DELIMITED, at);
    at = CodedOutputStream::WriteVarint32ToArray(sizes[i], at);
    at = tensors.Get(i).SerializeWithCachedSizesToArray(at);
  }
  return bytes;
}

/// Bytes of Plan's fields before `tensors` (version and producer).
size_t bytesBeforeTensors(const plan::Plan &p) {
  using google::protobuf::io::CodedOutputStream;
  size_t n = 0;
  if (p.version() != 0)
    n += 1 + CodedOutputStream::VarintSize32(p.version());
  if (!p.producer().empty())
    n += 1 + CodedOutputStream::VarintSize32(static_cast<uint32_t>(p.producer().size())) +
         p.producer().size();
  return n;
}

/// The rest of the message (every field but `tensors`), deterministic, so
/// that one model and one command give the same plan bytes (protobuf orders
/// map fields, the plan's info, by hash otherwise). False past 2 GiB.
bool serializeAllButTensors(const plan::Plan &p, std::string &bytes) {
  // The sizes are computed once (SerializeToCodedStream would compute them
  // again) and the bytes written into a buffer of the final size.
  size_t size = p.ByteSizeLong();
  if (size > static_cast<size_t>(INT32_MAX))
    return false;
  bytes.resize(size);
  google::protobuf::io::ArrayOutputStream stream(bytes.data(), static_cast<int>(size));
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  p.SerializeWithCachedSizes(&coded);
  return !coded.HadError() && static_cast<size_t>(coded.ByteCount()) == size;
}

} // namespace

bool planFilePieces(plan::Plan &p, const ExternalValues &external, PlanFilePieces &out,
                    std::string &error) {
  // Every value of the data section, in tensor order: large values leave the
  // message while it is serialized (swapped out, not copied) and come back
  // after; external ones were never in it.
  std::vector<std::string_view> outside(p.tensors_size());
  std::vector<char> isOutside(p.tensors_size(), 0);
  for (const auto &[id, bytes] : external) {
    if (id < 0 || id >= p.tensors_size() || !p.tensors(id).data().empty() || isOutside[id]) {
      error = "the plan's external value for tensor " + std::to_string(id) + " is invalid";
      return false;
    }
    outside[id] = bytes;
    isOutside[id] = 1;
  }
  std::vector<std::pair<int, std::string>> moved;
  std::vector<int> order;
  std::vector<uint64_t> offsets;
  std::vector<std::string_view> values; // in `order`, while out of the message
  uint64_t dataSize = 0;
  for (int i = 0; i < p.tensors_size(); ++i) {
    plan::Tensor &t = *p.mutable_tensors(i);
    size_t size = isOutside[i] ? outside[i].size() : t.data().size();
    if (size < kPlanInlineDataLimit)
      continue;
    t.set_data_offset(dataSize);
    offsets.push_back(dataSize);
    dataSize = alignUp(dataSize + size);
    order.push_back(i);
    if (isOutside[i])
      continue;
    moved.emplace_back(i, std::string());
    moved.back().second.swap(*t.mutable_data());
  }
  for (size_t k = 0, m = 0; k < order.size(); ++k)
    values.push_back(isOutside[order[k]] ? outside[order[k]]
                                         : std::string_view(moved[m++].second));
  out.zeros.assign(kPlanDataAlignment, '\0');

  // The tensor table and the data section's CRC are done on a second thread
  // while the rest of the message is serialized.
  google::protobuf::RepeatedPtrField<plan::Tensor> tensors;
  tensors.Swap(p.mutable_tensors());
  struct TensorWork {
    std::string bytes;
    uLong crc, dataCrc;
  };
  std::future<TensorWork> tensorWork = std::async(std::launch::async, [&] {
    TensorWork w;
    w.bytes = serializeTensorField(tensors);
    w.crc = crcOf(w.bytes.data(), w.bytes.size());
    w.dataCrc = crc32(0L, Z_NULL, 0);
    for (size_t k = 0; k < values.size(); ++k) {
      w.dataCrc = crcOf(values[k].data(), values[k].size(), w.dataCrc);
      uint64_t end = k + 1 < values.size() ? offsets[k + 1] : dataSize;
      w.dataCrc = crcOf(out.zeros.data(), end - offsets[k] - values[k].size(), w.dataCrc);
    }
    return w;
  });
  std::string rest;
  bool ok = serializeAllButTensors(p, rest);
  TensorWork work = tensorWork.get();
  p.mutable_tensors()->Swap(&tensors);
  for (auto &[i, data] : moved)
    p.mutable_tensors(i)->mutable_data()->swap(data);
  for (int i : order)
    p.mutable_tensors(i)->clear_data_offset();
  size_t split = bytesBeforeTensors(p);
  size_t payloadSize = rest.size() + work.bytes.size();
  if (!ok || (work.bytes.empty() && p.tensors_size() > 0) ||
      payloadSize > static_cast<size_t>(INT32_MAX)) {
    error = "the plan could not be serialized (its message is larger than 2 GiB)";
    return false;
  }
  uLong crcBefore = crcOf(rest.data(), split);
  uLong crcAfter = crcOf(rest.data() + split, rest.size() - split);
  uLong payloadCrc = crc32_combine64(crc32_combine64(crcBefore, work.crc, work.bytes.size()),
                                     crcAfter, rest.size() - split);

  uint64_t dataStart = alignUp(kPlanHeaderSize + payloadSize);
  std::string &head = out.head;
  head.clear();
  head.reserve(kPlanHeaderSize + split);
  head.append(kMagic, 8);
  put<uint32_t>(head, kPlanVersion);
  put<uint32_t>(head, 0);
  put<uint64_t>(head, payloadSize);
  put<uint64_t>(head, payloadCrc);
  put<uint64_t>(head, dataStart);
  put<uint64_t>(head, dataSize);
  put<uint64_t>(head, 0); // the data CRC, below
  put<uint64_t>(head, 0);
  head.append(rest, 0, split);
  out.tensors = std::move(work.bytes);
  out.tail.assign(rest, split);
  out.tail.resize(dataStart - kPlanHeaderSize - split - out.tensors.size(), '\0');
  out.pieces = {head, out.tensors, out.tail};
  for (size_t k = 0; k < order.size(); ++k) {
    int i = order[k];
    std::string_view value = isOutside[i] ? outside[i] : std::string_view(p.tensors(i).data());
    out.pieces.push_back(value);
    uint64_t end = k + 1 < order.size() ? offsets[k + 1] : dataSize;
    if (uint64_t pad = end - offsets[k] - value.size())
      out.pieces.push_back(std::string_view(out.zeros).substr(0, pad));
  }
  uint64_t crc = work.dataCrc;
  std::memcpy(&head[48], &crc, sizeof(crc));
  return true;
}

bool serializePlan(plan::Plan &p, std::string &bytes, std::string &error) {
  PlanFilePieces pieces;
  if (!planFilePieces(p, {}, pieces, error))
    return false;
  size_t total = 0;
  for (std::string_view piece : pieces.pieces)
    total += piece.size();
  bytes.clear();
  bytes.reserve(total);
  for (std::string_view piece : pieces.pieces)
    bytes += piece;
  return true;
}

bool writePlanFile(const std::string &path, plan::Plan &p, std::string &error,
                   const ExternalValues &external) {
  PlanFilePieces pieces;
  if (!planFilePieces(p, external, pieces, error)) {
    error = path + ": " + error;
    return false;
  }
  // A compiler's output can be rebuilt: no fsync, as LLVM's tools do.
  return writeFileAtomic(path, pieces.pieces, error, Durability::ProcessCrash);
}

namespace {

/// A read-only view of a whole file: mapped, so that the data section is
/// read from the page cache straight into the tensors that hold it.
class MappedFile {
public:
  ~MappedFile() {
    if (data_ && size_)
      munmap(const_cast<char *>(data_), size_);
    if (fd_ >= 0)
      close(fd_);
  }
  bool open(const std::string &path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd_ < 0 || fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))
      return false;
    size_ = static_cast<size_t>(st.st_size);
    if (size_ == 0)
      return true;
    void *m = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (m == MAP_FAILED)
      return false;
    data_ = static_cast<const char *>(m);
    return true;
  }
  const char *data() const { return data_ ? data_ : ""; }
  size_t size() const { return size_; }

private:
  int fd_ = -1;
  const char *data_ = nullptr;
  size_t size_ = 0;
};

template <typename T> T getAt(const char *s, size_t at) {
  T v;
  std::memcpy(&v, s + at, sizeof(T));
  return v;
}

/// Moves every tensor's value from the data section into the message.
bool loadDataSection(plan::Plan &p, const char *section, uint64_t size, std::string &error) {
  for (int i = 0; i < p.tensors_size(); ++i) {
    plan::Tensor &t = *p.mutable_tensors(i);
    if (!t.has_data_offset())
      continue;
    std::string what = "tensor " + std::to_string(i) + " '" + t.name() + "'";
    uint64_t off = t.data_offset(), bytes = planTensorBytes(t);
    if (off % kPlanDataAlignment != 0) {
      error = what + " is misaligned in the data section (offset " + std::to_string(off) + ")";
      return false;
    }
    if (off > size || bytes > size - off) {
      error = what + " lies outside the data section (" + std::to_string(off) + "+" +
              std::to_string(bytes) + " > " + std::to_string(size) + ")";
      return false;
    }
    if (!t.data().empty() || t.zero_init() || t.has_view_of() || t.has_cast_of() ||
        (t.storage() != plan::STATE && t.storage() != plan::CONSTANT)) {
      error = what + " may not take a value from the data section";
      return false;
    }
    t.set_data(section + off, bytes);
    t.clear_data_offset();
  }
  return true;
}

} // namespace

bool readPlanFile(const std::string &path, plan::Plan &p, std::string &error) {
  MappedFile file;
  if (!file.open(path)) {
    error = path + ": cannot open the plan file";
    return false;
  }
  return parsePlanBytes(file.data(), file.size(), path, p, error);
}

bool parsePlanBytes(const std::string &bytes, const std::string &path, plan::Plan &p,
                    std::string &error) {
  return parsePlanBytes(bytes.data(), bytes.size(), path, p, error);
}

bool parsePlanBytes(const char *bytes, size_t size, const std::string &path, plan::Plan &p,
                    std::string &error) {
  if (size < 12 || std::memcmp(bytes, kMagic, 8) != 0) {
    error = path + ": not an ampc plan file";
    return false;
  }
  uint32_t version = getAt<uint32_t>(bytes, 8);
  if (version != kPlanVersion) {
    error = path + ": plan format version " + std::to_string(version) +
            ", this runtime reads version " + std::to_string(kPlanVersion) +
            " (recompile the model with this amp-opt)";
    return false;
  }
  if (size < kPlanHeaderSize) {
    error = path + ": truncated plan file (" + std::to_string(size) + " bytes, the header alone is " +
            std::to_string(kPlanHeaderSize) + ")";
    return false;
  }
  uint64_t payloadSize = getAt<uint64_t>(bytes, 16);
  uint64_t dataStart = getAt<uint64_t>(bytes, 32), dataSize = getAt<uint64_t>(bytes, 40);
  uint64_t available = size - kPlanHeaderSize;
  if (payloadSize > available || dataStart < kPlanHeaderSize + payloadSize ||
      dataStart % kPlanDataAlignment != 0 || dataStart > size || dataSize != size - dataStart) {
    uint64_t expected = payloadSize > available ? payloadSize : dataSize;
    uint64_t have = payloadSize > available ? available : (dataStart > size ? 0 : size - dataStart);
    if (dataStart % kPlanDataAlignment != 0 || dataStart < kPlanHeaderSize + payloadSize)
      error = path + ": the plan file is corrupt (its data section starts at byte " +
              std::to_string(dataStart) + ")";
    else
      error = path + ": truncated plan file (" + std::to_string(have) + " of " +
              std::to_string(expected) + (payloadSize > available ? " payload" : " data") +
              " bytes)";
    return false;
  }
  const char *payload = bytes + kPlanHeaderSize;
  if (getAt<uint64_t>(bytes, 24) != crcOf(payload, payloadSize) ||
      getAt<uint64_t>(bytes, 48) != crcOf(bytes + dataStart, dataSize)) {
    error = path + ": the plan file is corrupt (checksum mismatch)";
    return false;
  }
  if (payloadSize > static_cast<uint64_t>(std::numeric_limits<int>::max()) ||
      !p.ParseFromArray(payload, static_cast<int>(payloadSize))) {
    error = path + ": the plan file is corrupt (cannot be parsed)";
    return false;
  }
  // Sizes are checked against shapes before any value is copied.
  if (!validatePlan(p, error) || !loadDataSection(p, bytes + dataStart, dataSize, error)) {
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

namespace {

/// A state initialised as the fp16/bf16 conversion of another: an fp32 state
/// of as many elements, holding a value of its own.
bool checkCastOf(const plan::Plan &p, int i, std::string &error) {
  const plan::Tensor &t = p.tensors(i);
  std::string what = "tensor " + std::to_string(i) + " '" + t.name() + "'";
  int src = t.cast_of();
  if (t.storage() != plan::STATE || !t.data().empty() || t.has_data_offset() ||
      (t.type() != plan::F16 && t.type() != plan::BF16)) {
    error = what + " is converted from another state but is no fp16/bf16 state, or has a value";
    return false;
  }
  if (src < 0 || src >= p.tensors_size() || src == i) {
    error = what + " is converted from tensor " + std::to_string(src) + ", which does not exist";
    return false;
  }
  const plan::Tensor &from = p.tensors(src);
  if (from.storage() != plan::STATE || from.type() != plan::F32 || from.has_view_of() ||
      from.has_cast_of() || from.zero_init() || planNumElements(from) != planNumElements(t)) {
    error = what + " is converted from '" + from.name() +
            "', which is not an fp32 state of as many elements with a stored value";
    return false;
  }
  return true;
}

} // namespace

void initCastState(const plan::Tensor &t, const void *from, void *to) {
  const float *in = static_cast<const float *>(from);
  uint16_t *out = static_cast<uint16_t *>(to);
  int64_t n = planNumElements(t);
  bool half = t.type() == plan::F16;
  for (int64_t k = 0; k < n; ++k)
    out[k] = half ? math::floatToHalf(in[k]) : math::floatToBFloat16(in[k]);
}

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
      // A view's bytes are its base's: a value of its own (found by
      // fuzzing: a converted copy) would be written where nothing was sized
      // for it.
      if (t.has_cast_of() || t.zero_init() || !t.data().empty() || t.has_data_offset()) {
        error = what + " is a view of another tensor but also has a value of its own";
        return false;
      }
      continue;
    }
    // Any storage class: the backends convert every tensor marked cast_of
    // (found by fuzzing: an arena temporary marked so), so only an fp16/bf16
    // state may be.
    if (t.has_cast_of() && !checkCastOf(p, i, error))
      return false;
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
      if (t.zero_init() && (t.storage() != plan::STATE || !t.data().empty() || t.has_data_offset() ||
                            t.has_cast_of())) {
        error = what + " starts at zero but is no state, or also has a value";
        return false;
      }
      if (t.has_cast_of())
        break; // checked above
      // A value in the data section is checked against the section on load.
      if (!t.zero_init() && !t.has_data_offset() && t.data().size() != bytes) {
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

int firstReaderStep(const plan::Plan &p, const plan::Program &prog, int step) {
  auto base = [&](int id) {
    while (id >= 0 && p.tensors(id).has_view_of())
      id = p.tensors(id).view_of();
    return id;
  };
  std::set<int> produced;
  for (int id : prog.steps(step).outputs())
    produced.insert(base(id));
  for (int t = step + 1; t < prog.steps_size(); ++t)
    for (int id : prog.steps(t).inputs())
      if (id >= 0 && produced.count(base(id)))
        return t;
  return prog.steps_size();
}

void copyPlanWithoutValues(const plan::Plan &from, plan::Plan &to) {
  to.Clear();
  to.set_version(from.version());
  to.set_producer(from.producer());
  *to.mutable_programs() = from.programs();
  *to.mutable_memory() = from.memory();
  *to.mutable_parameters() = from.parameters();
  to.set_original_model(from.original_model());
  *to.mutable_info() = from.info();
  to.mutable_tensors()->Reserve(from.tensors_size());
  for (const plan::Tensor &t : from.tensors()) {
    plan::Tensor &c = *to.add_tensors();
    c = t; // one tensor's value at a time, then dropped
    std::string().swap(*c.mutable_data());
  }
}

void dropPlanValues(plan::Plan &p) {
  for (plan::Tensor &t : *p.mutable_tensors())
    std::string().swap(*t.mutable_data());
}

void silenceProtobufLog() { google::protobuf::SetLogHandler(nullptr); }

} // namespace ampc::rt
