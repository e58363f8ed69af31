#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace pipetrain::topology {

// Named axes with sizes laid over the ranks of a job, row-major: the last axis varies
// fastest, as in DeepSpeed, so coordinates agree with DeepSpeed's for the same axes.
class ProcessTopology {
 public:
  // Throws InputError for no axes, a repeated name or a size below 1.
  ProcessTopology(std::vector<std::string> axes, std::vector<int> dims);

  const std::vector<std::string>& axes() const { return axes_; }
  const std::vector<int>& dims() const { return dims_; }
  int world_size() const { return world_size_; }
  int dim(std::string_view axis) const;

  std::vector<int> coord(int rank) const;
  int coord(int rank, std::string_view axis) const;
  int rank(const std::vector<int>& coord) const;
  // `rank` with the given axes changed.
  int rank_with(int rank, const std::map<std::string, int>& changes) const;

  // The ranks that differ only along `axis`, one list per combination of the other
  // coordinates (in row-major order of those): the communicator groups of that axis.
  std::vector<std::vector<int>> axis_groups(std::string_view axis) const;
  // Ranks whose coordinates match every given (axis, value), ascending.
  std::vector<int> filter_ranks(const std::map<std::string, int>& fixed) const;

  // "pipe=1 data=0 model=1"
  std::string describe(int rank) const;

  // Throws InputError unless the axes cover exactly `world_size` ranks.
  void check_world_size(int world_size) const;

 private:
  int axis_index(std::string_view axis) const;
  void check_rank(int rank) const;

  std::vector<std::string> axes_;
  std::vector<int> dims_;
  int world_size_ = 1;
};

// DeepSpeed's hybrid topologies.
ProcessTopology pipe_data_parallel_topology(int pipe, int data);
ProcessTopology pipe_model_data_parallel_topology(int pipe, int data, int model);
// With context parallelism: axes pipe, data, context, model (model fastest, then context, as
// Megatron orders tp-cp-dp-pp); without it (context 1), the three axes above.
ProcessTopology pipe_data_context_model_topology(int pipe, int data, int context, int model);

}  // namespace pipetrain::topology
