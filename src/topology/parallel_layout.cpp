#include "pipetrain/topology/parallel_layout.h"

#include "pipetrain/io/errors.h"

namespace pipetrain::topology {

ParallelLayout resolve_layout(ParallelLayout asked, int world_size) {
  const int64_t per_replica = asked.pipe * asked.context * asked.tensor;
  const std::string times_others =
      (asked.context > 1 ? " x context_parallel " + std::to_string(asked.context) : "") +
      (asked.tensor > 1 ? " x model_parallel " + std::to_string(asked.tensor) : "");
  if (world_size % per_replica != 0) {
    const std::string hint = world_size == 1
                                 ? " (one process: start the job with pipetrain launch -n " +
                                       std::to_string(per_replica) + " -- ...)"
                                 : "";
    throw io::InputError("pipeline.stages " + std::to_string(asked.pipe) + times_others +
                         " does not divide the job's " + std::to_string(world_size) + " ranks" +
                         hint);
  }
  const int64_t data = world_size / per_replica;
  if (asked.data && asked.data != data) {
    throw io::InputError("data-parallel size " + std::to_string(asked.data) + " with " +
                         std::to_string(asked.pipe) + " stages" + times_others + " needs " +
                         std::to_string(asked.data * per_replica) + " ranks, the job has " +
                         std::to_string(world_size));
  }
  if (asked.expert < 1 || data % asked.expert != 0) {
    throw io::InputError("expert_parallel " + std::to_string(asked.expert) +
                         " must divide the data-parallel size (" + std::to_string(data) + ")");
  }
  asked.data = data;
  return asked;
}

ProcessTopology make_topology(const ParallelLayout& layout) {
  // Resolved, every size divides the ranks, which an int counts.
  const int pipe = static_cast<int>(layout.pipe), data = static_cast<int>(layout.data);
  const int tensor = static_cast<int>(layout.tensor), context = static_cast<int>(layout.context);
  if (context > 1) {
    return ProcessTopology({"pipe", "data", "context", "model"}, {pipe, data, context, tensor});
  }
  if (tensor > 1) return ProcessTopology({"pipe", "data", "model"}, {pipe, data, tensor});
  return ProcessTopology({"pipe", "data"}, {pipe, data});
}

}  // namespace pipetrain::topology
