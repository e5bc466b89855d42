//===- GraphTest.cpp - IR construction, use lists, verifier ---------------===//

#include "ampc/IR/Graph.h"
#include "ampc/IR/IdMap.h"
#include "ampc/IR/Verifier.h"

#include <gtest/gtest.h>

using namespace ampc;

namespace {
TensorType f32(Shape s) { return TensorType(DType::F32, std::move(s)); }
} // namespace

/// Operands and use lists stay in sync through setInput and RAUW.
TEST(Graph, UseLists) {
  Graph g;
  Value *x = g.addInput("x", f32({2}));
  Node *a = g.createNode("Relu", {x}, {f32({2})});
  Node *b = g.createNode("Add", {a->output(), x}, {f32({2})});
  g.addOutput(b->output());
  EXPECT_EQ(x->uses().size(), 2u);
  EXPECT_EQ(a->output()->uses().size(), 1u);
  a->output()->replaceAllUsesWith(x);
  EXPECT_EQ(x->uses().size(), 3u - 1u + 1u);
  EXPECT_TRUE(a->output()->isDead());
  g.eraseNode(a);
  EXPECT_FALSE(static_cast<bool>(verifyGraph(g)));
  EXPECT_EQ(g.numNodes(), 1u);
}

/// Graph outputs are rewired by RAUW and counted.
TEST(Graph, OutputsFollowReplacement) {
  Graph g;
  Value *x = g.addInput("x", f32({2}));
  Node *a = g.createNode("Relu", {x}, {f32({2})});
  g.addOutput(a->output());
  Node *b = g.createNode("Neg", {x}, {f32({2})});
  a->output()->replaceAllUsesWith(b->output());
  EXPECT_EQ(g.outputs()[0], b->output());
  EXPECT_TRUE(a->output()->isDead());
  EXPECT_TRUE(b->output()->isGraphOutput());
}

/// Names are made unique; topologicalSort repairs an order and detects cycles.
TEST(Graph, NamesAndOrder) {
  Graph g;
  Value *x = g.addInput("x", f32({2}));
  Node *a = g.createNode("Relu", {x}, {f32({2})}, {}, "", "", {"y"});
  Node *b = g.createNode("Relu", {x}, {f32({2})}, {}, "", "", {"y"});
  EXPECT_EQ(a->output()->name(), "y");
  EXPECT_EQ(b->output()->name(), "y_1");
  Node *c = g.createNode("Add", {a->output(), b->output()}, {f32({2})});
  g.addOutput(c->output());
  g.moveBefore(c, a);
  llvm::Error misordered = verifyGraph(g);
  EXPECT_TRUE(static_cast<bool>(misordered));
  llvm::consumeError(std::move(misordered));
  EXPECT_TRUE(g.topologicalSort());
  EXPECT_FALSE(static_cast<bool>(verifyGraph(g)));
  EXPECT_EQ(g.nodes().back(), c);
}

/// topologicalSort keeps the current order where it is valid: a valid order
/// is left as it is, and a repaired one moves only what must move.
TEST(Graph, SortKeepsTheCurrentOrder) {
  Graph g;
  Value *x = g.addInput("x", f32({2}));
  std::vector<Node *> relus;
  for (int i = 0; i < 4; ++i)
    relus.push_back(g.createNode("Relu", {x}, {f32({2})}));
  Node *sum = g.createNode("Add", {relus[3]->output(), relus[1]->output()}, {f32({2})});
  Node *last = g.createNode("Neg", {sum->output()}, {f32({2})});
  g.addOutput(last->output());
  std::vector<Node *> valid = g.nodes();
  EXPECT_TRUE(g.topologicalSort());
  EXPECT_EQ(g.nodes(), valid);
  // Moved to the front, the Add and the Neg go back to just after the last
  // Relu they read; the other nodes keep their places.
  g.moveBefore(sum, relus[0]);
  g.moveBefore(last, sum);
  EXPECT_TRUE(g.topologicalSort());
  std::vector<Node *> expected = {relus[0], relus[1], relus[2], relus[3], sum, last};
  EXPECT_EQ(g.nodes(), expected);
  g.moveBefore(relus[2], relus[0]);
  g.moveBefore(sum, relus[1]);
  EXPECT_TRUE(g.topologicalSort());
  expected = {relus[2], relus[0], relus[1], relus[3], sum, last};
  EXPECT_EQ(g.nodes(), expected);
}

/// Values and nodes are numbered in creation order, below the graph's
/// bounds, and never renumbered; IdMap reads an unset key as its absent value
/// and grows for keys made after it.
TEST(Graph, IdsAndIdMaps) {
  Graph g;
  Value *x = g.addInput("x", f32({2}));
  Node *a = g.createNode("Relu", {x}, {f32({2})});
  Node *b = g.createNode("Neg", {a->output()}, {f32({2})});
  EXPECT_LT(x->id(), a->output()->id());
  EXPECT_LT(a->output()->id(), b->output()->id());
  EXPECT_LT(a->id(), b->id());
  EXPECT_EQ(g.valueIdBound(), b->output()->id() + 1);
  EXPECT_EQ(g.nodeIdBound(), b->id() + 1);

  NodeIdMap<size_t> position(static_cast<size_t>(-1));
  position[b] = 7;
  EXPECT_EQ(position.lookup(b), 7u);
  EXPECT_FALSE(position.contains(a));
  EXPECT_EQ(position.lookup(a), static_cast<size_t>(-1));
  g.addOutput(b->output());
  Node *c = g.createNode("Abs", {b->output()}, {f32({2})});
  EXPECT_EQ(c->id(), g.nodeIdBound() - 1);
  EXPECT_FALSE(position.contains(c)); // made after the map, beyond its array
  position[c] = 9;
  EXPECT_EQ(position.lookup(c), 9u);
  EXPECT_EQ(position.lookup(b), 7u);

  ValueIdMap<std::vector<int>> lists;
  lists[c->output()].push_back(3);
  EXPECT_TRUE(lists.lookup(x).empty());
  EXPECT_EQ(lists.lookup(c->output()).size(), 1u);
  // Erasing a node does not renumber the others.
  unsigned cId = c->id();
  g.eraseNode(c);
  Node *d = g.createNode("Abs", {b->output()}, {f32({2})});
  EXPECT_GT(d->id(), cId);
}

/// A cycle is reported by the verifier and refused by topologicalSort.
TEST(Graph, Cycle) {
  Graph g;
  Value *x = g.addInput("x", f32({2}));
  Node *a = g.createNode("Add", {x, x}, {f32({2})});
  Node *b = g.createNode("Relu", {a->output()}, {f32({2})});
  a->setInput(1, b->output());
  g.addOutput(b->output());
  llvm::Error err = verifyGraph(g);
  ASSERT_TRUE(static_cast<bool>(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("before it is defined"), std::string::npos);
  EXPECT_FALSE(g.topologicalSort());
}
