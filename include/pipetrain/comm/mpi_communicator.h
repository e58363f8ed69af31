#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "pipetrain/comm/communicator.h"

namespace pipetrain::comm {

// Communicator over an MPI communicator. CPU tensors travel directly; CUDA tensors are
// staged through pinned host memory (the path for ranks that share one GPU, where NCCL
// refuses to run). All waits poll nonblocking MPI requests against the deadline.
// Whether MPI was initialised for calls from several threads at once (MPI_THREAD_MULTIPLE).
bool mpi_thread_multiple();

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction unless it is MPI_COMM_WORLD).
  explicit MpiCommunicator(MPI_Comm comm);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  static std::shared_ptr<MpiCommunicator> world();

  // Collective over this communicator: ranks with equal `color` form one new
  // communicator, ordered by `key`.
  std::shared_ptr<MpiCommunicator> split(int color, int key) const;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int global_rank(int rank) const override { return global_ranks_.at(rank); }
  Transport transport() const override { return Transport::kMpi; }
  MPI_Comm handle() const { return comm_; }

  WorkPtr send(const at::Tensor& tensor, int peer, int tag) override;
  WorkPtr recv(at::Tensor& tensor, int peer, int tag) override;
  void all_reduce(at::Tensor& tensor, ReduceOp op) override;
  WorkPtr all_reduce_async(at::Tensor& tensor, ReduceOp op) override;
  bool starts_from_any_thread() const override;
  void broadcast(at::Tensor& tensor, int root) override;
  at::Tensor all_gather(const at::Tensor& input) override;
  void all_gather_in_place(at::Tensor& blocks) override;
  WorkPtr all_gather_in_place_async(at::Tensor& blocks) override;
  at::Tensor reduce_scatter(const at::Tensor& input, ReduceOp op) override;
  WorkPtr reduce_scatter_async(const at::Tensor& input, at::Tensor& output, ReduceOp op) override;
  void barrier() override;

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> global_ranks_;
};

}  // namespace pipetrain::comm
