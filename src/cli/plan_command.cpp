// `pipetrain plan`: the best layouts of a model on a cluster, predicted.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "commands.h"
#include "io/atomic_file.h"
#include "pipetrain/config/config_section.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/module/lora_config.h"
#include "pipetrain/module/recompute.h"
#include "planner/planner.h"
#include "shape_options.h"
#include "trainer/job_config.h"

namespace pipetrain::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct PlanOptions {
  std::string config;
  std::string cluster;
  int64_t global_batch = 0;
  int top = 5;
  std::optional<int64_t> nodes;  // unset: the cluster file's
  std::string out;
  std::string schedule, checkpointing, recompute = "auto";
  std::string format = "table";
  planner::LayoutLimits limits;
};

// Selective recompute per stage, as pipeline.recompute takes it: [["mlp"], [], ...].
nlohmann::json recompute_json(const planner::Layout& l) {
  nlohmann::json stages = nlohmann::json::array();
  for (int s = 0; s < l.parallel.pipe; ++s) stages.push_back(l.recompute_of(s).names());
  return stages;
}

void print_header() {
  std::printf("%3s %4s %3s %4s %4s %4s %5s %-17s %4s %4s %10s %10s %7s %6s %6s %14s  %s\n", "#",
              "t", "c", "p", "d", "b", "m", "schedule", "zero", "ckpt", "step s", "samples/s",
              "bubble", "dp %", "MFU", "peak GiB (st)", "transports");
}

void print_row(int rank, const planner::Candidate& c) {
  const auto& l = c.layout;
  const auto& p = c.prediction;
  // A layout ruled out by its memory alone has no predicted times: "-".
  const bool timed = !std::isnan(p.step_seconds);
  auto shown = [timed](double value, const char* format) {
    if (!timed) return std::string("-");
    char text[32];
    std::snprintf(text, sizeof text, format, value);
    return std::string(text);
  };
  // t with "s" under sequence parallelism.
  const std::string t =
      std::to_string(l.parallel.tensor) + (l.parallel.sequence_parallel ? "s" : "");
  // d with "eE" under expert parallelism: "4e2", four replicas in expert groups of two.
  const std::string d = std::to_string(l.parallel.data) +
                        (l.parallel.expert > 1 ? "e" + std::to_string(l.parallel.expert) : "");
  std::printf("%3d %4s %3d %4d %4s %4lld %5lld %-17s %4d %4s %10s %10s %7s %6s %6s %8.2f (%d)",
              rank, t.c_str(), static_cast<int>(l.parallel.context),
              static_cast<int>(l.parallel.pipe), d.c_str(), static_cast<long long>(l.micro_batch),
              static_cast<long long>(l.micro_batches), l.schedule_label().c_str(), l.zero,
              l.checkpointing ? "on" : (l.recomputes() ? "sel" : "off"),
              shown(p.step_seconds, "%.4g").c_str(),
              shown(static_cast<double>(l.global_batch()) / p.step_seconds, "%.4g").c_str(),
              shown(100 * p.bubble, "%.1f%%").c_str(),
              shown(100 * p.data_parallel_seconds / p.step_seconds, "%.1f%%").c_str(),
              shown(100 * p.mfu, "%.1f%%").c_str(), p.peak_bytes() / kGiB, p.peak_stage());
  std::printf("  %s", p.transports.describe(l).c_str());
  if (p.transports.host_staged(l)) std::printf(" (through host memory)");
  if (!c.rejected.empty()) std::printf("  %s", c.rejected.c_str());
  if (l.recomputes()) std::printf("  recompute %s", recompute_json(l).dump().c_str());
  std::printf("\n");
}

// The step's terms, as `plan` names them and as --format json keys them.
struct TermName {
  const char* said;
  const char* key;
  double planner::StepTerms::*term;
};
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

// Where `loser` spends the time it loses against `winner`: the terms it pays more for,
// largest first (at most three, each at least a quarter of the largest), with how much more.
// A term both pay nothing for is never named.
std::string why_slower(const planner::Candidate& winner, const planner::Candidate& loser) {
  std::vector<std::pair<double, const char*>> more;
  for (const TermName& name : term_names()) {
    const double extra = loser.prediction.terms.*name.term - winner.prediction.terms.*name.term;
    if (extra > 0) more.emplace_back(extra, name.said);
  }
  std::sort(more.begin(), more.end(), std::greater<>());
  std::string reason;
  for (std::size_t i = 0; i < more.size() && i < 3 && more[i].first >= 0.25 * more[0].first; ++i) {
    char part[96];
    const double ms = 1e3 * more[i].first;
    std::snprintf(part, sizeof part, ms < 100 ? "%s%s (+%.3g ms)" : "%s%s (+%.0f ms)",
                  i ? ", " : "more ", more[i].second, ms);
    reason += part;
  }
  return reason;
}

// For each choice the planner made (t, p, micro-batch, schedule, ZeRO, checkpointing): the
// fastest fitting layout that chose otherwise (its rank in the list), and where it loses its
// time; one faster than the pick, ranked below it by the tie rule, says so; or that no such
// layout fits.
void print_losers(const std::vector<planner::Candidate>& all) {
  using Choice = std::pair<std::string, std::function<std::string(const planner::Layout&)>>;
  const std::vector<Choice> choices{
      {"t", [](const planner::Layout& l) { return std::to_string(l.parallel.tensor); }},
      {"sequence parallel",
       [](const planner::Layout& l) { return l.parallel.sequence_parallel ? "on" : "off"; }},
      {"c", [](const planner::Layout& l) { return std::to_string(l.parallel.context); }},
      {"p", [](const planner::Layout& l) { return std::to_string(l.parallel.pipe); }},
      {"e", [](const planner::Layout& l) { return std::to_string(l.parallel.expert); }},
      {"b", [](const planner::Layout& l) { return std::to_string(l.micro_batch); }},
      {"schedule", [](const planner::Layout& l) { return l.schedule_label(); }},
      {"zero", [](const planner::Layout& l) { return std::to_string(l.zero); }},
      {"checkpointing", [](const planner::Layout& l) { return l.checkpointing ? "on" : "off"; }},
  };
  const planner::Candidate& best = all.front();
  std::printf("why the others lost (the fastest of each other choice, its rank):\n");
  for (const auto& [name, value_of] : choices) {
    // Keyed (length, text): numbers in numeric order.
    using Key = std::pair<std::size_t, std::string>;
    std::map<Key, std::size_t> fastest, smallest;  // indices into `all`
    for (std::size_t i = 1; i < all.size(); ++i) {
      const planner::Candidate& c = all[i];
      const Key value{value_of(c.layout).size(), value_of(c.layout)};
      if (value.second == value_of(best.layout)) continue;
      if (c.rejected.empty() &&
          (!fastest.count(value) ||
           c.prediction.step_seconds < all[fastest[value]].prediction.step_seconds))
        fastest[value] = i;
      if (!smallest.count(value) ||
          c.prediction.peak_bytes() < all[smallest[value]].prediction.peak_bytes())
        smallest[value] = i;
    }
    for (const auto& [value, index] : smallest) {
      const std::string label = name + " " + value.second;
      if (!fastest.count(value)) {
        std::printf("  %-22s out of memory: at least %.1f GiB on a device\n", label.c_str(),
                    all[index].prediction.peak_bytes() / kGiB);
        continue;
      }
      const std::size_t i = fastest[value];
      const planner::Prediction& p = all[i].prediction;
      const double change = 100 * (p.step_seconds / best.prediction.step_seconds - 1);
      char tie[128];
      std::snprintf(
          tie, sizeof tie,
          "as fast or faster, ranked below by the tie rule: %.1f GiB peak against %.1f GiB",
          p.peak_bytes() / kGiB, best.prediction.peak_bytes() / kGiB);
      const std::string why =
          p.step_seconds <= best.prediction.step_seconds ? tie : why_slower(best, all[i]);
      std::printf("  %-22s %.4g s/step (%+.1f%%, #%zu): %s\n", label.c_str(), p.step_seconds,
                  change, i + 1, why.c_str());
    }
  }
}

// A candidate for `--format json`: the layout, the prediction, each stage's memory.
// Each group of more than one rank and its transport.
nlohmann::json transports_json(const planner::Layout& l, const planner::Transports& t) {
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [group, transport] : t.groups(l))
    groups[group] = planner::transport_name(transport);
  return groups;
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
          {"schedule", config::name_of(engine::pipeline_schedules(), l.schedule)},
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

// The input config with the layout's keys set: ready for `pipetrain train`.
nlohmann::json ready_config(nlohmann::json config, const planner::Layout& l) {
  const auto& keys = trainer::job_keys();
  trainer::set_layout_keys(config, l.parallel);
  keys.set(config, "pipeline.schedule", config::name_of(engine::pipeline_schedules(), l.schedule));
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

int run_plan(const PlanOptions& o) {
  if (!o.out.empty()) io::check_output_directory(o.out, "--out");
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
  const nlohmann::json json = config::read_json_file(o.config);
  std::vector<std::string> unknown;
  trainer::check_lora_section(json);
  const trainer::JobConfig job = trainer::parse_job_config(json, &unknown);
  trainer::refuse_unknown_keys(unknown);
  planner::LayoutLimits limits = o.limits;
  if (!o.schedule.empty()) {
    limits.schedule = config::read_choice("--schedule", o.schedule, engine::pipeline_schedules(),
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
  const planner::Workload workload(job.model, job.engine, job.lora);
  // train's LoRA checks: adapters on linears the model has, in blocks it has.
  double adapters = 0;
  int64_t blocks = 0;
  for (const auto& layer : workload.layers) {
    adapters += layer.adapter_parameters;
    // Decoder blocks, as train counts them (the layers with a block index).
    blocks +=
        layer.type == "LlamaBlock" || layer.type == "MixtralBlock" || layer.type == "GptBlock";
  }
  module::check_adapted(job.lora, models::type_name(job.model), adapters, blocks);
  const auto all = planner::plan_layouts(workload, cluster, o.global_batch, limits);
  int fitting = 0;
  for (const auto& c : all) fitting += c.rejected.empty();
  if (fitting == 0) {  // the layouts are sorted: the first needs the least memory
    const planner::Candidate& least = all.front();
    char text[200];
    std::snprintf(text, sizeof text,
                  "no layout fits in %.3g GiB per device: the smallest, t %d c %d p %d d %d b "
                  "%lld, needs %.3g GiB on stage %d",
                  cluster.memory_bytes / kGiB, static_cast<int>(least.layout.parallel.tensor),
                  static_cast<int>(least.layout.parallel.context),
                  static_cast<int>(least.layout.parallel.pipe),
                  static_cast<int>(least.layout.parallel.data),
                  static_cast<long long>(least.layout.micro_batch),
                  least.prediction.peak_bytes() / kGiB, least.prediction.peak_stage());
    throw io::InputError(text);
  }
  if (!o.out.empty())
    io::write_file_atomically(o.out, ready_config(json, all.front().layout).dump(2) + "\n");
  if (o.format == "json") {
    nlohmann::json rows = nlohmann::json::array();
    for (int i = 0; i < std::min<int>(o.top, static_cast<int>(all.size())); ++i)
      rows.push_back(candidate_json(all[i]));
    std::printf("%s\n", rows.dump().c_str());
    return 0;
  }

  // A calibrated file describes the machine that measured it (said once a plan stands).
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  if (!cluster.calibrated_on.empty() && cluster.calibrated_on != host) {
    std::fprintf(stderr,
                 "pipetrain: note: %s was calibrated on %s, not on this host (%s): for this "
                 "machine's figures run `pipetrain launch -n 2 -- pipetrain calibrate --out "
                 "FILE` here first\n",
                 o.cluster.c_str(), cluster.calibrated_on.c_str(), host);
  }
  double parameters = 0;
  for (const auto& layer : workload.layers) parameters += layer.parameters;
  std::printf(
      "plan: %s, %.4g parameters, on %s: %lld devices (%lld x %lld), %.0f GiB each; "
      "global batch %lld\n",
      models::type_name(job.model).c_str(), parameters, cluster.name.c_str(),
      static_cast<long long>(cluster.devices()), static_cast<long long>(cluster.nodes),
      static_cast<long long>(cluster.devices_per_node), cluster.memory_bytes / kGiB,
      static_cast<long long>(o.global_batch));
  std::printf("layouts: %zu predicted, %d fit in memory, %zu do not\n", all.size(), fitting,
              all.size() - fitting);
  std::printf(
      "ranked by predicted step time; within %g%% of the fastest, the lower peak memory "
      "first (the tie rule)\n",
      100 * planner::kTiedWithin);
  print_header();
  for (int i = 0; i < std::min<int>(o.top, static_cast<int>(all.size())); ++i)
    print_row(i + 1, all[i]);
  std::printf(
      "MFU assumes: matrix products at %.1f%% of the %s peak (the cluster's efficiency), the "
      "data-parallel reduction after the schedule (no overlap), transfers %s\n",
      100 * cluster.efficiency, workload.half_precision() ? "bf16" : "fp32",
      cluster.gpu ? "over NCCL where the engine uses it, else through host memory "
                    "(host_staging)"
                  : "over MPI");
  print_losers(all);
  if (!o.out.empty()) std::printf("wrote %s (layout 1)\n", o.out.c_str());
  return 0;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* command = app.add_subcommand(
      "plan", "Choose pipe x data x model, schedule, micro-batches, ZeRO and checkpointing");
  command->add_option("--config", options->config, "Model and training config (JSON)")->required();
  command->add_option("--cluster", options->cluster, "Cluster description (JSON, see clusters/)")
      ->required();
  command->add_option("--global-batch", options->global_batch, "Samples per optimizer step")
      ->required();
  command->add_option("--top", options->top, "Layouts to print")->capture_default_str();
  command->add_option("--out", options->out, "Write the best layout's config here");
  command->add_option("--format", options->format, "table, or json (the top layouts, one line)")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  command->add_option("--nodes", options->nodes, "Nodes of the cluster (default: the file's)");
  command->add_option("--devices", options->limits.devices,
                      "Plan for this many of the cluster's devices (default: all)");
  auto& limits = options->limits;
  command->add_option("--model,-t", limits.tensor, "Fix the model-parallel size");
  command->add_option("--context,-c", limits.context,
                      "Fix the context-parallel size (default: 1, 2, 4, 8 or 16 tried)");
  command->add_option("--sequence-parallel", limits.sequence_parallel,
                      "Fix sequence parallelism on or off (default: both tried where t > 1)");
  command->add_option("--pipe,-p", limits.pipe, "Fix the pipeline stages");
  command->add_option("--data,-d", limits.data, "Fix the data-parallel size");
  command->add_option("--experts,-e", limits.experts,
                      "Fix the expert-parallel size (a mixture of experts)");
  command->add_option("--micro-batch,-b", limits.micro_batch, "Fix the micro-batch size");
  command->add_option("--max-micro-batch", limits.max_micro_batch, "Largest micro-batch tried")
      ->capture_default_str();
  command->add_option("--schedule", options->schedule, "Fix the schedule: " + schedule_names());
  command->add_option("--chunks", limits.chunks, "Fix the model chunks per stage");
  command->add_option("--zero", limits.zero, "Fix the ZeRO stage (0 to 3)")
      ->check(CLI::Range(0, 3));
  command->add_option("--checkpointing", options->checkpointing, "Fix checkpointing: on or off");
  command
      ->add_option("--recompute", options->recompute,
                   "Selective recompute on every stage: none, or parts (attention, mlp, "
                   "mlp_activation, norms, experts) joined by commas; auto: none, or per stage "
                   "what fits the memory")
      ->capture_default_str();
  return {command, [options] { return run_plan(*options); }};
}

}  // namespace pipetrain::cli
