#pragma once

#include <functional>
#include <mutex>
#include <vector>

// Split backward for zero-bubble schedules: a backward pass computes the gradient of the
// stage's input at once and leaves the weight gradients of linear layers, the GEMMs that
// make half of backward's work, for later (see autograd/linear.h).
namespace pipetrain::autograd {

// The weight-gradient computations deferred by one backward pass, run later in order.
class WeightGradStore {
 public:
  WeightGradStore() = default;
  WeightGradStore(const WeightGradStore&) = delete;
  WeightGradStore& operator=(const WeightGradStore&) = delete;
  WeightGradStore(WeightGradStore&& other) noexcept;
  WeightGradStore& operator=(WeightGradStore&& other) noexcept;

  // Thread-safe: autograd may run a backward on its device threads.
  void defer(std::function<void()> compute);
  // Runs (and forgets) every deferred computation, each accumulating into its weight's
  // gradient. Without autograd.
  void run();
  bool empty() const;
  void clear();

 private:
  mutable std::mutex mutex_;
  std::vector<std::function<void()>> deferred_;
};

// While alive, the process's backward passes defer the weight gradients of linear layers
// into `store` (one backward at a time: the scope is process-wide, not per thread, because
// autograd runs CUDA backward on its own threads).
class DeferWeightGrads {
 public:
  explicit DeferWeightGrads(WeightGradStore& store);
  ~DeferWeightGrads();
  DeferWeightGrads(const DeferWeightGrads&) = delete;
  DeferWeightGrads& operator=(const DeferWeightGrads&) = delete;

 private:
  WeightGradStore* previous_;
};

// The store backward passes defer into now; null when they compute weight gradients at once.
WeightGradStore* deferring_store();

// While alive, linear layers record forward passes whose weight gradient can be deferred
// (outside it they record ATen's own linear, so schedules that never split backward run
// ATen's kernels unchanged). Process-wide, like DeferWeightGrads.
class SplittableBackward {
 public:
  SplittableBackward();
  ~SplittableBackward();
  SplittableBackward(const SplittableBackward&) = delete;
  SplittableBackward& operator=(const SplittableBackward&) = delete;
};

// Whether a linear layer's forward should record a splittable node now: inside a
// SplittableBackward scope, or inside a DeferWeightGrads scope (the recomputing forward of
// a checkpointed run happens during backward).
bool recording_splittable();

}  // namespace pipetrain::autograd
