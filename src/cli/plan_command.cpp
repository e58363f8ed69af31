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

#include "cli/plan.h"
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

int run_plan(const PlanOptions& o) {
  if (!o.out.empty()) io::check_output_directory(o.out, "--out");
  const Plan plan = make_plan(o);
  const auto& all = plan.all;
  const planner::Cluster& cluster = plan.cluster;
  const planner::Workload& workload = *plan.workload;
  const int fitting = plan.fitting;
  if (!o.out.empty())
    io::write_file_atomically(o.out, ready_config(plan.config, all.front().layout).dump(2) + "\n");
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
      models::type_name(workload.model).c_str(), parameters, cluster.name.c_str(),
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
