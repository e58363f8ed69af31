#pragma once

#include <cstdint>

#include "pipetrain/models/builtin_model.h"

namespace pipetrain::trainer {

struct Job;

// With objective.type "dpo": the job's loss becomes DPO's over the pairs of its data
// (prepare-data --preference), the reference's log-probabilities scored (or read) first,
// and job.preference collects TRL's metrics. InputError for what DPO cannot train on: data
// without pairs, packing, context parallelism, a mixture of experts. Collective.
void build_preference_data(Job& job, const models::TokenInput& tokens, int64_t replica);

}  // namespace pipetrain::trainer
