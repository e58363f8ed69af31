#include "planner/cluster.h"

#include "pipetrain/config/config_section.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::planner {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A field kept in SI units, read and written in the unit people quote (GB/s, µs, ...).
template <typename Field>
config::KeyTable<Cluster>& scaled(config::KeyTable<Cluster>& t, const std::string& key, Field field,
                                  double unit, const std::string& help,
                                  config::Range range = config::above(0)) {
  return t.custom(
      key, "number", help,
      [field, unit, range](const std::string& name, const nlohmann::json& value, Cluster& c) {
        field(c) = config::read_number(name, value, range) * unit;
      },
      [field, unit](const Cluster& c) { return nlohmann::json(field(c) / unit); });
}

}  // namespace

double Link::all_reduce(double bytes, int ranks) const {
  if (ranks <= 1) return 0;
  const double steps = 2.0 * (ranks - 1);
  return steps * latency + steps / ranks * bytes / bandwidth;
}

double Cluster::achieved_flops(bool half_precision, double width) const {
  return (half_precision ? bf16_flops : fp32_flops) * efficiency * width / (width + half_width);
}

const Link& Cluster::link(int size, int stride) const {
  return static_cast<int64_t>(size) * stride > devices_per_node ? inter_node : intra_node;
}

const config::KeyTable<Cluster>& cluster_keys() {
  static const config::KeyTable<Cluster> table = [] {
    config::KeyTable<Cluster> t;
    t.text("name", PIPETRAIN_FIELD(name), "what the file describes")
        .texts("sources", PIPETRAIN_FIELD(sources), "where its figures come from")
        .text("calibrated_on", PIPETRAIN_FIELD(calibrated_on),
              "the host `pipetrain calibrate` measured; `plan` on another host says to "
              "calibrate there first")
        .integer("nodes", PIPETRAIN_FIELD(nodes), "machines", config::at_least(1))
        .integer("devices_per_node", PIPETRAIN_FIELD(devices_per_node),
                 "GPUs per machine (cores of a CPU-only machine)", config::at_least(1));
    scaled(t, "memory_gib", PIPETRAIN_FIELD(memory_bytes), kGiB,
           "memory per device, GiB (required; at most a million)",
           config::Range{.min = 0, .max = 1e6, .exclusive_min = true});
    scaled(t, "peak_tflops.fp32", PIPETRAIN_FIELD(fp32_flops), 1e12,
           "dense float32 peak per device, TFLOP/s (required)");
    scaled(t, "peak_tflops.bf16", PIPETRAIN_FIELD(bf16_flops), 1e12,
           "dense bf16/fp16 peak per device, TFLOP/s; 0: the float32 peak", config::at_least(0));
    t.number("efficiency", PIPETRAIN_FIELD(efficiency),
             "share of the peak a transformer's large matrix products reach",
             config::within(0.001, 1))
        .number("half_width", PIPETRAIN_FIELD(half_width),
                "products of width w (d_model / t) reach efficiency · w / (w + half_width)",
                config::at_least(0));
    scaled(t, "memory_bandwidth_gbs", PIPETRAIN_FIELD(memory_bandwidth), 1e9,
           "GB/s the optimizer step streams parameters and state at (required)");
    scaled(t, "activation_bandwidth_gbs", PIPETRAIN_FIELD(activation_bandwidth), 1e9,
           "GB/s elementwise work on activations (norms, GELU, residual adds) streams at; 0: "
           "memory_bandwidth_gbs",
           config::at_least(0));
    scaled(t, "layer_overhead_us", PIPETRAIN_FIELD(layer_overhead), 1e-6,
           "µs per layer pass beyond its FLOPs", config::at_least(0));
    scaled(t, "pass_overhead_us", PIPETRAIN_FIELD(pass_overhead), 1e-6,
           "µs per forward or backward instruction of a stage beyond its layers (the engine, "
           "its transfers)",
           config::at_least(0));
    scaled(t, "step_overhead_ms", PIPETRAIN_FIELD(step_overhead), 1e-3,
           "ms per optimizer step beyond the passes", config::at_least(0));
    t.integer("shared_cores", PIPETRAIN_FIELD(shared_cores),
              "cores the devices of a node share, for CPU ranks that outnumber the cores "
              "(ranks computing at once beyond it slow each other down); 0: a core each",
              config::at_least(0));
    scaled(t, "shared_core_latency_us", PIPETRAIN_FIELD(shared_core_latency), 1e-6,
           "µs a message waits beyond its link's latency while ranks outnumber shared_cores "
           "(its receiver waits for a core)",
           config::at_least(0));
    scaled(t, "intra_node.bandwidth_gbs", PIPETRAIN_FIELD(intra_node.bandwidth), 1e9,
           "GB/s each way between two devices of a node (required)");
    scaled(t, "intra_node.latency_us", PIPETRAIN_FIELD(intra_node.latency), 1e-6,
           "µs per message inside a node", config::at_least(0));
    scaled(t, "inter_node.bandwidth_gbs", PIPETRAIN_FIELD(inter_node.bandwidth), 1e9,
           "GB/s each way per device between nodes (required)");
    scaled(t, "inter_node.latency_us", PIPETRAIN_FIELD(inter_node.latency), 1e-6,
           "µs per message between nodes", config::at_least(0));
    t.choice("device", PIPETRAIN_FIELD(gpu), config::Names<bool>{{"gpu", true}, {"cpu", false}},
             "what a device is: a GPU (NCCL where the engine uses it, host memory elsewhere) or "
             "a CPU core (MPI)");
    scaled(t, "host_staging.bandwidth_gbs", PIPETRAIN_FIELD(host_staging.bandwidth), 1e9,
           "GB/s each way of a GPU transfer MPI carries through host memory (copy out, across, "
           "in)",
           config::at_least(0.001));
    scaled(t, "host_staging.latency_us", PIPETRAIN_FIELD(host_staging.latency), 1e-6,
           "µs per message through host memory", config::at_least(0));
    t.check([](const Cluster& c) {
      for (const auto& [value, key] : {std::pair{c.memory_bytes, "memory_gib"},
                                       {c.fp32_flops, "peak_tflops.fp32"},
                                       {c.memory_bandwidth, "memory_bandwidth_gbs"},
                                       {c.intra_node.bandwidth, "intra_node.bandwidth_gbs"},
                                       {c.inter_node.bandwidth, "inter_node.bandwidth_gbs"}}) {
        if (value <= 0) throw io::InputError(std::string(key) + " is missing (it must be > 0)");
      }
    });
    return t;
  }();
  return table;
}

Cluster read_cluster(const std::string& path) {
  const nlohmann::json json = config::read_json_file(path);
  Cluster cluster;
  try {
    const auto unknown = cluster_keys().read(json, cluster);
    if (!unknown.empty()) throw io::InputError("unknown key " + unknown.front());
  } catch (const io::InputError& e) {
    throw io::InputError(path + ": " + e.what());
  }
  if (cluster.bf16_flops == 0) cluster.bf16_flops = cluster.fp32_flops;
  return cluster;
}

}  // namespace pipetrain::planner
