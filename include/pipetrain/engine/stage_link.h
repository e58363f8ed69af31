#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/comm/tensor_list.h"
#include "pipetrain/comm/tensor_transport.h"
#include "pipetrain/comm/transport_choice.h"
#include "pipetrain/engine/transfer_progress.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::engine {

// What a transfer between stages carries: activations go to a later stage, the gradients
// of those activations come back.
enum class Flow { kActivation, kGradient };

// What a transfer carries, and for which model chunk of the receiving stage: each channel
// keeps its own order (an MPI tag), so interleaved chunks cannot take each other's tensors.
struct Channel {
  Channel(Flow flow_, int chunk_ = 0)
      : flow(flow_), chunk(chunk_) {}  // NOLINT: a Flow is chunk 0's

  Flow flow;
  int chunk;
};

// How a send returns. kBlocking: once the tensors have left (DeepSpeed's transfers). MPI
// moves a large message only while both sides poll, so a send left pending during the next
// forward or backward would hold the receiving stage up for that long; but a schedule in
// which neighbours send to each other at the same time deadlocks with blocking sends
// (schedule::SendMode::kSynchronous tells). kDeferred: at once; the send completes on its
// own (see TransferProgress) and complete_sends() waits for it.
enum class SendCompletion { kBlocking, kDeferred };

// This stage's wire to the other stages of its pipe: sends and receives of tensor lists
// with self-describing headers (shapes and dtypes may change per micro-batch). Under
// tensor parallelism with partitioned transfers each rank of the group moves only its
// 1/size share and the receiving group all-gathers the whole. Counts the payload bytes.
class StageLink {
 public:
  // `partitioned` takes effect only with a model-parallel group of more than one rank.
  // Received tensors are placed on `device`. Payloads to each neighbouring stage travel by
  // device::neighbour_links' choice when `nccl_allowed`, else over MPI: NCCL matches
  // transfers between two ranks by their order alone (no tags) and queues them on one
  // stream, which is safe only for one channel per direction (no chunks) and sends that
  // block (see SendCompletion).
  StageLink(std::shared_ptr<const topology::Grid> grid, bool partitioned, at::Device device,
            bool nccl_allowed, bool receive_ahead = false);
  virtual ~StageLink() = default;
  StageLink(const StageLink&) = delete;
  StageLink& operator=(const StageLink&) = delete;

  // How later sends complete (kBlocking at first); complete_sends() first when changing.
  void set_send_completion(SendCompletion sends) { completion_ = sends; }
  // The sent tensors must not be changed in place until the send completes.
  virtual void send(const comm::TensorList& tensors, int stage, Channel channel);
  // Waits (with the communicator's deadline) for tensors from `stage`; entries of `reuse`
  // whose dtype and shape match are filled in place (unless the receive was posted ahead).
  comm::TensorList recv(int stage, Channel channel, const comm::TensorList& reuse = {});

  // A receive a program makes.
  struct Receive {
    int stage;
    Channel channel;
  };
  // The receives the next program makes, in its order. Where receiving ahead is on, the
  // transfers progress on a helper thread and CPU payloads travel over MPI, each is posted ahead:
  // the first of each channel now, the next once the one before it is in. The tensors then
  // move while this stage computes, not when it asks for them. Receives an earlier program
  // left untaken (after a failure) are cancelled.
  void expect_receives(const std::vector<Receive>& receives);
  // Waits for every send in flight.
  void complete_sends() { in_flight_.complete_sends(); }

  // Payload bytes sent and received so far (with partitioned transfers, this rank's
  // shares, not the all-gathered whole; headers not counted).
  int64_t bytes() const { return bytes_; }
  // How payloads travel to each neighbouring stage: NCCL between GPUs of their own, else
  // MPI. "nccl" or "mpi" when alike (also without neighbours: "mpi"), else per stage, e.g.
  // "nccl to stage 1, mpi to stage 3".
  std::string transports() const;
  bool receives_ahead() const { return receive_ahead_; }

 private:
  bool partitioned() const;
  void post(const comm::TensorList& wire, int stage, Channel channel);
  // The wire's tensors from `stage`: the receive posted ahead, or one posted now.
  comm::TensorList receive(int stage, int tag, const comm::TensorList& reuse);
  void cancel_receives_ahead();

  // Receives of one channel from one stage: the one posted ahead, and how many follow.
  struct Ahead {
    std::unique_ptr<comm::PendingRecv> posted;
    int still_expected = 0;
  };

  std::shared_ptr<const topology::Grid> grid_;
  bool partitioned_;
  at::Device device_;
  SendCompletion completion_ = SendCompletion::kBlocking;
  comm::TensorTransport transport_;
  std::map<int, comm::Transport> transports_;  // by neighbouring stage
  bool receive_ahead_;
  std::map<std::pair<int, int>, Ahead> ahead_;  // by (stage, tag); outlives in_flight_
  TransferProgress in_flight_;
  int64_t bytes_ = 0;
};

}  // namespace pipetrain::engine
