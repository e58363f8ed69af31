#pragma once

#include <cstdint>
#include <memory>

#include "pipetrain/comm/tensor_list.h"
#include "pipetrain/comm/tensor_transport.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain {

// What a transfer between stages carries: activations go to a later stage, the gradients
// of those activations come back.
enum class Flow { kActivation, kGradient };

// This stage's wire to the other stages of its pipe: blocking sends and receives of tensor
// lists with self-describing headers (shapes and dtypes may change per micro-batch). Under
// tensor parallelism with partitioned transfers each rank of the group moves only its
// 1/size share and the receiving group all-gathers the whole. Counts the payload bytes.
class StageLink {
 public:
  // `partitioned` takes effect only with a model-parallel group of more than one rank.
  StageLink(std::shared_ptr<const Grid> grid, bool partitioned);
  virtual ~StageLink() = default;
  StageLink(const StageLink&) = delete;
  StageLink& operator=(const StageLink&) = delete;

  // Returns once the tensors have left (DeepSpeed's blocking transfers): MPI moves a large
  // message only while both sides poll, so a send left pending during the next forward or
  // backward would hold the receiving stage up for that long.
  virtual void send(const TensorList& tensors, int stage, Flow flow);
  // Waits (with the communicator's deadline) for tensors from `stage`; entries of `reuse`
  // whose dtype and shape match are filled in place.
  TensorList recv(int stage, Flow flow, const TensorList& reuse = {});

  // Payload bytes sent and received so far (with partitioned transfers, this rank's
  // shares, not the all-gathered whole; headers not counted).
  int64_t bytes() const { return bytes_; }

 private:
  bool partitioned() const;

  std::shared_ptr<const Grid> grid_;
  bool partitioned_;
  comm::TensorTransport transport_;
  int64_t bytes_ = 0;
};

}  // namespace pipetrain
