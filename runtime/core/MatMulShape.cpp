//===- MatMulShape.cpp - ONNX MatMul shape rules for the backends ----------===//

#include "ampc/rt/MatMulShape.h"

#include <algorithm>

namespace ampc::rt {

bool matMulShape(const std::vector<int64_t> &a, const std::vector<int64_t> &b,
                 int64_t resultNumel, const std::string &aText, const std::string &bText,
                 const std::string &yText, MatMulShape &out, std::string &error) {
  std::vector<int64_t> as = a, bs = b;
  if (as.empty() || bs.empty()) {
    error = "MatMul operands must have rank >= 1";
    return false;
  }
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  out.M = as[as.size() - 2];
  out.K = as.back();
  out.N = bs.back();
  if (bs[bs.size() - 2] != out.K) {
    error = "inner dimensions differ: " + aText + " x " + bText;
    return false;
  }
  out.batchA.assign(as.begin(), as.end() - 2);
  out.batchB.assign(bs.begin(), bs.end() - 2);
  size_t r = std::max(out.batchA.size(), out.batchB.size());
  out.batchA.insert(out.batchA.begin(), r - out.batchA.size(), 1);
  out.batchB.insert(out.batchB.begin(), r - out.batchB.size(), 1);
  out.batch.assign(r, 1);
  int64_t count = 1;
  for (size_t i = 0; i < r; ++i) {
    int64_t x = out.batchA[i], y = out.batchB[i];
    if (x != y && x != 1 && y != 1) {
      error = "batch dimensions do not broadcast: " + aText + " x " + bText;
      return false;
    }
    out.batch[i] = x == 1 ? y : x; // 1 broadcasts to the other, 0 included
    count *= out.batch[i];
  }
  if (count * out.M * out.N != resultNumel) {
    error = "result " + yText + " does not match the operands";
    return false;
  }
  return true;
}

} // namespace ampc::rt
