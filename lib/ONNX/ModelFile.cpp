//===- ModelFile.cpp - Reading a binary ONNX model file -------------------===//
//
// The file is scanned in its wire format first: the main graph's large
// initializer raw_data fields are cut out of a copy of the rest (the lengths
// of the graph and tensor messages around them rewritten), protobuf parses
// that copy, and each cut field is read from the file into a string of its
// size and set on its tensor. Anything the scan does not expect (a group, a
// tensor with two raw_data fields, a length past its message, more than
// 64 MiB left to parse) leaves the file to protobuf's own reader, whose
// answer is the reference. The file is read with pread, not mapped: a file
// another process truncates meanwhile is a short read, not a SIGBUS.
//
//===----------------------------------------------------------------------===//

#include "ampc/ONNX/ModelFile.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

/// The bytes scanned: a buffer in memory, or a file read forward through a
/// window (the scan reads tags and lengths byte by byte).
class Input {
public:
  Input(const uint8_t *bytes, uint64_t size) : mem_(bytes), size_(size) {}
  Input(int fd, uint64_t size) : fd_(fd), size_(size), window_(kWindow) {}

  uint64_t size() const { return size_; }

  /// `n` bytes at `offset` into `into`; false past the end or on a short read.
  /// A read of less than the window goes through it: the scan copies the
  /// file field by field, and a pread for each field of a model with 10,000
  /// small initializers was 52,000 system calls.
  bool read(uint64_t offset, char *into, uint64_t n) {
    if (offset > size_ || n > size_ - offset)
      return false;
    if (mem_) {
      std::memcpy(into, mem_ + offset, n);
      return true;
    }
    if (n < kWindow) {
      if (!cover(offset, n))
        return false;
      std::memcpy(into, window_.data() + (offset - windowAt_), n);
      return true;
    }
    return readFile(offset, into, n);
  }

  /// The byte at `offset`; false past the end or on a short read.
  bool byte(uint64_t offset, uint8_t &b) {
    if (offset >= size_)
      return false;
    if (mem_) {
      b = mem_[offset];
      return true;
    }
    if (!cover(offset, 1))
      return false;
    b = static_cast<uint8_t>(window_[offset - windowAt_]);
    return true;
  }

private:
  static constexpr uint64_t kWindow = 64 * 1024;

  /// Makes the window hold [offset, offset + n), n at most kWindow, within
  /// the file; reads the file from `offset` on where it does not already.
  bool cover(uint64_t offset, uint64_t n) {
    if (offset >= windowAt_ && offset - windowAt_ + n <= windowLen_)
      return true;
    windowAt_ = offset;
    windowLen_ = std::min<uint64_t>(kWindow, size_ - offset);
    if (readFile(offset, window_.data(), windowLen_))
      return true;
    windowLen_ = 0;
    return false;
  }

  bool readFile(uint64_t offset, char *into, uint64_t n) {
    while (n > 0) {
      ssize_t got = pread(fd_, into, n, static_cast<off_t>(offset));
      if (got <= 0)
        return false;
      into += got;
      n -= static_cast<uint64_t>(got);
      offset += static_cast<uint64_t>(got);
    }
    return true;
  }

  const uint8_t *mem_ = nullptr;
  int fd_ = -1;
  uint64_t size_;
  std::vector<char> window_;
  uint64_t windowAt_ = 0, windowLen_ = 0;
};

bool readVarint(Input &in, uint64_t &pos, uint64_t end, uint64_t &v) {
  v = 0;
  for (int shift = 0; shift < 64 && pos < end; shift += 7) {
    uint8_t b;
    if (!in.byte(pos++, b))
      return false;
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80))
      return true;
  }
  return false;
}

void writeVarint(std::string &out, uint64_t v) {
  uint8_t bytes[10]; // a 64-bit varint's most
  uint8_t *end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(v, bytes);
  out.append(reinterpret_cast<const char *>(bytes), end - bytes);
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
  Scanner(Input &in, uint64_t cutFrom) : in_(in), cutFrom_(cutFrom) {}

  /// The input without its large raw_data fields; false where the scan
  /// leaves the input to protobuf.
  bool scan(std::string &metadata) { return copyMessage(0, in_.size(), Level::Model, metadata); }
  const std::vector<CutField> &cut() const { return cut_; }

private:
  /// Whether `n` more bytes keep `out` within kMaxMetadataBytes: a model
  /// whose bulk is not in raw_data (float_data, say) would be copied whole,
  /// and more than once through the nested messages.
  static bool fits(const std::string &out, uint64_t n) {
    return out.size() <= kMaxMetadataBytes && n <= kMaxMetadataBytes - out.size();
  }

  /// Appends the input's bytes [from, to) to `out`.
  bool append(uint64_t from, uint64_t to, std::string &out) {
    if (!fits(out, to - from))
      return false;
    size_t at = out.size();
    out.resize(at + (to - from));
    return in_.read(from, out.data() + at, to - from);
  }

  bool copyMessage(uint64_t pos, uint64_t end, Level level, std::string &out) {
    int rawDataFields = 0;
    while (pos < end) {
      uint64_t fieldStart = pos, tag;
      if (!readVarint(in_, pos, end, tag))
        return false;
      uint32_t field = static_cast<uint32_t>(tag >> 3);
      switch (tag & 7) {
      case Varint: {
        uint64_t ignored;
        if (!readVarint(in_, pos, end, ignored))
          return false;
        break;
      }
      case Fixed64:
      case Fixed32: {
        uint64_t n = (tag & 7) == Fixed64 ? 8 : 4;
        if (end - pos < n)
          return false;
        pos += n;
        break;
      }
      case LengthDelimited: {
        uint64_t len;
        if (!readVarint(in_, pos, end, len) || len > end - pos)
          return false;
        uint64_t body = pos;
        pos += len;
        if (level == Level::Tensor && field == kTensorRawData) {
          // protobuf keeps the last of repeated bytes fields: not worth
          // reproducing here.
          if (++rawDataFields > 1)
            return false;
          if (len >= cutFrom_) {
            cut_.push_back({initializers_ - 1, body, len});
            continue;
          }
        }
        Level inner = levelInside(level, field);
        if (inner == level)
          break;
        if (inner == Level::Tensor)
          ++initializers_;
        std::string nested;
        if (!copyMessage(body, pos, inner, nested))
          return false;
        std::string head;
        writeVarint(head, tag);
        writeVarint(head, nested.size());
        if (!fits(out, head.size() + nested.size()))
          return false;
        out += head;
        out += nested;
        continue;
      }
      default: // groups, or not a wire type
        return false;
      }
      if (!append(fieldStart, pos, out))
        return false;
    }
    return true;
  }

  Input &in_;
  uint64_t cutFrom_;
  std::vector<CutField> cut_;
  int initializers_ = 0;
};

/// protobuf's reader, through a small buffer: the whole file is never in
/// memory next to the message.
bool parseStreaming(int fd, onnx::ModelProto &model) {
  google::protobuf::io::FileInputStream stream(fd, 1 << 20);
  return model.ParseFromZeroCopyStream(&stream);
}

/// Scans `in`, parses what is not cut into `model` and reads each cut field
/// into its tensor. `scanned` is false where the scan leaves the input to
/// protobuf (nothing to cut, or a structure it does not expect).
bool parseCut(Input &in, uint64_t cutFrom, onnx::ModelProto &model, bool &scanned) {
  Scanner scanner(in, cutFrom);
  std::string metadata;
  scanned = scanner.scan(metadata) && !scanner.cut().empty();
  if (!scanned || !model.ParseFromString(metadata))
    return false;
  auto *initializers = model.mutable_graph()->mutable_initializer();
  for (const CutField &f : scanner.cut()) {
    if (f.initializer < 0 || f.initializer >= initializers->size())
      return false;
    std::string bytes(f.size, '\0');
    if (!in.read(f.offset, bytes.data(), f.size))
      return false;
    initializers->Mutable(f.initializer)->set_raw_data(std::move(bytes));
  }
  return true;
}

} // namespace

bool parseModelFile(const std::string &path, onnx::ModelProto &model) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  struct stat st;
  bool ok = false, scanned = false;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    Input in(fd, static_cast<uint64_t>(st.st_size));
    ok = parseCut(in, kReadInPlaceBytes, model, scanned);
  }
  if (!scanned) {
    model.Clear();
    ok = parseStreaming(fd, model);
  }
  close(fd);
  return ok;
}

bool parseModelBytes(std::string_view bytes, onnx::ModelProto &model, uint64_t cutFrom) {
  if (bytes.size() > static_cast<size_t>(INT32_MAX))
    return false;
  Input in(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  bool scanned = false;
  bool ok = parseCut(in, cutFrom, model, scanned);
  if (scanned)
    return ok;
  model.Clear();
  return model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

} // namespace ampc
