#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/config/key_table.h"

namespace pipetrain::planner {

// A link's speed for one rank: bytes per second each way, and seconds per message.
struct Link {
  double bandwidth = 0;
  double latency = 0;

  // A ring all-reduce of `bytes` over `ranks` ranks: 2(n-1)/n of the bytes each way,
  // 2(n-1) steps (a reduce-scatter and an all-gather cost half each).
  double all_reduce(double bytes, int ranks) const;
};

// The machines a job runs on, as the planner sees them (see clusters/*.json). Every figure
// is per device (a GPU, or a CPU core for a CPU-only machine).
struct Cluster {
  std::string name;
  std::vector<std::string> sources;  // where the figures come from
  std::string calibrated_on;         // the host `pipetrain calibrate` measured; empty: none
  int64_t nodes = 1;
  int64_t devices_per_node = 1;
  double memory_bytes = 0;  // per device
  double fp32_flops = 0;    // dense peak, FLOP/s
  double bf16_flops = 0;    // dense peak in bf16 (and fp16)
  double efficiency = 1;    // the share of the peak a transformer's large matrix products reach
  // Narrower products reach less: at width w (d_model / t) the share is efficiency ·
  // w / (w + half_width); 0 when width does not matter (a GPU at transformer sizes).
  double half_width = 0;
  double memory_bandwidth = 0;  // bytes per second the optimizer step streams
  // Bytes per second elementwise work on activations streams (norms, GELU, adds); 0: the
  // memory bandwidth. On a CPU activations of a layer stay in cache; on a GPU they do not.
  double activation_bandwidth = 0;
  double layer_overhead = 0;  // seconds per layer pass beyond its FLOPs (launches, engine)
  double pass_overhead = 0;   // seconds per compute instruction of a stage beyond its layers
  double step_overhead = 0;   // seconds per optimizer step beyond the passes
  // Cores a node's devices share (CPU ranks on fewer cores than ranks); 0: a device each.
  // While more of its ranks compute than there are cores, each computes that much slower.
  int64_t shared_cores = 0;
  // Seconds a message waits beyond its link's latency while ranks outnumber the shared
  // cores: the receiver, yielding in its wait, runs again only when a core frees.
  double shared_core_latency = 0;
  Link intra_node;  // between devices of one node
  Link inter_node;  // between nodes, per device
  // The devices: GPUs (NCCL carries what the engine lets it, the rest goes through host
  // memory over MPI), or CPU cores (MPI everywhere).
  bool gpu = true;
  // A GPU's transfer that MPI carries through host memory: device to host, host to host,
  // host to device (what a pipe NCCL cannot carry, and the context ring, pay on a GPU).
  Link host_staging{10e9, 40e-6};

  int64_t devices() const { return nodes * devices_per_node; }
  // Matrix FLOP/s one device reaches in the compute type (bf16 also for fp16) on products
  // of width `width`.
  double achieved_flops(bool half_precision, double width) const;
  double activation_streaming() const {
    return activation_bandwidth > 0 ? activation_bandwidth : memory_bandwidth;
  }
  // The link a group of `size` ranks `stride` apart uses: NVLink-like inside a node, the
  // network once the group spans nodes.
  const Link& link(int size, int stride) const;
};

// The keys of a cluster file, each bound once (`pipetrain plan --cluster`).
const config::KeyTable<Cluster>& cluster_keys();

// Reads a cluster file; InputError names the file and the bad or unknown key.
Cluster read_cluster(const std::string& path);

}  // namespace pipetrain::planner
