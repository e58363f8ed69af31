#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

namespace pipetrain::data {

// This replica's place among the data-parallel replicas.
struct SampleShare {
  int64_t replica = 0;
  int64_t replicas = 1;
};

// Where a source stands in one global sequence of samples, as Megatron's samplers index
// consumed samples: replica r of R reads global sample (j x batch + i) x R + r as row i of
// its micro-batch j. Global batch s (B = batch x micro-batches x R samples) is then samples
// [s B, (s + 1) B) at any batch, micro-batch count and data-parallel size, so a source whose
// sample k depends on (seed, k) alone reads the same global batches at every layout.
// The state is the global samples consumed, {"samples": N}: a resume at another layout
// goes on from the same sample.
class SamplePosition {
 public:
  SamplePosition(int64_t batch, SampleShare share);
  // The global index of row `row` of the next micro-batch.
  int64_t sample(int64_t row) const {
    return (micro_batches_ * batch_ + row) * share_.replicas + share_.replica;
  }
  void advance() { ++micro_batches_; }
  nlohmann::json state() const;
  // InputError unless {"samples": N} with N a whole number of this replica set's micro-batches.
  void restore(const nlohmann::json& state);

 private:
  int64_t batch_;
  SampleShare share_;
  int64_t micro_batches_ = 0;  // drawn by this replica
};

}  // namespace pipetrain::data
