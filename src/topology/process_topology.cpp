#include "pipetrain/topology/process_topology.h"

#include <algorithm>
#include <stdexcept>

#include "pipetrain/io/errors.h"

namespace pipetrain::topology {

ProcessTopology::ProcessTopology(std::vector<std::string> axes, std::vector<int> dims)
    : axes_(std::move(axes)), dims_(std::move(dims)) {
  if (axes_.empty() || axes_.size() != dims_.size()) {
    throw io::InputError("a topology needs one size per axis and at least one axis");
  }
  for (std::size_t i = 0; i < axes_.size(); ++i) {
    if (dims_[i] < 1) {
      throw io::InputError("topology axis '" + axes_[i] + "' has size " + std::to_string(dims_[i]) +
                           "; sizes must be at least 1");
    }
    if (std::count(axes_.begin(), axes_.end(), axes_[i]) > 1) {
      throw io::InputError("topology axis '" + axes_[i] + "' appears twice");
    }
    world_size_ *= dims_[i];
  }
}

int ProcessTopology::axis_index(std::string_view axis) const {
  const auto it = std::find(axes_.begin(), axes_.end(), axis);
  if (it == axes_.end())
    throw std::invalid_argument("topology has no axis '" + std::string(axis) + "'");
  return static_cast<int>(it - axes_.begin());
}

void ProcessTopology::check_rank(int rank) const {
  if (rank < 0 || rank >= world_size_) {
    throw std::out_of_range("rank " + std::to_string(rank) + " is outside a topology of " +
                            std::to_string(world_size_));
  }
}

int ProcessTopology::dim(std::string_view axis) const {
  return dims_[axis_index(axis)];
}

std::vector<int> ProcessTopology::coord(int rank) const {
  check_rank(rank);
  std::vector<int> coord(axes_.size());
  for (int i = static_cast<int>(axes_.size()) - 1; i >= 0; --i) {
    coord[i] = rank % dims_[i];
    rank /= dims_[i];
  }
  return coord;
}

int ProcessTopology::coord(int rank, std::string_view axis) const {
  return coord(rank)[axis_index(axis)];
}

int ProcessTopology::rank(const std::vector<int>& coord) const {
  if (coord.size() != axes_.size()) throw std::invalid_argument("coordinate has the wrong length");
  int rank = 0;
  for (std::size_t i = 0; i < axes_.size(); ++i) {
    if (coord[i] < 0 || coord[i] >= dims_[i]) {
      throw std::out_of_range("coordinate " + std::to_string(coord[i]) + " is outside axis '" +
                              axes_[i] + "' of size " + std::to_string(dims_[i]));
    }
    rank = rank * dims_[i] + coord[i];
  }
  return rank;
}

int ProcessTopology::rank_with(int rank, const std::map<std::string, int>& changes) const {
  std::vector<int> c = coord(rank);
  for (const auto& [axis, value] : changes) c[axis_index(axis)] = value;
  return this->rank(c);
}

std::vector<std::vector<int>> ProcessTopology::axis_groups(std::string_view axis) const {
  const int along = axis_index(axis);
  std::vector<std::vector<int>> groups;
  // Ranks with coordinate 0 on `axis`, in rank order, are the row-major order of the
  // other coordinates; each starts one group.
  for (int r = 0; r < world_size_; ++r) {
    if (coord(r)[along] != 0) continue;
    std::vector<int> group;
    for (int i = 0; i < dims_[along]; ++i) group.push_back(rank_with(r, {{axes_[along], i}}));
    groups.push_back(std::move(group));
  }
  return groups;
}

std::vector<int> ProcessTopology::filter_ranks(const std::map<std::string, int>& fixed) const {
  std::vector<std::pair<int, int>> wanted;
  for (const auto& [axis, value] : fixed) wanted.emplace_back(axis_index(axis), value);
  std::vector<int> ranks;
  for (int r = 0; r < world_size_; ++r) {
    const std::vector<int> c = coord(r);
    const bool match = std::all_of(wanted.begin(), wanted.end(),
                                   [&](const auto& w) { return c[w.first] == w.second; });
    if (match) ranks.push_back(r);
  }
  return ranks;
}

std::string ProcessTopology::describe(int rank) const {
  const std::vector<int> c = coord(rank);
  std::string text;
  for (std::size_t i = 0; i < axes_.size(); ++i) {
    if (i) text += ' ';
    text += axes_[i] + "=" + std::to_string(c[i]);
  }
  return text;
}

void ProcessTopology::check_world_size(int world_size) const {
  if (world_size == world_size_) return;
  std::string shape;
  for (std::size_t i = 0; i < axes_.size(); ++i) {
    shape += (i ? " x " : "") + axes_[i] + " " + std::to_string(dims_[i]);
  }
  throw io::InputError("the grid " + shape + " needs " + std::to_string(world_size_) +
                       " ranks, but the job has " + std::to_string(world_size));
}

ProcessTopology pipe_data_parallel_topology(int pipe, int data) {
  return ProcessTopology({"pipe", "data"}, {pipe, data});
}

ProcessTopology pipe_model_data_parallel_topology(int pipe, int data, int model) {
  return ProcessTopology({"pipe", "data", "model"}, {pipe, data, model});
}

ProcessTopology pipe_data_context_model_topology(int pipe, int data, int context, int model) {
  if (context == 1) return pipe_model_data_parallel_topology(pipe, data, model);
  return ProcessTopology({"pipe", "data", "context", "model"}, {pipe, data, context, model});
}

}  // namespace pipetrain::topology
