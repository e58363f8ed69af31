#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace pipetrain::data_parallel {

// Which accumulation into each parameter's gradient is its last of a step, learned from
// the step before: counting starts where the step's last backward passes begin (open()),
// and a step's counts are what the next one expects (learn()). A static schedule over a
// fixed graph accumulates alike every step; where a graph changes, a guess may be wrong,
// and the caller must catch that (GradientBuckets reduces such a bucket again).
class LastAccumulations {
 public:
  static constexpr int kUnknown = -1;

  explicit LastAccumulations(std::size_t parameters)
      : expected_(parameters, kUnknown), counts_(parameters, 0) {}

  void open() { std::fill(counts_.begin(), counts_.end(), 0); }
  // One more accumulation into `parameter`; true if it is the last one expected.
  bool count(std::size_t parameter) { return ++counts_[parameter] == expected_[parameter]; }
  // Accumulations expected from open() on: 0 when the gradient is already final then;
  // kUnknown before the first learn().
  int expected(std::size_t parameter) const { return expected_[parameter]; }
  void learn() { expected_ = counts_; }

 private:
  std::vector<int> expected_;
  std::vector<int> counts_;
};

}  // namespace pipetrain::data_parallel
