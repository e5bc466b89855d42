//===- Npy.cpp - NumPy .npy and .npz files ---------------------------------===//

#include "ampc/rt/Npy.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ampc::rt {

unsigned elemSize(ElemType t) {
  switch (t) {
  case ElemType::F64:
  case ElemType::I64:
    return 8;
  case ElemType::F32:
  case ElemType::I32:
    return 4;
  case ElemType::F16:
  case ElemType::BF16:
    return 2;
  case ElemType::I8:
  case ElemType::U8:
  case ElemType::Bool:
    return 1;
  }
  return 0;
}

const char *elemName(ElemType t) {
  switch (t) {
  case ElemType::F32:
    return "float32";
  case ElemType::F16:
    return "float16";
  case ElemType::BF16:
    return "bfloat16";
  case ElemType::F64:
    return "float64";
  case ElemType::I64:
    return "int64";
  case ElemType::I32:
    return "int32";
  case ElemType::I8:
    return "int8";
  case ElemType::U8:
    return "uint8";
  case ElemType::Bool:
    return "bool";
  }
  return "?";
}

int64_t HostArray::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

namespace {

template <typename T> T load(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

double halfToDouble(uint16_t h) {
  int exp = (h >> 10) & 0x1F, frac = h & 0x3FF;
  double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 0x1F)
    return frac ? NAN : sign * INFINITY;
  if (exp == 0)
    return sign * std::ldexp(frac, -24);
  return sign * std::ldexp(1024 + frac, exp - 25);
}

} // namespace

double HostArray::at(int64_t i) const {
  const uint8_t *p = bytes.data() + i * elemSize(type);
  switch (type) {
  case ElemType::F32:
    return load<float>(p);
  case ElemType::F64:
    return load<double>(p);
  case ElemType::F16:
    return halfToDouble(load<uint16_t>(p));
  case ElemType::BF16: {
    uint32_t u = static_cast<uint32_t>(load<uint16_t>(p)) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  case ElemType::I64:
    return static_cast<double>(load<int64_t>(p));
  case ElemType::I32:
    return load<int32_t>(p);
  case ElemType::I8:
    return load<int8_t>(p);
  case ElemType::U8:
  case ElemType::Bool:
    return *p;
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// .npy
//===----------------------------------------------------------------------===//

namespace {

struct Descr {
  const char *text;
  ElemType type;
};
const Descr kDescrs[] = {{"<f4", ElemType::F32}, {"<f2", ElemType::F16}, {"<f8", ElemType::F64},
                         {"<i8", ElemType::I64}, {"<i4", ElemType::I32}, {"|i1", ElemType::I8},
                         {"|u1", ElemType::U8},  {"|b1", ElemType::Bool}, {"<u2", ElemType::BF16}};

/// Extracts the quoted value of `key` or the raw text up to the next comma.
bool headerField(const std::string &header, const std::string &key, std::string &value) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos)
    return false;
  size_t colon = header.find(':', k);
  if (colon == std::string::npos)
    return false;
  size_t start = header.find_first_not_of(" ", colon + 1);
  if (start == std::string::npos)
    return false;
  if (header[start] == '\'') {
    size_t end = header.find('\'', start + 1);
    value = header.substr(start + 1, end - start - 1);
  } else if (header[start] == '(') {
    size_t end = header.find(')', start);
    value = header.substr(start + 1, end - start - 1);
  } else {
    size_t end = header.find_first_of(",}", start);
    value = header.substr(start, end - start);
  }
  return true;
}

} // namespace

bool parseNpy(const std::string &bytes, const std::string &what, HostArray &out,
              std::string &error) {
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) {
    error = what + ": not a .npy file";
    return false;
  }
  uint8_t major = static_cast<uint8_t>(bytes[6]);
  size_t headerLen, offset;
  if (major == 1) {
    headerLen = load<uint16_t>(reinterpret_cast<const uint8_t *>(bytes.data() + 8));
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) {
      error = what + ": truncated .npy header";
      return false;
    }
    headerLen = load<uint32_t>(reinterpret_cast<const uint8_t *>(bytes.data() + 8));
    offset = 12;
  } else {
    error = what + ": unsupported .npy version " + std::to_string(major);
    return false;
  }
  if (offset + headerLen > bytes.size()) {
    error = what + ": truncated .npy header";
    return false;
  }
  std::string header = bytes.substr(offset, headerLen);
  std::string descr, fortran, shape;
  if (!headerField(header, "descr", descr) || !headerField(header, "fortran_order", fortran) ||
      !headerField(header, "shape", shape)) {
    error = what + ": malformed .npy header";
    return false;
  }
  if (fortran.find("True") != std::string::npos) {
    error = what + ": Fortran-ordered arrays are not supported";
    return false;
  }
  if (fortran.find("False") == std::string::npos) {
    error = what + ": malformed .npy header (fortran_order is neither True nor False)";
    return false;
  }
  bool known = false;
  for (const Descr &d : kDescrs)
    if (descr == d.text) {
      out.type = d.type;
      known = true;
    }
  if (!known) {
    error = what + ": unsupported dtype '" + descr + "'";
    return false;
  }
  out.shape.clear();
  std::stringstream ss(shape);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t s = item.find_first_not_of(" ");
    if (s == std::string::npos)
      continue;
    char *end = nullptr;
    errno = 0;
    long long d = std::strtoll(item.c_str() + s, &end, 10);
    if (end == item.c_str() + s || item.find_first_not_of(" ", end - item.c_str()) != std::string::npos ||
        errno == ERANGE) {
      error = what + ": bad dimension '" + item.substr(s) + "' in the shape";
      return false;
    }
    if (d < 0) {
      error = what + ": negative dimension";
      return false;
    }
    out.shape.push_back(d);
  }
  // The header's shape is untrusted: its byte count must not wrap around
  // (a huge shape would then pass the size check below).
  uint64_t dataBytes = elemSize(out.type);
  for (int64_t d : out.shape)
    if (__builtin_mul_overflow(dataBytes, static_cast<uint64_t>(d), &dataBytes)) {
      error = what + ": the shape holds more bytes than can be addressed";
      return false;
    }
  size_t start = offset + headerLen;
  if (bytes.size() - start < dataBytes) {
    error = what + ": truncated data (" + std::to_string(bytes.size() - start) + " of " +
            std::to_string(dataBytes) + " bytes)";
    return false;
  }
  out.bytes.assign(bytes.begin() + start, bytes.begin() + start + dataBytes);
  return true;
}

namespace {
bool readFile(const std::string &path, std::string &bytes, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot open the file";
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  bytes = ss.str();
  return true;
}
} // namespace

bool readNpy(const std::string &path, HostArray &out, std::string &error) {
  std::string bytes;
  return readFile(path, bytes, error) && parseNpy(bytes, path, out, error);
}

std::string npyBytes(const HostArray &a) {
  const char *descr = "<f4";
  for (const Descr &d : kDescrs)
    if (d.type == a.type)
      descr = d.text;
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i)
    shape += std::to_string(a.shape[i]) + (a.shape.size() == 1 ? "," : (i + 1 < a.shape.size() ? ", " : ""));
  shape += ")";
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " +
                       shape + ", }";
  // Pad so that the data starts at a multiple of 64 bytes, ending with '\n'.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(1);
  out += static_cast<char>(0);
  uint16_t len = static_cast<uint16_t>(header.size());
  out.append(reinterpret_cast<const char *>(&len), 2);
  out += header;
  out.append(reinterpret_cast<const char *>(a.bytes.data()), a.bytes.size());
  return out;
}

namespace {

bool writeAll(int fd, std::string_view bytes) {
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

/// Writes without a temporary: into a device or FIFO (opened as is), or
/// into this process's own standard stream (`stream` >= 0) where the path
/// reaches it through /dev/stdout or /proc/self/fd — reopening that file
/// would truncate what the shell redirected there.
bool writeInPlace(const std::string &path, int stream, std::span<const std::string_view> pieces,
                  std::string &error) {
  std::fflush(nullptr);
  int fd = stream >= 0 ? stream : ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
  bool ok = fd >= 0;
  for (std::string_view piece : pieces)
    ok = ok && writeAll(fd, piece);
  if (stream < 0 && fd >= 0)
    ok = ::close(fd) == 0 && ok;
  if (!ok)
    error = path + ": write failed (" + std::strerror(errno) + ")";
  return ok;
}

/// The standard stream (1 or 2) that `st` is, or -1.
int standardStreamOf(const struct stat &st) {
  for (int fd : {1, 2}) {
    struct stat s;
    if (::fstat(fd, &s) == 0 && s.st_dev == st.st_dev && s.st_ino == st.st_ino)
      return fd;
  }
  return -1;
}

/// The regular file an atomic write replaces: the path, or what its chain
/// of symbolic links names (resolved by hand, so that a link to a file not
/// yet written still says where to create it).
bool linkTarget(const std::string &path, std::string &target, std::string &error) {
  target = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (::lstat(target.c_str(), &st) != 0 || !S_ISLNK(st.st_mode))
      return true;
    std::vector<char> buf(static_cast<size_t>(st.st_size > 0 ? st.st_size : 4096) + 1);
    ssize_t n = ::readlink(target.c_str(), buf.data(), buf.size() - 1);
    if (n < 0) {
      error = path + ": cannot read the symbolic link (" + std::strerror(errno) + ")";
      return false;
    }
    std::string next(buf.data(), static_cast<size_t>(n));
    size_t slash = target.find_last_of('/');
    if (!next.empty() && next[0] != '/' && slash != std::string::npos)
      next = target.substr(0, slash + 1) + next;
    target = next;
  }
  error = path + ": too many levels of symbolic links";
  return false;
}

} // namespace

bool writeFileAtomic(const std::string &path, const std::string &bytes, std::string &error,
                     Durability durability) {
  std::string_view piece(bytes);
  return writeFileAtomic(path, std::span<const std::string_view>(&piece, 1), error, durability);
}

bool writeFileAtomic(const std::string &path, std::span<const std::string_view> pieces,
                     std::string &error, Durability durability) {
  // Only a regular file is replaced through a temporary and a rename: a
  // device (/dev/null), a FIFO, a terminal, or a standard stream redirected
  // to a file is written in place (renaming over it would replace the
  // device node, or the file the shell redirected to), and a symbolic link
  // keeps pointing where it did while the file it names is replaced.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    int stream = standardStreamOf(st);
    if (stream >= 0 || (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)))
      return writeInPlace(path, stream, pieces, error);
  }
  std::string target;
  if (!linkTarget(path, target, error))
    return false;
  std::string tmp = target + ".tmp." + std::to_string(::getpid());
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    error = path + ": cannot write (" + std::strerror(errno) + ")";
    return false;
  }
  // Test hook: AMPC_CRASH_DURING_WRITE=<file name>[:N] kills the process
  // halfway through writing that file's temporary (the N-th time, default
  // the first), as a crash or kill -9 would; the fault tests check that the
  // previous file stays intact and loadable.
  if (const char *crash = std::getenv("AMPC_CRASH_DURING_WRITE")) {
    std::string target = crash;
    long nth = 1;
    size_t colon = target.find(':');
    if (colon != std::string::npos) {
      nth = std::strtol(target.c_str() + colon + 1, nullptr, 10);
      target.resize(colon);
    }
    static long writesOfTarget = 0;
    std::string base = path.substr(path.find_last_of('/') + 1);
    if (base == target && ++writesOfTarget >= nth) {
      size_t total = 0;
      for (std::string_view piece : pieces)
        total += piece.size();
      for (size_t left = total / 2, k = 0; left > 0 && k < pieces.size(); ++k) {
        size_t n = std::min(left, pieces[k].size());
        std::fwrite(pieces[k].data(), 1, n, f);
        left -= n;
      }
      std::fflush(f);
      std::abort();
    }
  }
  bool ok = true;
  for (std::string_view piece : pieces)
    ok = ok && std::fwrite(piece.data(), 1, piece.size(), f) == piece.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (durability == Durability::ProcessCrash || ::fsync(fileno(f)) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), target.c_str()) != 0) {
    error = path + ": write failed (" + std::strerror(errno) + ")";
    std::remove(tmp.c_str());
    return false;
  }
  // The rename itself lives in the folder: sync it too, or a power loss can
  // bring back the old file (or none) after a reported success.
  if (durability == Durability::PowerLoss) {
    size_t slash = target.find_last_of('/');
    std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : target.substr(0, slash);
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
  }
  return true;
}

bool writeNpy(const std::string &path, const HostArray &a, std::string &error) {
  return writeFileAtomic(path, npyBytes(a), error);
}

//===----------------------------------------------------------------------===//
// .npz (zip)
//===----------------------------------------------------------------------===//

namespace {

uint32_t u32(const std::string &b, size_t at) {
  return load<uint32_t>(reinterpret_cast<const uint8_t *>(b.data() + at));
}
uint16_t u16(const std::string &b, size_t at) {
  return load<uint16_t>(reinterpret_cast<const uint8_t *>(b.data() + at));
}
uint64_t u64(const std::string &b, size_t at) {
  return load<uint64_t>(reinterpret_cast<const uint8_t *>(b.data() + at));
}

/// [at, at + len) lies inside a buffer of `size` bytes (no wrap-around:
/// offsets and lengths come from the file).
bool within(uint64_t at, uint64_t len, size_t size) { return at <= size && len <= size - at; }

/// Deflate expands its input at most ~1032 times: a claimed size beyond that
/// is a lie, refused before anything is allocated for it.
constexpr uint64_t kMaxDeflateRatio = 1032;

/// Inflates raw deflate data into exactly `size` bytes, in chunks zlib's
/// 32-bit counters can take.
bool inflateRaw(const std::string &in, uint64_t size, std::string &out) {
  out.assign(size, '\0');
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
    return false;
  constexpr uint64_t kChunk = 1u << 30;
  uint64_t inPos = 0, outPos = 0;
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (zs.avail_in == 0 && inPos < in.size()) {
      uint64_t n = std::min<uint64_t>(kChunk, in.size() - inPos);
      zs.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(in.data() + inPos));
      zs.avail_in = static_cast<uInt>(n);
      inPos += n;
    }
    if (zs.avail_out == 0) {
      if (outPos >= size)
        break; // more data than claimed: refused below
      uint64_t n = std::min<uint64_t>(kChunk, size - outPos);
      zs.next_out = reinterpret_cast<Bytef *>(out.data() + outPos);
      zs.avail_out = static_cast<uInt>(n);
      outPos += n;
    }
    rc = inflate(&zs, inPos < in.size() ? Z_NO_FLUSH : Z_FINISH);
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && inPos >= in.size())
      break; // input ended before the stream did
  }
  inflateEnd(&zs);
  return rc == Z_STREAM_END && zs.total_out == size;
}

} // namespace

bool readNpz(const std::string &path, std::map<std::string, HostArray> &out, std::string &error) {
  std::string b;
  if (!readFile(path, b, error))
    return false;
  return parseNpz(b, path, out, error);
}

bool parseNpz(const std::string &b, const std::string &path, std::map<std::string, HostArray> &out,
              std::string &error) {
  // End of central directory: scan back over a possible comment.
  size_t eocd = std::string::npos;
  if (b.size() >= 22)
    for (size_t i = b.size() - 22 + 1; i-- > 0;)
      if (u32(b, i) == 0x06054b50) {
        eocd = i;
        break;
      }
  if (eocd == std::string::npos) {
    error = path + ": not an .npz (zip) archive";
    return false;
  }
  uint64_t entries = u16(b, eocd + 10);
  uint64_t cdOffset = u32(b, eocd + 16);
  if (cdOffset == 0xFFFFFFFF || entries == 0xFFFF) {
    // ZIP64: the locator sits right before the EOCD record.
    if (eocd < 20 || u32(b, eocd - 20) != 0x07064b50) {
      error = path + ": malformed ZIP64 archive";
      return false;
    }
    uint64_t z64 = u64(b, eocd - 20 + 8);
    if (!within(z64, 56, b.size()) || u32(b, z64) != 0x06064b50) {
      error = path + ": malformed ZIP64 archive";
      return false;
    }
    entries = u64(b, z64 + 32);
    cdOffset = u64(b, z64 + 48);
  }
  // Each entry's central record takes 46 bytes at least.
  if (entries > b.size() / 46) {
    error = path + ": malformed central directory";
    return false;
  }
  uint64_t p = cdOffset;
  for (uint64_t e = 0; e < entries; ++e) {
    if (!within(p, 46, b.size()) || u32(b, p) != 0x02014b50) {
      error = path + ": malformed central directory";
      return false;
    }
    uint16_t method = u16(b, p + 10);
    uint32_t expectedCrc = u32(b, p + 16);
    uint64_t csize = u32(b, p + 20), usize = u32(b, p + 24);
    uint16_t nameLen = u16(b, p + 28), extraLen = u16(b, p + 30), commentLen = u16(b, p + 32);
    uint64_t local = u32(b, p + 42);
    if (!within(p + 46, uint64_t(nameLen) + extraLen + commentLen, b.size())) {
      error = path + ": malformed central directory";
      return false;
    }
    std::string name = b.substr(p + 46, nameLen);
    // ZIP64 extra field: the 64-bit values of the fields that are 0xFFFFFFFF.
    uint64_t x = p + 46 + nameLen, xend = x + extraLen;
    while (x + 4 <= xend) {
      uint16_t id = u16(b, x), len = u16(b, x + 2);
      if (x + 4 + len > xend) {
        error = path + ": malformed extra field of entry '" + name + "'";
        return false;
      }
      if (id == 0x0001) {
        uint64_t q = x + 4, end = x + 4 + len;
        auto next = [&](uint64_t &field) {
          if (field != 0xFFFFFFFF)
            return true;
          if (q + 8 > end)
            return false;
          field = u64(b, q);
          q += 8;
          return true;
        };
        if (!next(usize) || !next(csize) || !next(local)) {
          error = path + ": malformed ZIP64 field of entry '" + name + "'";
          return false;
        }
      }
      x += 4 + len;
    }
    p = xend + commentLen;
    if (!within(local, 30, b.size()) || u32(b, local) != 0x04034b50) {
      error = path + ": malformed entry '" + name + "'";
      return false;
    }
    uint64_t header = uint64_t(u16(b, local + 26)) + u16(b, local + 28);
    if (!within(local + 30, header, b.size()) || !within(local + 30 + header, csize, b.size())) {
      error = path + ": truncated entry '" + name + "'";
      return false;
    }
    uint64_t data = local + 30 + header;
    if (method == 8 && usize > csize * kMaxDeflateRatio + 64) {
      error = path + ": entry '" + name + "' claims " + std::to_string(usize) +
              " bytes, more than its " + std::to_string(csize) + " compressed bytes can hold";
      return false;
    }
    if (method == 0 && usize != csize) {
      error = path + ": stored entry '" + name + "' has different sizes";
      return false;
    }
    std::string raw = b.substr(data, csize), member;
    if (method == 0) {
      member = std::move(raw);
    } else if (method == 8) {
      if (!inflateRaw(raw, usize, member)) {
        error = path + ": cannot inflate entry '" + name + "'";
        return false;
      }
    } else {
      error = path + ": entry '" + name + "' uses unsupported compression " + std::to_string(method);
      return false;
    }
    // The CRC every zip entry carries: a checkpoint damaged on disk is
    // refused rather than trained from.
    uint32_t crc = 0;
    for (size_t at = 0; at < member.size(); at += 1u << 30) {
      size_t n = std::min<size_t>(member.size() - at, 1u << 30);
      crc = static_cast<uint32_t>(
          crc32(crc, reinterpret_cast<const Bytef *>(member.data() + at), static_cast<uInt>(n)));
    }
    if (crc != expectedCrc) {
      error = path + ": entry '" + name + "' fails its CRC check (the file is damaged)";
      return false;
    }
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0)
      name.resize(name.size() - 4);
    HostArray a;
    if (!parseNpy(member, path + ":" + name, a, error))
      return false;
    out[name] = std::move(a);
  }
  return true;
}

bool writeNpz(const std::string &path, const std::map<std::string, HostArray> &arrays,
              std::string &error) {
  std::string zip, central;
  auto put16 = [](std::string &s, uint16_t v) { s.append(reinterpret_cast<const char *>(&v), 2); };
  auto put32 = [](std::string &s, uint32_t v) { s.append(reinterpret_cast<const char *>(&v), 4); };
  uint16_t count = 0;
  for (const auto &[name, a] : arrays) {
    std::string data = npyBytes(a), fname = name + ".npy";
    uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef *>(data.data()), static_cast<uInt>(data.size())));
    uint32_t offset = static_cast<uint32_t>(zip.size());
    put32(zip, 0x04034b50);
    put16(zip, 20);
    put16(zip, 0);
    put16(zip, 0); // stored
    put16(zip, 0);
    put16(zip, 0x21);
    put32(zip, crc);
    put32(zip, static_cast<uint32_t>(data.size()));
    put32(zip, static_cast<uint32_t>(data.size()));
    put16(zip, static_cast<uint16_t>(fname.size()));
    put16(zip, 0);
    zip += fname + data;
    put32(central, 0x02014b50);
    put16(central, 20);
    put16(central, 20);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0x21);
    put32(central, crc);
    put32(central, static_cast<uint32_t>(data.size()));
    put32(central, static_cast<uint32_t>(data.size()));
    put16(central, static_cast<uint16_t>(fname.size()));
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put16(central, 0);
    put32(central, 0);
    put32(central, offset);
    central += fname;
    ++count;
  }
  uint32_t cdOffset = static_cast<uint32_t>(zip.size());
  zip += central;
  put32(zip, 0x06054b50);
  put16(zip, 0);
  put16(zip, 0);
  put16(zip, count);
  put16(zip, count);
  put32(zip, static_cast<uint32_t>(central.size()));
  put32(zip, cdOffset);
  put16(zip, 0);
  return writeFileAtomic(path, zip, error);
}

} // namespace ampc::rt
