#include "pipetrain/topology/grid.h"

#include <algorithm>

#include "pipetrain/comm/deadline.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::topology {

Grid::Grid(ProcessTopology topology, std::shared_ptr<comm::MpiCommunicator> world,
           int expert_parallel)
    : topology_(std::move(topology)), world_(std::move(world)) {
  topology_.check_world_size(world_->size());
  pipe_ = axis_comm("pipe");
  data_ = axis_comm("data");
  tensor_ = axis_comm("model");
  context_ = axis_comm("context");
  const bool context = has_axis("context");
  replica_ = context ? plane_comm("data", "context") : data_;
  sample_ = context ? plane_comm("context", "model") : tensor_;
  const int data = data_parallel_size();
  if (expert_parallel < 1 || data % expert_parallel != 0) {
    throw io::InputError("expert_parallel " + std::to_string(expert_parallel) +
                         " must divide the data-parallel size (" + std::to_string(data) + ")");
  }
  const int d = data_parallel_id();
  expert_ = expert_parallel == 1 ? world_->split(global_rank(), 0)  // just this rank
                                 : data_->split(d / expert_parallel, d % expert_parallel);
  expert_data_ =
      expert_parallel == 1 ? data_ : data_->split(d % expert_parallel, d / expert_parallel);
  comm::set_rank_identity("rank " + std::to_string(global_rank()) + " (" +
                          topology_.describe(global_rank()) + ")");
}

void Grid::set_timeout(comm::Seconds timeout) {
  for (const auto& comm :
       {pipe_, data_, tensor_, context_, replica_, sample_, world_, expert_, expert_data_})
    comm->set_timeout(timeout);
}

bool Grid::has_axis(const char* axis) const {
  const auto& axes = topology_.axes();
  return std::find(axes.begin(), axes.end(), axis) != axes.end();
}

int Grid::coordinate(const char* axis) const {
  return has_axis(axis) ? topology_.coord(global_rank(), axis) : 0;
}

int Grid::size(const char* axis) const {
  return has_axis(axis) ? topology_.dim(axis) : 1;
}

std::shared_ptr<comm::MpiCommunicator> Grid::axis_comm(const char* axis) const {
  if (!has_axis(axis)) return world_->split(global_rank(), 0);  // just this rank
  const auto groups = topology_.axis_groups(axis);
  for (std::size_t color = 0; color < groups.size(); ++color) {
    const auto& group = groups[color];
    const auto at = std::find(group.begin(), group.end(), global_rank());
    if (at != group.end())
      return world_->split(static_cast<int>(color), static_cast<int>(at - group.begin()));
  }
  throw std::logic_error("rank missing from its own axis groups");
}

std::shared_ptr<comm::MpiCommunicator> Grid::plane_comm(const char* first,
                                                        const char* second) const {
  // Colour: this rank with both coordinates zeroed; key: its place in the plane.
  const int corner = topology_.rank_with(global_rank(), {{first, 0}, {second, 0}});
  const int key = coordinate(first) * size(second) + coordinate(second);
  return world_->split(corner, key);
}

int Grid::stage_to_global(int stage) const {
  return topology_.rank_with(global_rank(), {{"pipe", stage}});
}

}  // namespace pipetrain::topology
