#include "planner/prediction.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "pipetrain/module/partition.h"
#include "pipetrain/optim/optimizer_settings.h"
#include "pipetrain/schedule/simulator.h"

namespace pipetrain::planner {
namespace {

// Bytes of optimizer state per parameter, in fp32.
double optimizer_state_bytes(const optim::OptimizerConfig& optimizer) {
  return 4.0 * optim::state_elements_per_parameter(optimizer);
}

// Bytes the optimizer step streams per parameter: reads of the parameter, its gradient and
// the state, writes of the parameter and the state; with a bf16/fp16 model also the fp32
// master and its gradient, and the copy back.
double optimizer_traffic_bytes(const optim::OptimizerConfig& optimizer, bool mixed) {
  const double state = optimizer_state_bytes(optimizer);
  return 4 + 4 + 4 + 2 * state + (mixed ? 12 : 0);
}

// The layers of one virtual stage: [begin, end).
struct Span {
  int begin = 0;
  int end = 0;
};

module::Partition split_layers(const Workload& w, int virtual_stages) {
  module::LayerFacts facts;
  std::vector<double> flops;
  for (const auto& layer : w.layers) {
    facts.parameters.push_back(layer.parameters);
    facts.types.push_back(layer.type);
    flops.push_back(layer.forward_flops + layer.backward_flops());
  }
  const auto& method = w.training.pipeline.partition_method;
  if (module::partition_needs_profile(method))
    return module::partition_balanced(flops, virtual_stages);
  return module::partition_layers(method, facts, virtual_stages);
}

// Per stage: the pass times the simulator runs, and what the stage holds.
// A stage's pass time per micro-batch (all its chunks, forward and backward) by what it is
// spent on: the StepTerms the passes hold.
struct PassTerms {
  double compute = 0, tensor_parallel = 0, context = 0, expert = 0, zero = 0, recompute = 0;
  double sum() const { return compute + tensor_parallel + context + expert + zero + recompute; }
};

struct StageWork {
  double forward = 0;
  double backward_input = 0;
  double backward_weight = 0;
  PassTerms terms;               // forward + backward_input + backward_weight, by what they spend
  double parameters = 0;         // one rank's, tied copies once
  double expert_parameters = 0;  // of which routed experts' (reduced over d / e replicas)
  double saved_per_sample = 0;   // the largest chunk's, bytes
  double checkpoint_per_sample = 0;  // the largest chunk's layer inputs, bytes
  double largest_layer_saved = 0;    // per sample, bytes: one layer's recomputed activations
  double largest_recomputed = 0;     // per sample, bytes: one layer's selectively recomputed
  double workspace = 0;              // bytes: the largest layer's backward beyond its saved
  double loss_per_sample = 0;        // bytes the loss keeps per live micro-batch
  double largest_tensor = 0;         // elements of its largest parameter tensor, one rank's
  double largest_layer = 0;  // elements of its largest layer's sharded parameters, one rank's
  // Of `parameters`, those trained (all but under LoRA: the adapters), and of those the
  // routed experts'.
  double trained = 0;
  double trained_experts = 0;
};

class StageCosting {
 public:
  StageCosting(const Workload& w, const Cluster& c, const Layout& l)
      : w_(w), c_(c), l_(l), bytes_(w.element_bytes()) {}

  // Adds one chunk's layers to its stage. Under context parallelism each rank computes
  // 1/c of every sequence (the load-balanced cut gives each as much attention), so every
  // per-sample figure is divided by c, and attention layers pass their keys and values
  // around the ring: c - 1 passes forward, and c - 1 of them and of their gradients (in
  // float) backward, plus one to return the gradients.
  void add_chunk(StageWork& stage, Span span, std::set<std::string>& ties,
                 module::RecomputeSet recompute) const {
    double saved = 0, checkpoint = 0, forward = 0, input = 0, weight = 0;
    PassTerms terms;  // of input and weight; the forward's below
    PassTerms forward_terms;
    double chunk_parameters = 0, layers_with_parameters = 0;
    const double share = 1.0 / l_.parallel.context;
    const bool sp = l_.parallel.sequence_parallel;
    const double sliced = sp ? 1.0 / l_.parallel.tensor : 1.0;  // the stream between stages
    const bool cut = l_.parallel.context > 1;                   // sequences cut: ring attention
    for (int i = span.begin; i < span.end; ++i) {
      const LayerCost& layer = w_.layers[i];
      const double b = static_cast<double>(l_.micro_batch) * share;
      const double all_reduce = all_reduce_seconds(b * layer.all_reduced);
      const double flops = c_.achieved_flops(w_.half_precision(), layer.width / l_.parallel.tensor);
      const double streaming =
          b * layer.traffic_bytes(l_.parallel.tensor, bytes_, sp) / c_.activation_streaming();
      const double ring = ring_pass_seconds(b * layer.ring_elements / l_.parallel.tensor * bytes_);
      // Expert parallelism: the tokens' rows to their experts and back, in each pass.
      const double exchange = 2 * all_to_all_seconds(b * layer.dispatched * bytes_);
      const int t = l_.parallel.tensor;
      const double compute_forward =
          b * LayerCost::flops_per_rank(layer.forward_flops, layer.replicated_forward_flops, t) /
              flops +
          streaming + c_.layer_overhead;
      const double ring_forward = (l_.parallel.context - 1) * ring;
      forward += compute_forward + layer.forward_all_reduces * all_reduce + ring_forward + exchange;
      forward_terms.compute += compute_forward;
      forward_terms.tensor_parallel += layer.forward_all_reduces * all_reduce;
      forward_terms.context += ring_forward;
      forward_terms.expert += exchange;
      const double compute_input =
          b *
              LayerCost::flops_per_rank(layer.backward_input_flops,
                                        layer.replicated_backward_input_flops, t) /
              flops +
          2 * streaming + c_.layer_overhead;
      const double ring_input = (l_.parallel.context - 1) * (1 + 4.0 / bytes_) * ring +
                                (l_.parallel.context > 1 ? 4.0 / bytes_ * ring : 0.0);
      input += compute_input + layer.backward_all_reduces * all_reduce + ring_input + exchange;
      terms.compute += compute_input;
      terms.tensor_parallel += layer.backward_all_reduces * all_reduce;
      terms.context += ring_input;
      terms.expert += exchange;
      // A frozen layer (LoRA) computes no weight gradient (its adapters' are negligible).
      if (!layer.frozen) {
        const double compute_weight =
            b *
            LayerCost::flops_per_rank(layer.backward_weight_flops,
                                      layer.replicated_backward_weight_flops, t) /
            flops;
        weight += compute_weight;
        terms.compute += compute_weight;
      }
      // Selective recompute: its parts' activations freed, their forward again in backward
      // (with its all-reduces and ring passes); one layer's parts live again in its backward.
      const double freed = share * layer.recompute_freed_bytes(recompute, t, bytes_, sp, cut);
      const LayerCost::Recomputable again = layer.recompute_work(recompute);
      const double repeated = b * again.flops / t / flops + again.all_reduces * all_reduce +
                              (again.ring ? (l_.parallel.context - 1) * ring : 0.0);
      input += repeated;
      terms.recompute += repeated;
      saved += share * layer.saved_bytes(l_.parallel.tensor, bytes_, sp, cut) - freed;
      stage.largest_recomputed = std::max(stage.largest_recomputed, freed);
      checkpoint += share * (i == 0 ? 0.0 : w_.layers[i - 1].output) * bytes_ * sliced;
      // Recomputed one layer at a time; the loss's part stays per micro-batch (below).
      stage.largest_layer_saved =
          std::max(stage.largest_layer_saved,
                   share * (layer.saved_bytes(l_.parallel.tensor, bytes_, sp, cut) -
                            layer.loss_bytes(l_.parallel.tensor)));
      stage.workspace = std::max(stage.workspace, layer.workspace_bytes(l_.parallel.tensor, bytes_,
                                                                        b, l_.parallel.context));
      if (cut) {  // what each rank draws whole (for every sample of its micro-batch)
        stage.workspace = std::max(stage.workspace, l_.micro_batch * layer.drawn_whole * 4);
      }
      stage.loss_per_sample += share * layer.loss_bytes(l_.parallel.tensor);
      if (layer.tie_key.empty() || ties.insert(layer.tie_key).second) {
        const int t = l_.parallel.tensor, e = l_.parallel.expert;
        const double trained = layer.trained_per_rank(t, e);
        const double experts = layer.trained_experts_per_rank(e);
        // Under LoRA the adapters come beside the layer's own parameters.
        stage.parameters += layer.parameters_per_rank(t, e) + (layer.frozen ? trained : 0.0);
        stage.expert_parameters += static_cast<double>(layer.expert_parameters) / e;
        stage.trained += trained;
        stage.trained_experts += experts;
        // What ZeRO shards (the trained parameters): experts split over ranks stay whole.
        const double sharded = trained - (e > 1 ? experts : 0.0);
        stage.largest_layer = std::max(stage.largest_layer, sharded);
        // ZeRO 3: the layer gathered before its forward and again before its backward
        // (kept after forward: once per step).
        const bool reshard = w_.training.zero.reshard_after_forward;
        const double gather_forward =
            gather_seconds(sharded) / (reshard ? 1.0 : static_cast<double>(l_.micro_batches));
        forward += gather_forward;
        forward_terms.zero += gather_forward;
        input += reshard ? gather_seconds(sharded) : 0.0;
        terms.zero += reshard ? gather_seconds(sharded) : 0.0;
        chunk_parameters += sharded;
        if (sharded > 0) ++layers_with_parameters;
      }
      if (!layer.frozen) {  // an adapter is far smaller than the tensors it adapts
        stage.largest_tensor = std::max(
            stage.largest_tensor, static_cast<double>(layer.largest_tensor) / l_.parallel.tensor);
      }
    }
    if (l_.checkpointing) {  // the forward again, before its backward
      input += forward;
      terms.recompute += forward;
    }
    // ZeRO 2 and 3: each backward pass's gradients reduce-scattered once it ends, a bucket
    // per layer with parameters.
    if (l_.zero >= 2 && layers_with_parameters > 0) {
      const double scatter = layers_with_parameters *
                             reduce_scatter_seconds(chunk_parameters / layers_with_parameters);
      input += scatter;
      terms.zero += scatter;
    }
    forward += c_.pass_overhead;
    input += c_.pass_overhead;
    terms.compute += 2 * c_.pass_overhead;
    stage.forward += forward;
    stage.backward_input += input;
    stage.backward_weight += weight;
    stage.terms.compute += terms.compute + forward_terms.compute;
    stage.terms.tensor_parallel += terms.tensor_parallel + forward_terms.tensor_parallel;
    stage.terms.context += terms.context + forward_terms.context;
    stage.terms.expert += terms.expert + forward_terms.expert;
    stage.terms.zero += terms.zero + forward_terms.zero;
    stage.terms.recompute += terms.recompute;
    stage.saved_per_sample = std::max(stage.saved_per_sample, saved);
    stage.checkpoint_per_sample = std::max(stage.checkpoint_per_sample, checkpoint);
  }

  double all_reduce_seconds(double elements) const {
    return c_.link(l_.parallel.tensor, 1).all_reduce(elements * bytes_, l_.parallel.tensor);
  }

  // ZeRO 3: all-gathering `parameters` elements over the replicas (half an all-reduce).
  double gather_seconds(double parameters) const {
    if (l_.zero < 3) return 0.0;
    const int replicas = l_.parallel.data * l_.parallel.context;
    return 0.5 * c_.link(replicas, l_.parallel.tensor).all_reduce(parameters * bytes_, replicas);
  }

  double reduce_scatter_seconds(double parameters) const {
    const int replicas = l_.parallel.data * l_.parallel.context;
    const double wire =
        w_.training.precision.communication_dtype == optim::Precision::kFp32 ? 4 : bytes_;
    return 0.5 * c_.link(replicas, l_.parallel.tensor).all_reduce(parameters * wire, replicas);
  }

  // An all-to-all over the expert group (its ranks t apart, consecutive data replicas) of
  // `bytes` per rank, spread evenly over the experts: (e - 1) / e of them leave the rank,
  // one message to each other rank.
  double all_to_all_seconds(double bytes) const {
    if (l_.parallel.expert == 1) return 0.0;
    const Link& link = c_.link(l_.parallel.expert, l_.parallel.tensor);
    const double e = l_.parallel.expert;
    return (e - 1) * link.latency + bytes * (e - 1) / e / link.bandwidth;
  }

  // One pass of `bytes` to the next rank of the context group (its ranks t apart).
  double ring_pass_seconds(double bytes) const {
    if (l_.parallel.context == 1) return 0.0;
    const Link& link =
        link_of(c_, context_transport(c_), c_.link(l_.parallel.context, l_.parallel.tensor));
    return link.latency + bytes / link.bandwidth;
  }

 private:
  const Workload& w_;
  const Cluster& c_;
  const Layout& l_;
  int bytes_;
};

std::vector<StageWork> stage_work(const Workload& w, const Cluster& c, const Layout& l) {
  const module::Partition& parts = w.partition(l.parallel.pipe * l.parallel.chunks);
  const StageCosting costing(w, c, l);
  std::vector<StageWork> stages(l.parallel.pipe);
  std::vector<std::set<std::string>> ties(l.parallel.pipe);
  const schedule::PipeShape shape =
      schedule::shape_for(l.schedule, 1, l.parallel.pipe, l.parallel.chunks);
  for (int v = 0; v < l.parallel.pipe * l.parallel.chunks; ++v) {
    const int stage = shape.stage_of(v);
    costing.add_chunk(stages[stage], {parts[v], parts[v + 1]}, ties[stage], l.recompute_of(stage));
  }
  return stages;
}

// The activations a rank holds at its peak: the live micro-batches' saved tensors (only
// the layer inputs with checkpointing, plus one layer recomputed at a time; with selective
// recompute, one layer's recomputed parts again), and the gradients in flight in one
// layer's backward.
double activation_bytes(const StageWork& stage, const Layout& l, int live) {
  const double b = static_cast<double>(l.micro_batch);
  const double backward = live > 0 ? stage.workspace : 0.0;
  if (!l.checkpointing) {
    const double recomputed = live > 0 ? b * stage.largest_recomputed : 0.0;
    return live * b * stage.saved_per_sample + recomputed + backward;
  }
  // The loss is computed outside the checkpointed layers: its tensors stay for every live
  // micro-batch but the one in backward, whose loss is freed before its layers recompute.
  return live * b * stage.checkpoint_per_sample +
         std::max(0, live - 1) * b * stage.loss_per_sample +
         b * std::max(stage.largest_layer_saved, stage.loss_per_sample) + backward;
}

StageMemory stage_memory(const Workload& w, const Layout& l, const StageWork& stage, int live) {
  const bool mixed = w.half_precision();
  const double shard =
      l.zero > 0 ? 1.0 / (l.parallel.data * l.parallel.context) : 1.0;  // over the replicas
  // The trained parameters: all of them, or under LoRA the adapters (the rest frozen: no
  // gradient, master, optimizer state or ZeRO shard).
  const double p = stage.trained, frozen = stage.parameters - stage.trained;
  // ZeRO shards what every replica holds over the replicas, and the experts split over
  // ranks over the ranks holding the same experts (ZeRO 1 for them: weights and gradients
  // whole).
  const double experts = l.parallel.expert > 1 ? stage.trained_experts : 0.0;
  const double dense = p - experts;
  const double expert_shard =
      l.zero > 0 ? static_cast<double>(l.parallel.expert) / (l.parallel.data * l.parallel.context)
                 : 1.0;
  const double held = dense * shard + experts * expert_shard;  // masters and optimizer state
  StageMemory m;
  m.weights = (frozen + p) * w.element_bytes();
  m.gradients = p * w.element_bytes();
  if (l.zero >= 3) {
    // The rank's pieces, and the layers gathered at once: prefetch + 1, or all of them
    // when kept after forward (then the whole stage, as without ZeRO 3).
    const double gathered =
        w.training.zero.reshard_after_forward
            ? std::min(dense,
                       static_cast<double>(w.training.zero.prefetch + 1) * stage.largest_layer)
            : dense;
    m.weights = (frozen + held + gathered) * w.element_bytes();
  }
  if (l.zero >= 2) {
    // No full gradient outlives its backward pass, which frees that micro-batch's
    // activations as it makes them: the fp32 shard accumulators, and the gradients beyond
    // one micro-batch's activations at the pass's end (the experts' kept whole).
    const double one = static_cast<double>(l.micro_batch) * stage.saved_per_sample;
    m.gradients = 4 * dense * shard + experts * w.element_bytes() +
                  std::max(0.0, dense * w.element_bytes() - (live > 0 ? one : 0.0));
  }
  // The fp32 masters (their gradients are made at the step, after the activations' peak).
  m.masters = mixed ? 4 * held : 0;
  m.optimizer = optimizer_state_bytes(w.training.optimizer) * held;
  if (l.parallel.data * l.parallel.context > 1 && l.zero == 0) {
    const int wire =
        w.training.precision.communication_dtype == optim::Precision::kFp32 ? 4 : w.element_bytes();
    m.buffers = p * wire;  // every bucket's flat copy, kept between steps (AveragedBuckets)
  }
  m.activations = activation_bytes(stage, l, live);
  // The step's own memory, held once the activations are gone: the fp32 master gradients
  // (mixed precision), and the two temporaries LibTorch's Adam forms on the CPU of the
  // tensor it updates (the largest parameter, or with ZeRO the flat shard).
  if (mixed) m.step_workspace += 4 * held;
  // The experts step one flat piece where several ranks hold each (sharded), else tensor by
  // tensor (the largest counts).
  const bool experts_sharded = l.zero > 0 && l.parallel.expert > 1 &&
                               l.parallel.data * l.parallel.context > l.parallel.expert;
  const double expert_step = experts_sharded ? experts * expert_shard
                             : experts > 0   ? stage.largest_tensor
                                             : 0.0;
  if (optimizer_state_bytes(w.training.optimizer) > 4) {
    m.step_workspace +=
        2 * 4 * (l.zero > 0 ? std::max(dense * shard, expert_step) : stage.largest_tensor);
  }
  m.live_micro_batches = live;
  return m;
}

schedule::CostModel simulator_costs(const std::vector<StageWork>& stages, const Workload& w,
                                    const Transports& transports, const Cluster& c,
                                    const Layout& l) {
  schedule::CostModel costs;
  costs.forward.clear();
  costs.backward.clear();
  costs.weight.clear();
  for (const auto& stage : stages) {
    costs.forward.push_back(stage.forward);
    costs.backward.push_back(stage.backward_input + stage.backward_weight);
    costs.weight.push_back(stage.backward_weight);
  }
  const Link& pipe_link =
      link_of(c, transports.pipe, c.link(l.parallel.pipe, static_cast<int>(l.ranks_per_stage())));
  costs.latency = pipe_link.latency;
  costs.bandwidth = pipe_link.bandwidth;
  // Stage boundaries carry a block's output: the residual stream (a rank's 1/c of it).
  costs.message_bytes = static_cast<double>(l.micro_batch) * w.layers.front().output *
                        w.element_bytes() / l.parallel.context;
  return costs;
}

// What ranks sharing `cores` meet in `timeline`: per stage, how much slower than alone its
// passes compute, max(1, busy ranks / cores) averaged over them; and the share of the time
// no core is free, the chance that a woken receiver must wait for one. A stage's passes
// run on `ranks_per_stage` ranks at once (its data and tensor replicas).
struct Crowding {
  std::vector<double> slowdown;
  double busy_share = 0;  // of the makespan, with every core busy
};

Crowding crowding(const schedule::Timeline& timeline, int pipe, double ranks_per_stage,
                  double cores) {
  std::vector<std::pair<double, int>> edges;  // time, +1 a pass starts / -1 it ends
  for (const auto& box : timeline.boxes) {
    edges.emplace_back(box.start, 1);
    edges.emplace_back(box.end, -1);
  }
  std::sort(edges.begin(), edges.end());
  // slowed[i]: the slowed-down time from 0 to times[i] (its integral).
  std::vector<double> times, slowed;
  int busy = 0;
  double integral = 0, last = 0, full = 0;
  for (const auto& [time, change] : edges) {
    integral += (time - last) * std::max(1.0, busy * ranks_per_stage / cores);
    if (busy * ranks_per_stage >= cores) full += time - last;
    times.push_back(time);
    slowed.push_back(integral);
    busy += change;
    last = time;
  }
  const auto slowed_at = [&](double t) {
    const size_t i = std::lower_bound(times.begin(), times.end(), t) - times.begin();
    return slowed[std::min(i, slowed.size() - 1)];
  };
  std::vector<double> taken(pipe, 0.0), alone(pipe, 0.0);
  for (const auto& box : timeline.boxes) {
    taken[box.stage] += slowed_at(box.end) - slowed_at(box.start);
    alone[box.stage] += box.end - box.start;
  }
  Crowding result{std::vector<double>(pipe, 1.0), 0.0};
  for (int s = 0; s < pipe; ++s)
    if (alone[s] > 0) result.slowdown[s] = taken[s] / alone[s];
  if (timeline.makespan > 0) result.busy_share = full / timeline.makespan;
  return result;
}

// The schedule's timeline, and the wait every message adds (seconds).
struct PipelineTimeline {
  schedule::Timeline timeline;
  double message_wait = 0;
};

// The cores a job's ranks share: shared_cores on every node it spans; 0 when not shared.
double job_cores(const Cluster& c, const Layout& l) {
  if (c.shared_cores <= 0) return 0;
  const int64_t nodes = (l.devices() + c.devices_per_node - 1) / c.devices_per_node;
  return static_cast<double>(c.shared_cores * nodes);
}

// How much slower than alone ranks compute when all of them work at once (the optimizer
// step): ranks / cores where they share fewer cores, else 1.
double step_sharing(const Cluster& c, const Layout& l) {
  const double cores = job_cores(c, l);
  return cores > 0 ? std::max(1.0, static_cast<double>(l.devices()) / cores) : 1.0;
}

// Where ranks outnumber the cores they share, each stage's passes are slowed down by the
// crowding they meet and every message waits shared_core_latency as often as no core is
// free, both recomputed from the timeline they give until it settles.
PipelineTimeline simulate_pipeline(const schedule::PipelinePlan& plan,
                                   const schedule::CostModel& costs, const Cluster& c,
                                   const Layout& l) {
  PipelineTimeline result{schedule::simulate(plan, costs), 0.0};
  const double cores = job_cores(c, l);
  if (cores <= 0 || static_cast<double>(l.devices()) <= cores) return result;
  const double ranks_per_stage = static_cast<double>(l.ranks_per_stage());
  std::vector<double> slowdown(l.parallel.pipe, 1.0);
  for (int round = 0; round < 12; ++round) {
    const Crowding met = crowding(result.timeline, l.parallel.pipe, ranks_per_stage, cores);
    schedule::CostModel slowed = costs;
    for (int s = 0; s < l.parallel.pipe; ++s) {
      // Damped after the first round: the timeline moves with the slowdown.
      slowdown[s] = round == 0 ? met.slowdown[s] : 0.5 * (slowdown[s] + met.slowdown[s]);
      slowed.forward[s] *= slowdown[s];
      slowed.backward[s] *= slowdown[s];
      slowed.weight[s] *= slowdown[s];
    }
    const double wait = c.shared_core_latency * met.busy_share;
    result.message_wait = round == 0 ? wait : 0.5 * (result.message_wait + wait);
    slowed.latency += result.message_wait;
    result.timeline = schedule::simulate(plan, slowed);
  }
  return result;
}

// After the schedule: each stage's gradients averaged over its replicas (ZeRO: reduce-
// scattered, then the updated parameters all-gathered), and its optimizer step.
void add_step_end(Prediction& p, const std::vector<StageWork>& stages, const Workload& w,
                  const Cluster& c, const Layout& l) {
  const bool mixed = w.half_precision();
  const double wire =
      w.training.precision.communication_dtype == optim::Precision::kFp32 ? 4 : w.element_bytes();
  // The replicas of a stage's parameters: its data x context ranks (t apart).
  const int replicas = l.parallel.data * l.parallel.context;
  const Link& data_link = c.link(replicas, l.parallel.tensor);
  const double traffic = optimizer_traffic_bytes(w.training.optimizer, mixed);
  double slowest = 0;
  for (const auto& stage : stages) {
    // ZeRO 2 and 3 reduce-scatter after every backward pass (in the passes' costs); 3
    // gathers each layer when it runs, not after the step.
    // Expert parallelism: the experts' gradients all-reduced over the d / e ranks holding
    // them; under ZeRO reduce-scattered over them, the updated pieces gathered (ZeRO 1).
    // The rest as without experts.
    const double whole = l.parallel.expert > 1 ? stage.trained_experts : 0.0;
    const double dense = stage.trained - whole;
    const int holders = replicas / l.parallel.expert;
    const Link& holders_link = c.link(holders, l.parallel.tensor * l.parallel.expert);
    const double experts =
        l.parallel.expert == 1 ? 0.0
        : l.zero == 0          ? holders_link.all_reduce(whole * wire, holders)
                               : 0.5 * holders_link.all_reduce(whole * wire, holders) +
                            0.5 * holders_link.all_reduce(whole * w.element_bytes(), holders);
    const double scatter = l.zero == 1 ? 0.5 * data_link.all_reduce(dense * wire, replicas) : 0.0;
    const double gather = l.zero == 1 || l.zero == 2
                              ? 0.5 * data_link.all_reduce(dense * w.element_bytes(), replicas)
                              : 0.0;
    const double reduce =
        (l.zero == 0 ? data_link.all_reduce(dense * wire, replicas) : scatter + gather) + experts;
    const double updated =
        l.zero > 0 ? (dense + whole * l.parallel.expert) / replicas : dense + whole;
    const double step = updated * traffic / c.memory_bandwidth;
    if (reduce + step > slowest) {
      slowest = reduce + step;
      p.data_parallel_seconds = reduce;
      p.optimizer_seconds = step;
    }
  }
  const LayerCost& embedding = w.layers.front();
  if (!embedding.tie_key.empty() && l.parallel.pipe > 1 && !embedding.frozen) {
    const Link& tied = c.link(l.parallel.pipe, static_cast<int>(l.ranks_per_stage()));
    p.tied_seconds = tied.all_reduce(
        embedding.split_parameters / static_cast<double>(l.parallel.tensor) * wire, 2);
  }
}

// The time transfers between stages add to a schedule's critical path: each boundary
// crossed once forward on the fill and once backward on the drain (every chunk's under
// interleaving).
double schedule_transfers(const schedule::CostModel& costs, const Layout& l) {
  if (l.parallel.pipe < 2) return 0;
  return 2.0 * (l.parallel.pipe * l.parallel.chunks - 1) * costs.transfer_time();
}

// The step's terms: the stages' average busy time split as their passes spend it, the idle
// rest of the schedule into transfers (at most all of it) and bubble, then the step's end.
StepTerms step_terms(const Prediction& p, const std::vector<StageWork>& stages, double busy,
                     double transfers, double overhead) {
  PassTerms all;
  for (const auto& stage : stages) {
    all.compute += stage.terms.compute;
    all.tensor_parallel += stage.terms.tensor_parallel;
    all.context += stage.terms.context;
    all.expert += stage.terms.expert;
    all.zero += stage.terms.zero;
    all.recompute += stage.terms.recompute;
  }
  const double scale = all.sum() > 0 ? busy / all.sum() : 0;
  const double idle = std::max(0.0, p.pipeline_seconds - busy);
  StepTerms t;
  t.compute = all.compute * scale;
  t.tensor_parallel = all.tensor_parallel * scale;
  t.context = all.context * scale;
  t.expert = all.expert * scale;
  t.zero = all.zero * scale;
  t.recompute = all.recompute * scale;
  t.pipe_transfers = std::min(idle, transfers);
  t.bubble = idle - t.pipe_transfers;
  t.data_parallel = p.data_parallel_seconds + p.tied_seconds;
  t.optimizer = p.optimizer_seconds;
  t.overhead = overhead;
  return t;
}

}  // namespace

Workload::Workload(models::ModelConfig model_, engine::TrainingConfig training_,
                   module::LoraConfig lora_)
    : model(std::move(model_)),
      training(std::move(training_)),
      lora(std::move(lora_)),
      layers(layer_costs(model)) {
  add_adapters(layers, model, lora);
}

const module::Partition& Workload::partition(int virtual_stages) const {
  const std::lock_guard lock(partitions_mutex_);
  auto found = partitions_.find(virtual_stages);
  if (found == partitions_.end())
    found = partitions_.emplace(virtual_stages, split_layers(*this, virtual_stages)).first;
  return found->second;
}

bool Workload::half_precision() const {
  return training.precision.dtype != optim::Precision::kFp32;
}

int Workload::element_bytes() const {
  return half_precision() ? 2 : 4;
}

double Prediction::peak_bytes() const {
  return stages.empty() ? 0 : stages[peak_stage()].total();
}

int Prediction::peak_stage() const {
  int most = 0;
  for (int s = 1; s < static_cast<int>(stages.size()); ++s)
    if (stages[s].total() > stages[most].total()) most = s;
  return most;
}

std::vector<StageMemory> static_memory(const Workload& w, const Cluster& c, const Layout& l) {
  std::vector<StageMemory> memory;
  for (const auto& stage : stage_work(w, c, l)) memory.push_back(stage_memory(w, l, stage, 0));
  return memory;
}

std::vector<StageMemory> memory_at(const Workload& w, const Cluster& c, const Layout& l,
                                   const std::vector<int>& live) {
  std::vector<StageMemory> memory;
  const std::vector<StageWork> stages = stage_work(w, c, l);
  for (std::size_t s = 0; s < stages.size(); ++s)
    memory.push_back(stage_memory(w, l, stages[s], live.at(s)));
  return memory;
}

Prediction predict(const Workload& w, const Cluster& shared, const Layout& l) {
  const std::vector<StageWork> stages = stage_work(w, shared, l);
  const auto plan = schedule::plan_pipeline(
      l.schedule, schedule::shape_for(l.schedule, static_cast<int>(l.micro_batches),
                                      l.parallel.pipe, l.parallel.chunks));
  const Transports transports = transports_of(shared, l);
  const schedule::CostModel costs = simulator_costs(stages, w, transports, shared, l);
  const PipelineTimeline pipeline = simulate_pipeline(plan, costs, shared, l);
  const schedule::Timeline& timeline = pipeline.timeline;
  Cluster c = shared;  // the step's collectives wait as the pipeline's messages did
  c.intra_node.latency += pipeline.message_wait;
  c.inter_node.latency += pipeline.message_wait;

  Prediction p;
  p.transports = transports;
  p.pipeline_seconds = timeline.makespan;
  double busy = 0;
  for (int s = 0; s < l.parallel.pipe; ++s) {
    busy += timeline.stages[s].busy;
    p.stages.push_back(stage_memory(w, l, stages[s], timeline.stages[s].peak_live_activations));
  }
  p.bubble = timeline.makespan > 0 ? 1 - busy / (l.parallel.pipe * timeline.makespan) : 0;
  add_step_end(p, stages, w, c, l);
  // Every rank steps at once: shared cores slow the step's own work by ranks / cores.
  const double sharing = step_sharing(c, l);
  p.optimizer_seconds *= sharing;
  p.step_seconds = p.pipeline_seconds + p.data_parallel_seconds + p.optimizer_seconds +
                   p.tied_seconds + sharing * c.step_overhead;
  p.terms = step_terms(p, stages, busy / l.parallel.pipe, schedule_transfers(costs, l),
                       sharing * c.step_overhead);

  double flops_per_sample = 0;
  for (const auto& layer : w.layers)
    flops_per_sample += layer.forward_flops + layer.backward_flops();
  p.model_flops = flops_per_sample * static_cast<double>(l.global_batch());
  // Each MoE layer's rows go to their experts and back in forward, again in backward, and
  // once more in a recomputed forward; (e - 1) / e of them to another rank. Every rank of a
  // tensor-parallel group sends its own copy.
  double dispatched = 0;
  for (const auto& layer : w.layers) dispatched += layer.dispatched;
  const double exchanges = 4 + (l.checkpointing ? 2 : 0);
  p.all_to_all_bytes = l.parallel.expert > 1
                           ? dispatched * exchanges * w.element_bytes() *
                                 static_cast<double>(l.global_batch()) * l.parallel.tensor *
                                 (l.parallel.expert - 1) / l.parallel.expert
                           : 0.0;
  const double peak = w.half_precision() ? c.bf16_flops : c.fp32_flops;
  p.mfu = p.model_flops / (p.step_seconds * static_cast<double>(l.devices()) * peak);
  return p;
}

}  // namespace pipetrain::planner
