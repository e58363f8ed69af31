#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/module/recompute.h"
#include "planner/prediction.h"

namespace pipetrain::planner {

// What the user fixes; every unset field is searched.
struct LayoutLimits {
  std::optional<int64_t> devices;  // of the cluster's; unset: all of them
  std::optional<int> tensor, pipe, data, zero, chunks, context, experts;
  std::optional<bool> sequence_parallel;
  std::optional<int64_t> micro_batch;
  std::optional<schedule::Kind> schedule;
  std::optional<bool> checkpointing;
  // Selective recompute fixed for every stage of the layouts without whole-layer
  // checkpointing (empty: none); unset: none, or per stage what fits the memory.
  std::optional<module::RecomputeSet> recompute;
  int64_t max_micro_batch = 16;  // micro-batch sizes tried: powers of two up to this
};

// Within this share of the fastest step time, fitting layouts rank by peak memory (lower
// first): time that close is noise the prediction cannot settle (the tie rule).
constexpr double kTiedWithin = 0.01;

struct Candidate {
  Layout layout;
  Prediction prediction;
  std::string rejected;  // empty when it fits; else why not (e.g. out of memory)
};

// Every layout of the cluster's devices (or limits.devices) for a step of `global_batch`
// samples that the limits allow: t dividing a node's devices and the model's heads (and
// key/value heads and MLP width) and vocabulary, sequence parallelism on or off where t > 1,
// a context-parallel size c whose 2c chunks cut the sequence (GPT: without dropout), p up
// to the layer count (p · chunks what a
// `boundaries:` partition fixes), d the rest, micro-batches dividing the batch, every
// schedule (interleaved with 2 or 4 chunks), ZeRO 0 or 1, checkpointing off or on, and for
// a mixture of experts each expert-parallel size e dividing d and the experts (ZeRO 0). Each is
// predicted; those whose fullest stage exceeds the device memory are marked rejected.
// Sorted: fitting layouts by step time (within kTiedWithin of the fastest by peak memory),
// then the rejected by peak memory. Throws
// InputError when no layout exists at all (the batch, the model and the limits leave
// none), naming why.
std::vector<Candidate> plan_layouts(const Workload& workload, const Cluster& cluster,
                                    int64_t global_batch, const LayoutLimits& limits = {});

}  // namespace pipetrain::planner
