//===- Npy.h - NumPy .npy and .npz files ------------------------*- C++ -*-===//
//
// Reads and writes the NumPy formats that feeds, data sets, gradient dumps and
// test fixtures use: .npy version 1.0-3.0 (little-endian float16/32/64,
// int8/32/64, uint8, bool; C order) and uncompressed (stored) .npz archives.
// Part of the runtime, which depends on nothing of the compiler.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ampc::rt {

/// Element types of the runtime (the same set as the compiler's).
enum class ElemType : uint8_t { F32, F16, BF16, F64, I64, I32, I8, U8, Bool };

unsigned elemSize(ElemType t);
const char *elemName(ElemType t);

/// A host array: element type, shape and the raw little-endian bytes.
struct HostArray {
  ElemType type = ElemType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numElements() const;
  /// Element i as double (any type).
  double at(int64_t i) const;
};

/// Reads a .npy file. On failure returns false and sets `error` (one line).
bool readNpy(const std::string &path, HostArray &out, std::string &error);
/// Parses .npy bytes held in memory (`what` names them in errors).
bool parseNpy(const std::string &bytes, const std::string &what, HostArray &out,
              std::string &error);
/// Serializes an array as .npy bytes (bfloat16 is written as its uint16 bits).
std::string npyBytes(const HostArray &a);
/// Writes a .npy file atomically.
bool writeNpy(const std::string &path, const HostArray &a, std::string &error);

/// Reads every array of an uncompressed .npz archive, keyed by name (no ".npy").
bool readNpz(const std::string &path, std::map<std::string, HostArray> &out, std::string &error);
/// The same from the archive's bytes in memory (`path` names it in errors).
bool parseNpz(const std::string &bytes, const std::string &path,
              std::map<std::string, HostArray> &out, std::string &error);
/// Writes an uncompressed .npz archive atomically.
bool writeNpz(const std::string &path, const std::map<std::string, HostArray> &arrays,
              std::string &error);

/// Whether a write must survive a power loss (checkpoints, trained weights:
/// the temporary is fsync'ed before the rename) or only a crash of the
/// process (compiler output, where fsync cost 0.3 s for an 8 MB plan here).
enum class Durability { PowerLoss, ProcessCrash };

/// Writes bytes to `path` through a temporary file in the same folder and a
/// rename, so a reader never sees a partial file.
bool writeFileAtomic(const std::string &path, const std::string &bytes, std::string &error,
                     Durability durability = Durability::PowerLoss);
/// The same for a file made of pieces written one after the other (a plan:
/// its message, then tensor values held elsewhere), without joining them.
bool writeFileAtomic(const std::string &path, std::span<const std::string_view> pieces,
                     std::string &error, Durability durability = Durability::PowerLoss);

} // namespace ampc::rt
