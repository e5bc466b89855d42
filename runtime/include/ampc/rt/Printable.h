//===- Printable.h - Error messages kept on one line ------------*- C++ -*-===//
//
// Errors name files, nodes and tensors whose names come from the input; a
// name holding a newline or a terminal escape would break the one-line
// error (and could rewrite the terminal). Control characters are shown as
// \xNN instead.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <string_view>

namespace ampc::rt {

inline std::string printable(std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
      continue;
    }
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

} // namespace ampc::rt
