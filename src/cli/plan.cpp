#include "cli/plan.h"

#include <cstdio>
#include <sstream>

#include "pipetrain/config/config_section.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/module/lora_config.h"
#include "pipetrain/module/recompute.h"
#include "trainer/job_config.h"

namespace pipetrain::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// --recompute: unset for "auto" (the planner chooses), else the named parts (none: empty).
std::optional<module::RecomputeSet> read_recompute(const std::string& text) {
  if (text == "auto") return std::nullopt;
  module::RecomputeSet set;
  if (text == "none") return set;
  std::stringstream parts(text);
  for (std::string part; std::getline(parts, part, ',');) {
    const auto kind = module::recompute_kind(part);
    if (!kind) {
      throw io::InputError("--recompute: \"" + part +
                           "\" is not none, auto, or parts joined by commas from attention, mlp, "
                           "mlp_activation, norms and experts");
    }
    set.add(*kind);
  }
  if (set.empty()) throw io::InputError("--recompute: name none, auto or parts, got \"\"");
  return set;
}

nlohmann::json transports_json(const planner::Layout& l, const planner::Transports& t) {
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [group, transport] : t.groups(l))
    groups[group] = planner::transport_name(transport);
  return groups;
}

}  // namespace

const std::vector<TermName>& term_names() {
  using T = planner::StepTerms;
  static const std::vector<TermName> names{
      {"compute", "compute", &T::compute},
      {"tensor-parallel traffic", "tensor_parallel", &T::tensor_parallel},
      {"context-parallel ring", "context", &T::context},
      {"expert all-to-all", "expert", &T::expert},
      {"ZeRO gathers and reduce-scatters", "zero", &T::zero},
      {"recompute", "recompute", &T::recompute},
      {"pipe transfers", "pipe_transfers", &T::pipe_transfers},
      {"bubble", "bubble", &T::bubble},
      {"data-parallel traffic", "data_parallel", &T::data_parallel},
      {"optimizer step", "optimizer", &T::optimizer},
      {"step overhead", "overhead", &T::overhead}};
  return names;
}

nlohmann::json recompute_json(const planner::Layout& l) {
  nlohmann::json stages = nlohmann::json::array();
  for (int s = 0; s < l.parallel.pipe; ++s) stages.push_back(l.recompute_of(s).names());
  return stages;
}

nlohmann::json candidate_json(const planner::Candidate& c) {
  const auto& l = c.layout;
  const auto& p = c.prediction;
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : p.stages) {
    stages.push_back({{"weights", s.weights},
                      {"gradients", s.gradients},
                      {"masters", s.masters},
                      {"optimizer", s.optimizer},
                      {"buffers", s.buffers},
                      {"activations", s.activations},
                      {"step_workspace", s.step_workspace},
                      {"live_micro_batches", s.live_micro_batches},
                      {"total", s.total()}});
  }
  nlohmann::json terms = nlohmann::json::object();
  for (const TermName& name : term_names()) terms[name.key] = p.terms.*name.term;
  return {{"model_parallel", l.parallel.tensor},
          {"terms", terms},
          {"sequence_parallel", l.parallel.sequence_parallel},
          {"context_parallel", l.parallel.context},
          {"pipe", l.parallel.pipe},
          {"data", l.parallel.data},
          {"expert_parallel", l.parallel.expert},
          {"micro_batch", l.micro_batch},
          {"micro_batches", l.micro_batches},
          {"schedule", config::name_of(schedule::schedule_names(), l.schedule)},
          {"chunks", l.parallel.chunks},
          {"zero", l.zero},
          {"checkpointing", l.checkpointing},
          {"recompute", recompute_json(l)},
          {"step_seconds", p.step_seconds},
          {"pipeline_seconds", p.pipeline_seconds},
          {"data_parallel_seconds", p.data_parallel_seconds},
          {"tied_seconds", p.tied_seconds},
          {"optimizer_seconds", p.optimizer_seconds},
          {"bubble", p.bubble},
          {"mfu", p.mfu},
          {"model_flops", p.model_flops},
          {"all_to_all_bytes", p.all_to_all_bytes},
          {"transports", transports_json(l, p.transports)},
          {"host_staged", p.transports.host_staged(l)},
          {"stages", stages},
          {"rejected", c.rejected}};
}

nlohmann::json ready_config(nlohmann::json config, const planner::Layout& l) {
  const auto& keys = trainer::job_keys();
  trainer::set_layout_keys(config, l.parallel);
  keys.set(config, "pipeline.schedule", config::name_of(schedule::schedule_names(), l.schedule));
  keys.set(config, "pipeline.activation_checkpoint_interval", l.checkpointing ? 1 : 0);
  // The planner's choice, or none: its predictions assumed no other.
  if (l.recomputes())
    keys.set(config, "pipeline.recompute", recompute_json(l));
  else
    keys.erase(config, "pipeline.recompute");
  keys.set(config, "train_batch_size", l.global_batch());
  keys.set(config, "train_micro_batch_size_per_gpu", l.micro_batch);
  keys.set(config, "gradient_accumulation_steps", l.micro_batches);
  keys.set(config, "zero_optimization.stage", l.zero);
  return config;
}

Plan make_plan(const PlanOptions& o, const std::optional<nlohmann::json>& given) {
  if (o.top < 1) throw io::InputError("--top must be at least 1");
  planner::Cluster cluster = planner::read_cluster(o.cluster);
  if (o.nodes) {
    if (*o.nodes < 1) throw io::InputError("--nodes must be at least 1");
    cluster.nodes = *o.nodes;
  }
  // Work bounds, checked before a product can overflow or a loop runs over them.
  constexpr int64_t kMostDevices = 1 << 20;
  if (cluster.nodes > kMostDevices || cluster.devices_per_node > kMostDevices ||
      cluster.devices() > kMostDevices) {
    throw io::InputError("plan: " + std::to_string(cluster.nodes) + " nodes of " +
                         std::to_string(cluster.devices_per_node) + " devices: at most " +
                         std::to_string(kMostDevices) + " devices in all");
  }
  nlohmann::json config = given ? *given : config::read_json_file(o.config);
  std::vector<std::string> unknown;
  trainer::check_lora_section(config);
  const trainer::JobConfig job = trainer::parse_job_config(config, &unknown);
  trainer::refuse_unknown_keys(unknown);
  planner::LayoutLimits limits = o.limits;
  if (!o.schedule.empty()) {
    limits.schedule = config::read_choice("--schedule", o.schedule, schedule::schedule_names(),
                                          config::Quoting::kQuoted);
    if (*limits.schedule == schedule::Kind::kLoopedBfs || *limits.schedule == schedule::Kind::kFile)
      throw io::InputError("--schedule " + o.schedule +
                           ": the planner does not offer it (looped-bfs keeps every micro-batch "
                           "live; a file's orders are its own)");
  }
  if (!o.checkpointing.empty())
    limits.checkpointing = config::read_choice("--checkpointing", o.checkpointing,
                                               config::Names<bool>{{"on", true}, {"off", false}},
                                               config::Quoting::kQuoted);
  limits.recompute = read_recompute(o.recompute);
  Plan plan{std::move(config),
            std::move(cluster),
            std::make_unique<planner::Workload>(job.model, job.engine, job.lora),
            {},
            0};
  const planner::Workload& workload = *plan.workload;
  // train's LoRA checks: adapters on linears the model has, in blocks it has.
  double adapters = 0;
  int64_t blocks = 0;
  for (const auto& layer : workload.layers) {
    adapters += layer.adapter_parameters;
    // Transformer blocks, as train counts them (the layers with a block index).
    blocks += layer.block;
  }
  module::check_adapted(job.lora, models::type_name(job.model), adapters, blocks);
  plan.all = planner::plan_layouts(workload, plan.cluster, o.global_batch, limits);
  for (const auto& c : plan.all) plan.fitting += c.rejected.empty();
  if (plan.fitting == 0) {  // the layouts are sorted: the first needs the least memory
    const planner::Candidate& least = plan.all.front();
    char text[200];
    std::snprintf(text, sizeof text,
                  "no layout fits in %.3g GiB per device: the smallest, t %d c %d p %d d %d b "
                  "%lld, needs %.3g GiB on stage %d",
                  plan.cluster.memory_bytes / kGiB, static_cast<int>(least.layout.parallel.tensor),
                  static_cast<int>(least.layout.parallel.context),
                  static_cast<int>(least.layout.parallel.pipe),
                  static_cast<int>(least.layout.parallel.data),
                  static_cast<long long>(least.layout.micro_batch),
                  least.prediction.peak_bytes() / kGiB, least.prediction.peak_stage());
    throw io::InputError(text);
  }
  return plan;
}

}  // namespace pipetrain::cli
