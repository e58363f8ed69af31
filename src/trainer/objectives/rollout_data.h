#pragma once

#include <cstdint>

#include "pipetrain/models/builtin_model.h"

namespace pipetrain::trainer {

struct Job;

// With objective.type "policy_gradient": the job trains with the clipped policy-gradient loss
// (policy_gradient_loss) on rollouts: the prepared examples of data.paths with
// objective.rollouts' numbers beside them, or, without objective.rollouts, the micro-batches
// a program feeds (no data sources: the Python door's iterators). InputError for a rollouts file
// whose numbers do not match the examples' tokens, packing, context parallelism, a model without
// per-token log-probabilities.
void build_rollout_data(Job& job, const models::TokenInput& tokens, int64_t replica);

}  // namespace pipetrain::trainer
