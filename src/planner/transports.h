#pragma once

#include <string>
#include <utility>
#include <vector>

#include "planner/cluster.h"
#include "planner/layout.h"

namespace pipetrain::planner {

// How a group's transfers travel: NCCL between GPUs, MPI through host memory from a GPU
// (copied out, across and back in), or MPI between CPU ranks.
enum class Transport { kNccl, kHostStaged, kMpi };
const char* transport_name(Transport transport);

// The transport of each group of a layout, as the engine picks it: on GPUs NCCL carries the
// data-parallel, tensor-parallel, expert-parallel, tied and context-parallel groups, and the
// pipe wherever lanes carry its plans in order (schedule::pipe_fits_nccl: every built-in
// schedule); a pipe without lanes would go through host memory.
struct Transports {
  Transport pipe = Transport::kMpi;
  Transport data = Transport::kMpi;
  Transport tensor = Transport::kMpi;
  Transport context = Transport::kMpi;
  Transport experts = Transport::kMpi;
  Transport tied = Transport::kMpi;
  // Whether a GPU transfer the step waits on goes through host memory (the pipe's, or the
  // context ring's).
  bool host_staged(const Layout& layout) const;
  // "pipe nccl, data nccl, context host" for the groups of more than one rank.
  std::string describe(const Layout& layout) const;
  // Each group of more than one rank in `layout` ("pipe", "data", "tensor", "context",
  // "expert"), in that order, with its transport.
  std::vector<std::pair<const char*, Transport>> groups(const Layout& layout) const;
};
Transports transports_of(const Cluster& cluster, const Layout& layout);
// The context ring's: NCCL on GPUs (each pass one grouped exchange).
Transport context_transport(const Cluster& cluster);

// The link a group's transfers take: the cluster's for NCCL and MPI, its host staging for
// host-staged ones.
const Link& link_of(const Cluster& cluster, Transport transport, const Link& direct);

}  // namespace pipetrain::planner
