//===- MemoryPlannerTest.cpp - Arena placement against a brute-force oracle -===//

#include "ampc/Lower/MemoryPlanner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

namespace ampc {
namespace {

uint64_t aligned(uint64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

/// Best fit by definition: every placed buffer live at the same time as the
/// new one is looked at, in address order.
uint64_t bruteForceBestFit(const std::vector<BufferRequest> &reqs,
                           const std::vector<size_t> &order, std::vector<uint64_t> &offsets) {
  offsets.assign(reqs.size(), 0);
  std::vector<size_t> placed;
  uint64_t arena = 0;
  for (size_t idx : order) {
    const BufferRequest &r = reqs[idx];
    std::vector<std::pair<uint64_t, uint64_t>> live;
    for (size_t other : placed)
      if (!(reqs[other].end < r.start || r.end < reqs[other].start))
        live.push_back({offsets[other], offsets[other] + aligned(reqs[other].size)});
    std::sort(live.begin(), live.end());
    uint64_t none = std::numeric_limits<uint64_t>::max(), best = none, bestGap = none, cursor = 0;
    for (const auto &[begin, end] : live) {
      if (begin > cursor && begin - cursor >= aligned(r.size) && begin - cursor < bestGap) {
        bestGap = begin - cursor;
        best = cursor;
      }
      cursor = std::max(cursor, end);
    }
    offsets[idx] = best != none ? best : cursor;
    arena = std::max(arena, offsets[idx] + aligned(r.size));
    placed.push_back(idx);
  }
  return arena;
}

std::vector<BufferRequest> randomRequests(std::mt19937 &rng, size_t count, int steps) {
  std::uniform_int_distribution<int> step(0, steps - 1);
  std::uniform_int_distribution<int> sizeClass(0, 5);
  std::vector<BufferRequest> reqs;
  for (size_t i = 0; i < count; ++i) {
    int a = step(rng), b = step(rng);
    // Few distinct sizes, so that ties and exactly fitting gaps are common.
    uint64_t size = uint64_t(1) << (4 + 2 * sizeClass(rng));
    reqs.push_back({size + (i % 3 == 0 ? 1 : 0), std::min(a, b), std::max(a, b)});
  }
  return reqs;
}

void expectNoConflicts(const std::vector<BufferRequest> &reqs, const MemoryPlan &plan) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_LE(plan.offsets[i] + aligned(reqs[i].size), plan.arenaBytes);
    for (size_t j = i + 1; j < reqs.size(); ++j) {
      bool liveTogether = !(reqs[i].end < reqs[j].start || reqs[j].end < reqs[i].start);
      bool disjoint = plan.offsets[i] + aligned(reqs[i].size) <= plan.offsets[j] ||
                      plan.offsets[j] + aligned(reqs[j].size) <= plan.offsets[i];
      EXPECT_TRUE(!liveTogether || disjoint) << "buffers " << i << " and " << j;
    }
  }
}

/// The occupancy tree finds exactly the placement of the quadratic scan, in
/// any order, on random live ranges (short and long timelines).
TEST(MemoryPlannerTest, BestFitMatchesBruteForce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    int steps = trial % 2 ? 7 : 300;
    auto reqs = randomRequests(rng, 50 + 10 * trial, steps);
    std::vector<size_t> order(reqs.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<uint64_t> fast, slow;
    uint64_t fastArena = placeBestFit(reqs, order, fast);
    uint64_t slowArena = bruteForceBestFit(reqs, order, slow);
    ASSERT_EQ(fastArena, slowArena) << "trial " << trial;
    ASSERT_EQ(fast, slow) << "trial " << trial;
  }
}

/// planMemory never lets two buffers live at the same step share bytes, and
/// its arena lies between the peak of live bytes and the unplanned sum.
TEST(MemoryPlannerTest, PlanIsValidAndBounded) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    auto reqs = randomRequests(rng, 120, trial % 2 ? 10 : 200);
    MemoryPlan plan = planMemory(reqs);
    ASSERT_EQ(plan.offsets.size(), reqs.size());
    expectNoConflicts(reqs, plan);
    EXPECT_GE(plan.arenaBytes, plan.lowerBoundBytes);
    EXPECT_LE(plan.arenaBytes, plan.unplannedBytes);
  }
}

/// Step-order placement never overlaps live buffers either, and planMemory
/// keeps the better of it and best fit.
TEST(MemoryPlannerTest, StepOrderIsValidAndPlanKeepsTheSmaller) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    auto reqs = randomRequests(rng, 100, trial % 2 ? 12 : 150);
    MemoryPlan stepOrder;
    stepOrder.arenaBytes = placeInStepOrder(reqs, stepOrder.offsets);
    expectNoConflicts(reqs, stepOrder);
    std::vector<size_t> bySize(reqs.size());
    std::iota(bySize.begin(), bySize.end(), 0);
    std::stable_sort(bySize.begin(), bySize.end(),
                     [&](size_t a, size_t b) { return reqs[a].size > reqs[b].size; });
    std::vector<uint64_t> offsets;
    uint64_t bestFit = placeBestFit(reqs, bySize, offsets);
    MemoryPlan plan = planMemory(reqs);
    EXPECT_LE(plan.arenaBytes, std::min(stepOrder.arenaBytes, bestFit)) << "trial " << trial;
  }
}

/// Past the budget of comparisons planMemory keeps the step-order
/// placement, without starting best fit (it would cost n (n - 1) / 2).
TEST(MemoryPlannerTest, LargePlansKeepStepOrder) {
  EXPECT_EQ(bestFitComparisons(16384), 134209536u);
  EXPECT_LE(bestFitComparisons(16384), kBestFitBudget);
  EXPECT_GT(bestFitComparisons(16385 + 1000), kBestFitBudget);
  std::mt19937 rng(3);
  auto reqs = randomRequests(rng, 17385, 400);
  MemoryPlan plan = planMemory(reqs);
  std::vector<uint64_t> stepOrder;
  uint64_t arena = placeInStepOrder(reqs, stepOrder);
  EXPECT_GT(arena, plan.lowerBoundBytes) << "step order is optimal here: choose other requests";
  EXPECT_EQ(plan.arenaBytes, arena);
  EXPECT_EQ(plan.offsets, stepOrder);
}

/// Saved activations of a deep chain: nested live ranges (forward i to
/// backward i) plus short-lived temporaries; the plan reaches the lower bound.
TEST(MemoryPlannerTest, NestedActivationsReachLowerBound) {
  const int layers = 2000;
  std::vector<BufferRequest> reqs;
  for (int i = 0; i < layers; ++i) {
    reqs.push_back({512, i, 2 * layers - i});
    reqs.push_back({2048, i, i + 1});
    reqs.push_back({2048, 2 * layers - i, 2 * layers - i + 1});
  }
  MemoryPlan plan = planMemory(reqs);
  expectNoConflicts(reqs, plan);
  EXPECT_EQ(plan.arenaBytes, plan.lowerBoundBytes);
}

} // namespace
} // namespace ampc
