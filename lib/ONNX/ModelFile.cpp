//===- ModelFile.cpp - Reading a binary ONNX model file -------------------===//
//
// The file is scanned in its wire format first: the main graph's large
// initializer raw_data fields are cut out of a copy of the rest (the lengths
// of the graph and tensor messages around them rewritten), protobuf parses
// that copy, and each cut field is read from the file into a string of its
// size and set on its tensor. Anything the scan does not expect (a group, a
// tensor with two raw_data fields, a length past its message, more than
// 64 MiB left to parse) leaves the file to protobuf's own reader, whose
// answer is the reference.
//
//===----------------------------------------------------------------------===//

#include "ampc/ONNX/ModelFile.h"

#include <google/protobuf/io/zero_copy_stream_impl.h>

#include "llvm/ADT/STLFunctionalExtras.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace ampc {

namespace {

// Field numbers of onnx.proto: ModelProto.graph, GraphProto.initializer,
// TensorProto.raw_data.
constexpr uint32_t kModelGraph = 7;
constexpr uint32_t kGraphInitializer = 5;
constexpr uint32_t kTensorRawData = 9;

enum WireType { Varint = 0, Fixed64 = 1, LengthDelimited = 2, Fixed32 = 5 };

/// Past this much of what is not cut, the file goes to protobuf's reader.
constexpr size_t kMaxMetadataBytes = 64 << 20;

bool readVarint(const uint8_t *&p, const uint8_t *end, uint64_t &v) {
  v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    uint8_t b = *p++;
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80))
      return true;
  }
  return false;
}

void writeVarint(std::string &out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

/// A raw_data field cut out of the file: the initializer it belongs to (in
/// the order protobuf appends them) and where its bytes lie.
struct CutField {
  int initializer;
  uint64_t offset, size;
};

/// The messages of the path ModelProto.graph.initializer.raw_data.
enum class Level { Model, Graph, Tensor };

/// The level of a message field `field` of a `level` message holds; `level`
/// itself for every field not on the path.
Level levelInside(Level level, uint32_t field) {
  if (level == Level::Model && field == kModelGraph)
    return Level::Graph;
  if (level == Level::Graph && field == kGraphInitializer)
    return Level::Tensor;
  return level;
}

class Scanner {
public:
  Scanner(const uint8_t *file, uint64_t size, uint64_t cutFrom)
      : file_(file), size_(size), cutFrom_(cutFrom) {}

  /// The file without its large raw_data fields; false where the scan
  /// leaves the file to protobuf.
  bool scan(std::string &metadata) {
    return copyMessage(file_, file_ + size_, Level::Model, metadata);
  }
  const std::vector<CutField> &cut() const { return cut_; }

private:
  bool copyMessage(const uint8_t *p, const uint8_t *end, Level level, std::string &out) {
    int rawDataFields = 0;
    while (p < end) {
      const uint8_t *fieldStart = p;
      uint64_t tag;
      if (!readVarint(p, end, tag))
        return false;
      uint32_t field = static_cast<uint32_t>(tag >> 3);
      switch (tag & 7) {
      case Varint: {
        uint64_t ignored;
        if (!readVarint(p, end, ignored))
          return false;
        break;
      }
      case Fixed64:
        if (end - p < 8)
          return false;
        p += 8;
        break;
      case Fixed32:
        if (end - p < 4)
          return false;
        p += 4;
        break;
      case LengthDelimited: {
        uint64_t len;
        if (!readVarint(p, end, len) || len > static_cast<uint64_t>(end - p))
          return false;
        const uint8_t *body = p;
        p += len;
        if (level == Level::Tensor && field == kTensorRawData) {
          // protobuf keeps the last of repeated bytes fields: not worth
          // reproducing here.
          if (++rawDataFields > 1)
            return false;
          if (len >= cutFrom_) {
            cut_.push_back({initializers_ - 1, static_cast<uint64_t>(body - file_), len});
            continue;
          }
        }
        Level inner = levelInside(level, field);
        if (inner != level) {
          if (inner == Level::Tensor)
            ++initializers_;
          std::string nested;
          if (!copyMessage(body, p, inner, nested))
            return false;
          writeVarint(out, tag);
          writeVarint(out, nested.size());
          out += nested;
          if (out.size() > kMaxMetadataBytes)
            return false;
          continue;
        }
        break;
      }
      default: // groups, or not a wire type
        return false;
      }
      out.append(reinterpret_cast<const char *>(fieldStart), p - fieldStart);
      // A model whose bulk is not in raw_data (float_data, say) would be
      // copied whole, and more than once through the nested messages.
      if (out.size() > kMaxMetadataBytes)
        return false;
    }
    return true;
  }

  const uint8_t *file_;
  uint64_t size_;
  uint64_t cutFrom_;
  std::vector<CutField> cut_;
  int initializers_ = 0;
};

bool readAt(int fd, char *into, uint64_t size, uint64_t offset) {
  while (size > 0) {
    ssize_t got = pread(fd, into, size, static_cast<off_t>(offset));
    if (got <= 0)
      return false;
    into += got;
    size -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

/// The scan's metadata, or false (the mapping is gone before the large
/// fields are read: its pages would count twice at the peak).
bool scanFile(int fd, uint64_t size, std::string &metadata, std::vector<CutField> &cut) {
  void *m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED)
    return false;
  Scanner scanner(static_cast<const uint8_t *>(m), size, kReadInPlaceBytes);
  bool ok = scanner.scan(metadata);
  munmap(m, size);
  cut = scanner.cut();
  return ok;
}

/// protobuf's reader, through a small buffer: the whole file is never in
/// memory next to the message.
bool parseStreaming(int fd, onnx::ModelProto &model) {
  google::protobuf::io::FileInputStream stream(fd, 1 << 20);
  return model.ParseFromZeroCopyStream(&stream);
}

/// Parses the scan's metadata into `model`, then sets each cut field from
/// `read(into, size, offset)`.
bool parseCut(const std::string &metadata, const std::vector<CutField> &cut,
              llvm::function_ref<bool(char *, uint64_t, uint64_t)> read, onnx::ModelProto &model) {
  if (!model.ParseFromString(metadata))
    return false;
  auto *initializers = model.mutable_graph()->mutable_initializer();
  for (const CutField &f : cut) {
    if (f.initializer < 0 || f.initializer >= initializers->size())
      return false;
    std::string bytes(f.size, '\0');
    if (!read(bytes.data(), f.size, f.offset))
      return false;
    initializers->Mutable(f.initializer)->set_raw_data(std::move(bytes));
  }
  return true;
}

bool parseWithCutFields(int fd, uint64_t size, onnx::ModelProto &model) {
  std::string metadata;
  std::vector<CutField> cut;
  if (!scanFile(fd, size, metadata, cut) || cut.empty())
    return parseStreaming(fd, model);
  return parseCut(
      metadata, cut,
      [fd](char *into, uint64_t bytes, uint64_t offset) { return readAt(fd, into, bytes, offset); },
      model);
}

} // namespace

bool parseModelFile(const std::string &path, onnx::ModelProto &model) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0
                ? parseWithCutFields(fd, static_cast<uint64_t>(st.st_size), model)
                : parseStreaming(fd, model);
  close(fd);
  return ok;
}

bool parseModelBytes(std::string_view bytes, onnx::ModelProto &model, uint64_t cutFrom) {
  const auto *data = reinterpret_cast<const uint8_t *>(bytes.data());
  Scanner scanner(data, bytes.size(), cutFrom);
  std::string metadata;
  if (bytes.size() > static_cast<size_t>(INT32_MAX) || !scanner.scan(metadata) ||
      scanner.cut().empty())
    return model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  return parseCut(
      metadata, scanner.cut(),
      [&](char *into, uint64_t size, uint64_t offset) {
        std::memcpy(into, data + offset, size);
        return true;
      },
      model);
}

} // namespace ampc
