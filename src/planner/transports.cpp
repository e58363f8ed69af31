#include "planner/transports.h"

#include "schedule/pair_order.h"

namespace pipetrain::planner {

const char* transport_name(Transport transport) {
  switch (transport) {
    case Transport::kNccl:
      return "nccl";
    case Transport::kHostStaged:
      return "host";
    case Transport::kMpi:
      break;
  }
  return "mpi";
}

bool Transports::host_staged(const Layout& l) const {
  return (l.parallel.pipe > 1 && pipe == Transport::kHostStaged) ||
         (l.parallel.context > 1 && context == Transport::kHostStaged);
}

std::vector<std::pair<const char*, Transport>> Transports::groups(const Layout& l) const {
  std::vector<std::pair<const char*, Transport>> found;
  auto add = [&](const char* group, int64_t size, Transport t) {
    if (size > 1) found.emplace_back(group, t);
  };
  add("pipe", l.parallel.pipe, pipe);
  add("data", l.parallel.data, data);
  add("tensor", l.parallel.tensor, tensor);
  add("context", l.parallel.context, context);
  add("expert", l.parallel.expert, experts);
  return found;
}

std::string Transports::describe(const Layout& l) const {
  std::string text;
  for (const auto& [group, transport] : groups(l))
    text += (text.empty() ? "" : ", ") + std::string(group) + " " + transport_name(transport);
  return text.empty() ? "one rank" : text;
}

Transport context_transport(const Cluster& cluster) {
  return cluster.gpu ? Transport::kNccl : Transport::kMpi;
}

Transports transports_of(const Cluster& cluster, const Layout& l) {
  Transports t;
  if (!cluster.gpu) return t;
  t.data = t.tensor = t.experts = t.tied = Transport::kNccl;
  t.context = context_transport(cluster);
  const schedule::PipeShape shape =
      schedule::shape_for(l.schedule, static_cast<int>(l.micro_batches),
                          static_cast<int>(l.parallel.pipe), static_cast<int>(l.parallel.chunks));
  t.pipe = schedule::pipe_fits_nccl(l.schedule, shape) ? Transport::kNccl : Transport::kHostStaged;
  return t;
}

const Link& link_of(const Cluster& cluster, Transport transport, const Link& direct) {
  return transport == Transport::kHostStaged ? cluster.host_staging : direct;
}

}  // namespace pipetrain::planner
