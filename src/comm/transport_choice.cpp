#include "pipetrain/comm/transport_choice.h"

#include <algorithm>
#include <set>

namespace pipetrain::comm {

std::string_view transport_name(Transport transport) {
  return transport == Transport::kNccl ? "nccl" : "mpi";
}

Transport choose_transport(const std::vector<std::string>& gpus, bool nccl_built) {
  if (!nccl_built || gpus.size() < 2) return Transport::kMpi;  // one rank moves nothing
  const bool all_on_gpus =
      std::none_of(gpus.begin(), gpus.end(), [](const std::string& gpu) { return gpu.empty(); });
  const bool own_gpus = std::set<std::string>(gpus.begin(), gpus.end()).size() == gpus.size();
  return all_on_gpus && own_gpus ? Transport::kNccl : Transport::kMpi;
}

std::vector<Transport> pair_transports(const std::vector<std::string>& stage_gpus,
                                       bool nccl_built) {
  std::vector<Transport> pairs;
  for (std::size_t k = 0; k + 1 < stage_gpus.size(); ++k)
    pairs.push_back(choose_transport({stage_gpus[k], stage_gpus[k + 1]}, nccl_built));
  return pairs;
}

}  // namespace pipetrain::comm
