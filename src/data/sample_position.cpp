#include "data/sample_position.h"

#include <stdexcept>
#include <string>

#include "pipetrain/io/errors.h"

namespace pipetrain::data {

SamplePosition::SamplePosition(int64_t batch, SampleShare share) : batch_(batch), share_(share) {
  if (batch_ < 1 || share_.replicas < 1 || share_.replica < 0 || share_.replica >= share_.replicas)
    throw std::invalid_argument("SamplePosition: a batch of at least 1 and a replica of the set");
}

nlohmann::json SamplePosition::state() const {
  return {{"samples", micro_batches_ * batch_ * share_.replicas}};
}

void SamplePosition::restore(const nlohmann::json& state) {
  if (!state.is_object() || !state.contains("samples") || !state["samples"].is_number_integer() ||
      state["samples"].get<int64_t>() < 0) {
    throw io::InputError("checkpoint data position must be {\"samples\": N}, N >= 0, got " +
                         state.dump());
  }
  const int64_t samples = state["samples"].get<int64_t>();
  const int64_t per_micro_batch = batch_ * share_.replicas;
  if (samples % per_micro_batch != 0) {
    throw io::InputError("checkpoint data position: " + std::to_string(samples) +
                         " samples consumed are not a whole number of micro-batches of " +
                         std::to_string(batch_) + " samples on each of " +
                         std::to_string(share_.replicas) +
                         " replicas (choose a micro-batch size and data-parallel size whose "
                         "product divides it)");
  }
  micro_batches_ = samples / per_micro_batch;
}

}  // namespace pipetrain::data
