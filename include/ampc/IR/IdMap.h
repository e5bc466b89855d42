//===- IdMap.h - Arrays indexed by value and node ids -----------*- C++ -*-===//
//
// Passes that keep a fact per value or per node index an array by the
// object's id (given in creation order) instead of hashing its address: a
// hash scatters a walk of the graph over the whole table, an array follows
// the order the objects were made in. On a graph of 20,000 nodes the
// lowering's value-to-tensor map alone was 4% of the compile's last-level
// cache misses as a DenseMap.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ampc/IR/Graph.h"

#include <algorithm>
#include <vector>

namespace ampc {

/// A map from Key (Value or Node) to T, as an array indexed by Key::id().
/// Keys never set read as `absent`.
template <typename Key, typename T> class IdMap {
public:
  explicit IdMap(T absent = T()) : absent_(absent) {}

  /// The entry of k, made (as `absent`) when there is none.
  T &operator[](const Key *k) {
    size_t i = k->id();
    if (i >= data_.size())
      data_.resize(std::max(i + 1, data_.size() * 2), absent_);
    return data_[i];
  }
  /// The entry of k, or `absent`.
  const T &lookup(const Key *k) const {
    size_t i = k->id();
    return i < data_.size() ? data_[i] : absent_;
  }
  bool contains(const Key *k) const { return !(lookup(k) == absent_); }
  /// Room for ids below `bound` (Graph::valueIdBound(), Graph::nodeIdBound()).
  void reserve(size_t bound) {
    if (bound > data_.size())
      data_.resize(bound, absent_);
  }

private:
  std::vector<T> data_;
  T absent_;
};

template <typename T> using ValueIdMap = IdMap<Value, T>;
template <typename T> using NodeIdMap = IdMap<Node, T>;

} // namespace ampc
