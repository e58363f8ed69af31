#pragma once

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "pipetrain/engine/training_config.h"
#include "pipetrain/models/model_config.h"
#include "pipetrain/module/partition.h"
#include "planner/cluster.h"
#include "planner/layer_cost.h"
#include "planner/layout.h"
#include "planner/transports.h"

namespace pipetrain::planner {

// What is being trained: the model's layers and the engine settings a layout leaves alone
// (precision, optimizer, partition method, bucket sizes).
struct Workload {
  models::ModelConfig model;
  engine::TrainingConfig training;
  module::LoraConfig lora;  // under LoRA only the adapters train
  std::vector<LayerCost> layers;

  Workload(models::ModelConfig model, engine::TrainingConfig training,
           module::LoraConfig lora = {});
  bool half_precision() const;
  int element_bytes() const;  // of weights, gradients and activations
  // The layers split into `virtual_stages` as the engine would split them; worked out once
  // per count (balancing costs stages · layers² steps, and the planner asks per layout).
  const module::Partition& partition(int virtual_stages) const;

 private:
  mutable std::mutex partitions_mutex_;
  mutable std::map<int, module::Partition> partitions_;
};

// Bytes one rank of a stage holds at its peak, by what holds them.
struct StageMemory {
  double weights = 0;
  double gradients = 0;
  double masters = 0;      // fp32 copies beside a bf16/fp16 model
  double optimizer = 0;    // moments (momentum for SGD)
  double buffers = 0;      // data-parallel buckets
  double activations = 0;  // live micro-batches' saved activations at the schedule's peak
  // The optimizer step's temporaries (LibTorch's Adam forms two per parameter tensor on
  // the CPU), held after the activations are gone: the peak takes the larger of the two.
  double step_workspace = 0;
  int live_micro_batches = 0;

  double total() const {
    return weights + gradients + masters + optimizer + buffers +
           std::max(activations, step_workspace);
  }
};

// Where a step's time goes, in seconds, the terms summing to the step time: the stages'
// average busy time split by what their passes spend it on; the pipeline's idle time split
// into the transfers between stages on its fill and drain and the rest (the bubble); then
// the step's end. What `plan` names when it says why a layout lost.
struct StepTerms {
  double compute = 0;          // matrix products, elementwise work, per-layer overheads
  double tensor_parallel = 0;  // all-reduces inside the passes
  double context = 0;          // ring attention's passes of keys and values
  double expert = 0;           // the experts' all-to-alls
  double zero = 0;             // ZeRO 2-3: gathers and reduce-scatters inside the passes
  double recompute = 0;        // forward work done again in backward
  double pipe_transfers = 0;   // activations and gradients between stages (fill and drain)
  double bubble = 0;           // the rest of the stages' idle time
  double data_parallel = 0;    // gradients averaged over replicas, tied sums
  double optimizer = 0;
  double overhead = 0;  // the step's fixed cost

  double sum() const {
    return compute + tensor_parallel + context + expert + zero + recompute + pipe_transfers +
           bubble + data_parallel + optimizer + overhead;
  }
};

struct Prediction {
  double step_seconds = 0;
  StepTerms terms;
  double pipeline_seconds = 0;       // the schedule's makespan, tensor-parallel traffic in it
  double data_parallel_seconds = 0;  // gradient reduction (and ZeRO's all-gather), slowest stage
  double tied_seconds = 0;           // tied gradients summed between their stages
  double optimizer_seconds = 0;      // slowest stage
  double bubble = 0;                 // idle share of the stages' time in the schedule
  double model_flops = 0;            // per step, without recomputation
  double mfu = 0;                    // model FLOPs / (step time · devices · dense peak)
  // Bytes every rank together sends to others by expert parallelism's all-to-alls in a step
  // (tokens spread evenly over the experts): the figure a run's metrics.jsonl measures.
  double all_to_all_bytes = 0;
  // Over which transport each group runs; transfers through host memory are costed on the
  // cluster's host_staging link.
  Transports transports;
  std::vector<StageMemory> stages;

  double peak_bytes() const;  // the fullest stage's
  int peak_stage() const;
};

// Each stage's memory with `live` micro-batches' activations held (the schedule's peak,
// schedule::peak_live), without timing the step.
std::vector<StageMemory> memory_at(const Workload& w, const Cluster& c, const Layout& l,
                                   const std::vector<int>& live);

// Predicts a step of `layout`: the schedule simulated on per-stage pass times from the
// layers' FLOPs at the cluster's achieved throughput, tensor-parallel all-reduces inside
// the passes, pipe transfers on the link between stages; then the data-parallel reduction
// and the optimizer step, which pipetrain runs after the schedule. Memory per stage: the
// static tensors plus the saved activations of the most micro-batches the schedule keeps
// live. Throws InputError for a layout the model cannot take (more stages than layers).
Prediction predict(const Workload& workload, const Cluster& cluster, const Layout& layout);

// Each stage's memory before any activation (no simulation): what rules a layout out early.
std::vector<StageMemory> static_memory(const Workload& workload, const Cluster& cluster,
                                       const Layout& layout);

}  // namespace pipetrain::planner
