#include "planner/planner.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>

#include "pipetrain/io/errors.h"

namespace pipetrain::planner {
namespace {

using schedule::Kind;

std::vector<int> divisors(int64_t n) {
  std::vector<int> found;
  for (int64_t k = 1; k <= n; ++k)
    if (n % k == 0) found.push_back(static_cast<int>(k));
  return found;
}

template <typename T>
bool allowed(const std::optional<T>& fixed, T value) {
  return !fixed || *fixed == value;
}

// The model-parallel sizes the model can take: those its family divides (heads, vocabulary,
// ... as its row says). A family without `divides` is planned without tensor parallelism.
bool splits(const models::ModelConfig& m, int t) {
  if (t == 1) return true;
  // Measured costs are of whole layers: they do not split.
  return models::capabilities(m).tensor_parallel && m.type->divides && m.type->costs &&
         m.type->divides(m, t);
}

// Whether the model's sequence cuts into 2c equal chunks over c context-parallel ranks, each
// rank's part splitting over t under sequence parallelism, as the built-in models require.
bool cuts(const models::ModelConfig& m, int c, int t, bool sequence_parallel) {
  const models::Capabilities can = models::capabilities(m);
  if ((c > 1 && !can.context_parallel) || (sequence_parallel && t > 1 && !can.sequence_parallel))
    return false;
  // A program's family's sequence length is its own (model.params): not cut.
  const int64_t context = models::context_of(m);
  if (c > 1 && (context == 0 || context % (2 * int64_t{c}) != 0)) return false;
  return !sequence_parallel || t == 1 || (context > 0 && (context / c) % t == 0);
}

// Expert-parallel sizes for `data` replicas: 1, and for a mixture of experts each size
// dividing both the replicas and the experts (as the job requires), unless fixed.
std::vector<int> expert_sizes(const models::ModelConfig& m, int data, const LayoutLimits& limits) {
  std::vector<int> sizes;
  for (int e : divisors(data)) {
    const int64_t experts = models::capabilities(m).routed_experts;
    const bool possible = e == 1 || (experts > 0 && experts % e == 0);
    if (possible && allowed(limits.experts, e)) sizes.push_back(e);
  }
  return sizes;
}

// Schedules and chunk counts a pipeline of `pipe` stages can run over `micro_batches`: the
// planned kinds whose shape rules take them, one chunk per stage first, then 2 and 4 looped
// chunks, then the V kinds' two (each chunk holding a layer at least).
std::vector<std::pair<schedule::Kind, int>> schedules(int pipe, int64_t micro_batches, int layers) {
  if (pipe == 1) return {{schedule::Kind::k1F1B, 1}};
  const int m = static_cast<int>(std::min<int64_t>(micro_batches, 1 << 30));
  std::vector<std::pair<schedule::Kind, int>> found;
  auto offer = [&](const schedule::ScheduleKind& kind, int chunks) {
    if (chunks > 1 && pipe * chunks > layers) return;
    if (schedule::fits(kind.kind, {m, pipe, chunks, kind.placement}))
      found.push_back({kind.kind, chunks});
  };
  const auto& kinds = schedule::schedule_kinds();
  for (const auto& kind : kinds) {
    if (kind.planned && !kind.uses_chunks) offer(kind, 1);
  }
  for (int chunks : {2, 4}) {
    for (const auto& kind : kinds) {
      if (kind.planned && kind.uses_chunks && kind.placement == schedule::Placement::kLoop)
        offer(kind, chunks);
    }
  }
  for (const auto& kind : kinds) {
    if (kind.planned && kind.placement == schedule::Placement::kV) offer(kind, kind.min_chunks);
  }
  return found;
}

// The virtual stages a `boundaries:A,B,...` partition fixes (one more than its cuts); 0 for
// other methods, which split any count.
int fixed_virtual_stages(const module::PartitionMethod& method) {
  if (method.kind != module::PartitionMethod::Kind::kBoundaries) return 0;
  return static_cast<int>(std::count(method.argument.begin(), method.argument.end(), ',')) + 2;
}

// Micro-batch sizes to try for `per_replica` samples per replica: the fixed one, or the
// powers of two that divide it up to the limit.
std::vector<int64_t> micro_batch_sizes(const LayoutLimits& limits, int64_t per_replica) {
  if (limits.micro_batch) return {*limits.micro_batch};
  std::vector<int64_t> sizes;
  for (int64_t b = 1; b <= std::min(limits.max_micro_batch, per_replica); b *= 2)
    if (per_replica % b == 0) sizes.push_back(b);
  return sizes;
}

std::string out_of_memory(const Prediction& p, const Cluster& c) {
  char text[128];
  std::snprintf(text, sizeof text, "out of memory: stage %d needs %.1f GiB of %.1f", p.peak_stage(),
                p.peak_bytes() / (1 << 30), c.memory_bytes / (1 << 30));
  return text;
}

// A layout predicted, or ruled out by its static memory alone (then without a step time).
Candidate assess_as_given(const Workload& w, const Cluster& c, const Layout& layout) {
  Candidate candidate{layout, {}, {}};
  candidate.prediction.stages = static_memory(w, c, layout);
  if (candidate.prediction.peak_bytes() <= c.memory_bytes)
    candidate.prediction = predict(w, c, layout);
  else
    candidate.prediction.step_seconds = std::numeric_limits<double>::quiet_NaN();
  if (candidate.prediction.peak_bytes() > c.memory_bytes)
    candidate.rejected = out_of_memory(candidate.prediction, c);
  return candidate;
}

// What a stage may recompute to fit, least recomputed first: the MLP's activation, then the
// norms with it, the whole MLP, the norms with that, and attention too.
const std::vector<module::RecomputeSet>& recompute_steps() {
  using K = module::RecomputeKind;
  using Set = module::RecomputeSet;
  static const std::vector<Set> steps = {Set{},
                                         Set().add(K::kMlpActivation),
                                         Set().add(K::kMlpActivation).add(K::kNorms),
                                         Set().add(K::kMlp),
                                         Set().add(K::kMlp).add(K::kNorms),
                                         Set().add(K::kAttention).add(K::kMlp).add(K::kNorms)};
  return steps;
}

// The layout with, for each stage, the first of recompute_steps() that fits it in memory at
// the schedule's peak (the first stages of 1F1B hold more micro-batches, so they recompute
// more); none when no stage needs any or one does not fit recomputing all of them.
std::optional<Layout> with_recompute(const Workload& w, const Cluster& c, Layout l) {
  const auto plan = schedule::plan_pipeline(
      l.schedule, schedule::shape_for(l.schedule, static_cast<int>(l.micro_batches),
                                      l.parallel.pipe, l.parallel.chunks));
  std::vector<int> live;
  for (int s = 0; s < l.parallel.pipe; ++s) live.push_back(schedule::peak_live(plan, s));
  const auto& steps = recompute_steps();
  std::vector<std::size_t> step(static_cast<std::size_t>(l.parallel.pipe), 0);
  l.recompute.assign(step.size(), {});
  for (;;) {
    const std::vector<StageMemory> memory = memory_at(w, c, l, live);
    bool fits = true;
    for (std::size_t s = 0; s < step.size(); ++s) {
      if (memory[s].total() <= c.memory_bytes) continue;
      fits = false;
      if (++step[s] == steps.size()) return std::nullopt;
      l.recompute[s] = steps[step[s]];
    }
    if (fits) return l.recomputes() ? std::optional<Layout>(l) : std::nullopt;
  }
}

// With the limits' fixed recompute, as given; else as given, or, when its activations do
// not fit and it checkpoints no whole layers, with the selective recompute per stage that
// fits it.
Candidate assess(const Workload& w, const Cluster& c, Layout layout, const LayoutLimits& limits) {
  if (limits.recompute) {
    if (!layout.checkpointing && !limits.recompute->empty())
      layout.recompute.assign(static_cast<std::size_t>(layout.parallel.pipe), *limits.recompute);
    return assess_as_given(w, c, layout);
  }
  Candidate candidate = assess_as_given(w, c, layout);
  if (candidate.rejected.empty() || layout.checkpointing) return candidate;
  if (const auto recomputing = with_recompute(w, c, layout)) {
    Candidate chosen = assess_as_given(w, c, *recomputing);
    if (chosen.rejected.empty()) return chosen;
  }
  return candidate;
}

}  // namespace

std::vector<Candidate> plan_layouts(const Workload& w, const Cluster& c, int64_t global_batch,
                                    const LayoutLimits& limits) {
  if (global_batch < 1 || global_batch > (int64_t{1} << 30))
    throw io::InputError("--global-batch must be between 1 and 2^30, got " +
                         std::to_string(global_batch));
  const int boundaries_stages = fixed_virtual_stages(w.training.pipeline.partition_method);
  const int layers = static_cast<int>(w.layers.size());
  const int64_t devices = limits.devices.value_or(c.devices());
  if (devices < 1 || devices > c.devices())
    throw io::InputError("--devices must be between 1 and the cluster's " +
                         std::to_string(c.devices()) + ", got " + std::to_string(devices));
  std::vector<Candidate> found;
  for (int t : divisors(std::min(c.devices_per_node, devices))) {
    if (devices % t != 0 || !allowed(limits.tensor, t) || !splits(w.model, t)) continue;
    for (int context : divisors(devices / t)) {
      for (const bool sp : {false, true}) {
        // Unless fixed, context sizes of 1, 2, 4, 8 and 16 (what long-context recipes use).
        const bool tried = limits.context ? *limits.context == context
                                          : context <= 16 && (context & (context - 1)) == 0;
        if (!tried || !allowed(limits.sequence_parallel, sp) || (sp && t == 1) ||
            !cuts(w.model, context, t, sp))
          continue;
        for (int pipe : divisors(devices / t / context)) {
          const int data = static_cast<int>(devices / t / context / pipe);
          if (pipe > layers || !allowed(limits.pipe, pipe) || !allowed(limits.data, data) ||
              global_batch % data != 0)
            continue;
          for (int64_t b : micro_batch_sizes(limits, global_batch / data)) {
            if (b < 1 || (global_batch / data) % b != 0) continue;
            const int64_t m = global_batch / data / b;
            for (const auto& [schedule, chunks] : schedules(pipe, m, layers)) {
              if (!allowed(limits.schedule, schedule) || !allowed(limits.chunks, chunks)) continue;
              if (!schedule::plannable(schedule::shape_for(
                      schedule, static_cast<int>(std::min<int64_t>(m, 1 << 30)), pipe, chunks)))
                continue;  // past the schedule layer's work bounds (e.g. m over 65536)
              if (boundaries_stages > 0 && pipe * chunks != boundaries_stages) continue;
              for (bool checkpointing : {false, true}) {
                if (!allowed(limits.checkpointing, checkpointing)) continue;
                for (int zero : {0, 1, 2, 3}) {
                  if (!allowed(limits.zero, zero) || (zero > 0 && data == 1 && !limits.zero))
                    continue;
                  for (int experts : expert_sizes(w.model, data, limits)) {
                    const Layout layout{.parallel = {.pipe = pipe,
                                                     .data = data,
                                                     .tensor = t,
                                                     .context = context,
                                                     .expert = experts,
                                                     .sequence_parallel = sp,
                                                     .chunks = chunks},
                                        .micro_batch = b,
                                        .micro_batches = m,
                                        .schedule = schedule,
                                        .zero = zero,
                                        .checkpointing = checkpointing};
                    found.push_back(assess(w, c, layout, limits));
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  if (found.empty()) {
    throw io::InputError(
        "no layout of " + std::to_string(devices) + " devices runs a batch of " +
        std::to_string(global_batch) +
        " samples under these limits (the data-parallel size must divide the "
        "batch, the micro-batch the batch per replica, t the heads and vocabulary, "
        "and there must be no more stages than layers)");
  }
  std::stable_sort(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) {
    if (a.rejected.empty() != b.rejected.empty()) return a.rejected.empty();
    if (a.rejected.empty()) return a.prediction.step_seconds < b.prediction.step_seconds;
    return a.prediction.peak_bytes() < b.prediction.peak_bytes();
  });
  // Within 1% of the fastest, time is noise the prediction cannot settle: the lower peak
  // (more room, fewer out-of-memory surprises) ranks first.
  const auto close = std::find_if(found.begin(), found.end(), [&](const Candidate& c) {
    return !c.rejected.empty() ||
           c.prediction.step_seconds > (1 + kTiedWithin) * found.front().prediction.step_seconds;
  });
  if (found.front().rejected.empty()) {
    std::stable_sort(found.begin(), close, [](const Candidate& a, const Candidate& b) {
      return a.prediction.peak_bytes() < b.prediction.peak_bytes();
    });
  }
  return found;
}

}  // namespace pipetrain::planner
