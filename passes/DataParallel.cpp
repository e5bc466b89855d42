//===- DataParallel.cpp - Average gradients across data-parallel ranks -----===//
//
// Data parallelism as PyTorch's DistributedDataParallel does it: every rank
// runs the same step on its own shard of the global batch, and the local
// gradients are averaged across ranks before anything reads them. This pass
// marks where: it runs after autodiff (and accumulate) and before
// loss-scale, and routes every parameter gradient through ampc.AllReduce
// nodes, so that
//   - the overflow check of loss-scale sees the averaged gradients: an inf or
//     NaN on any rank becomes inf/NaN on every rank, and every rank skips the
//     step (found_inf is reduced with the gradients, no extra message);
//   - clipping and the optimizer read the average, so every rank applies the
//     same update to the same parameters;
//   - with --accumulate=N only the apply program communicates (the nodes read
//     the accumulated buffers' mean).
// Gradients go in buckets of about `bucket-mb` MB of fp32 (DDP's 25 MB), in
// the reverse order of the parameters, roughly the order in which backward
// produces them; each bucket is one ampc.AllReduce (fp32 in, fp32 out; lower
// precision gradients are widened first), placed right after the node that
// computes its last gradient: the runtime starts sending it there and waits
// only where the first reader of an average runs, so communication overlaps
// the rest of the backward pass. In one process the runtime's kernel is a
// copy (amp-run, docs/distributed.md).
//
//===----------------------------------------------------------------------===//

#include "ampc/Passes/Passes.h"
#include "ampc/Passes/Training.h"
#include "ampc/Support/Error.h"

#include <algorithm>
#include <unordered_map>

namespace ampc {

namespace {

class DataParallelPass : public Pass {
public:
  explicit DataParallelPass(double bucketMB) : bucketMB_(bucketMB) {}
  llvm::StringRef name() const override { return "data-parallel"; }

  llvm::Error run(Graph &g, PassContext &ctx) override {
    if (!(bucketMB_ > 0))
      return makeError("data-parallel: bucket-mb must be positive");
    for (const Node *n : g.nodes())
      if (n->isAmpc("AllReduce"))
        return makeError("data-parallel: the graph already averages gradients across ranks");
    if (g.metadata.count(std::string(kInfoPrefix) + "loss_scale"))
      return makeError("data-parallel must run before loss-scale (the overflow check must see "
                       "the averaged gradients)");
    std::vector<GradientOutput> grads = findGradients(g);
    if (grads.empty())
      return makeError("no gradient outputs (<param>_grad): run autodiff first, or use amp-opt "
                       "--train --data-parallel, which builds the whole training step");
    const int64_t limit = static_cast<int64_t>(bucketMB_ * 1e6);
    order_ = g.nodes();
    for (size_t i = 0; i < order_.size(); ++i)
      position_[order_[i]] = i;
    Builder b(g, "data_parallel/");
    std::vector<GradientOutput> bucket;
    int64_t bytes = 0, buckets = 0;
    auto flush = [&] {
      if (bucket.empty())
        return;
      emitBucket(g, b, bucket, buckets++);
      bucket.clear();
      bytes = 0;
    };
    for (auto it = grads.rbegin(); it != grads.rend(); ++it) {
      int64_t size = it->grad->type().numElements() * 4;
      if (!bucket.empty() && bytes + size > limit)
        flush();
      bucket.push_back(*it);
      bytes += size;
    }
    flush();
    std::string desc = std::to_string(grads.size()) + " gradients in " + std::to_string(buckets) +
                       " buckets of at most " + formatOptionValue(bucketMB_) + " MB";
    g.metadata[std::string(kInfoPrefix) + "data_parallel"] = desc;
    ctx.addReport("data-parallel", "data-parallel: " + desc);
    return llvm::Error::success();
  }

private:
  /// One ampc.AllReduce averaging `bucket`'s gradients in fp32; each
  /// gradient output becomes the average (in its own type).
  void emitBucket(Graph &g, Builder &b, const std::vector<GradientOutput> &bucket,
                  int64_t index) {
    // Right after the last producer among the bucket's gradients.
    size_t last = 0;
    bool produced = false;
    for (const GradientOutput &go : bucket)
      if (Node *p = go.grad->producer(); p && position_.count(p)) {
        last = std::max(last, position_[p]);
        produced = true;
      }
    Node *before = produced && last + 1 < order_.size() ? order_[last + 1] : nullptr;
    Graph::InsertionGuard guard(g, before);
    std::vector<Value *> inputs;
    std::vector<TensorType> types;
    for (const GradientOutput &go : bucket) {
      Value *grad = go.grad->dtype() == DType::F32 ? go.grad : b.cast(go.grad, DType::F32);
      inputs.push_back(grad);
      types.push_back(grad->type());
    }
    Node *n = b.node("AllReduce", inputs, types, {{"bucket", Attribute::ofInt(index)}},
                     std::string(kAmpcDomain));
    for (size_t i = 0; i < bucket.size(); ++i) {
      Value *avg = n->output(static_cast<unsigned>(i));
      if (bucket[i].grad->dtype() != DType::F32)
        avg = b.cast(avg, bucket[i].grad->dtype());
      replaceOutput(g, bucket[i], avg, "local");
    }
  }

  double bucketMB_;
  std::vector<Node *> order_;                  // the nodes before the pass, in order
  std::unordered_map<const Node *, size_t> position_;
};

} // namespace

void registerDataParallelPass() {
  PassRegistry::add({"data-parallel",
                     "Average every gradient across data-parallel ranks (ampc.AllReduce in "
                     "fp32 buckets) before loss scaling and the optimizer",
                     {{"bucket-mb", OptionType::Float, "bucket size in MB of fp32 gradients",
                       "25", {}}},
                     "bucket-mb",
                     [](const PassOptions &o) {
                       return std::make_unique<DataParallelPass>(o.getFloat("bucket-mb"));
                     }});
}

} // namespace ampc
