#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/transfer_progress.h"
#include "pipetrain/comm/tensor_list.h"
#include "pipetrain/comm/tensor_transport.h"
#include "pipetrain/device/transport.h"
#include "pipetrain/groups/communicators.h"
#include "pipetrain/schedule/pipe_lanes.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::engine {

// A transfer's channel: what it carries, for which chunk of the receiving stage; each
// channel keeps its own order (its tag), so interleaved chunks cannot take each other's
// tensors.
using schedule::Channel;

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
  // Over `comms`' pipe links (Communicators::connect_pipe first): payloads to each
  // neighbouring stage by that link's transport, headers over the pipe's MPI communicator.
  // `partitioned` takes effect only with a model-parallel group of more than one rank.
  // Received tensors are placed on the communicators' device.
  StageLink(const groups::Communicators& comms, bool partitioned);
  StageLink(const StageLink&) = delete;
  StageLink& operator=(const StageLink&) = delete;

  // How later sends complete (kBlocking at first); complete_sends() first when changing.
  void set_send_completion(SendCompletion sends) { completion_ = sends; }
  // What a send passes its tensors through first (a test's fault injection; by default
  // none). Called on the stage's own thread.
  using OutgoingFilter = std::function<comm::TensorList(const comm::TensorList&)>;
  void set_outgoing_filter(OutgoingFilter filter) { outgoing_ = std::move(filter); }

  // The sent tensors must not be changed in place until the send completes. To this
  // rank's own stage (a V's turn) a send is a local hand-over: the receive takes the same
  // storage, detached from the sender's graph, and nothing is counted.
  void send(const comm::TensorList& tensors, int stage, Channel channel);
  // Waits (with the communicator's deadline) for tensors from `stage`; entries of `reuse`
  // whose dtype and shape match are filled in place.
  comm::TensorList recv(int stage, Channel channel, const comm::TensorList& reuse = {});

  // What the stage holding the model's output feeds back to the first stage (generation's
  // drawn tokens, for the next round), on a channel of its own (Channel::feedback()): posted at
  // once, wait for it before changing the tensors. fed_back() waits for them at the first stage.
  comm::PendingSend feed_back(const comm::TensorList& tensors, int stage);
  comm::TensorList fed_back(int stage);

  // Waits for every send in flight.
  void complete_sends() { in_flight_.complete_sends(); }
  // Drops hand-overs not yet received (a step that failed between a send and its receive).
  void forget_hand_overs() { local_.clear(); }

  // Payload bytes sent and received so far (with partitioned transfers, this rank's
  // shares, not the all-gathered whole; headers not counted).
  int64_t bytes() const { return bytes_; }

 private:
  bool partitioned() const;
  void transmit(const comm::TensorList& tensors, int stage, Channel channel);
  void post(const comm::TensorList& wire, int stage, Channel channel);

  std::shared_ptr<const topology::Grid> grid_;
  std::shared_ptr<comm::Communicator>
      tensor_;  // the shares' all-gathers (NCCL on GPUs of their own)
  bool partitioned_;
  at::Device device_;
  SendCompletion completion_ = SendCompletion::kBlocking;
  comm::TensorTransport transport_;
  OutgoingFilter outgoing_;
  TransferProgress in_flight_;
  std::map<int, std::deque<comm::TensorList>> local_;  // hand-overs by tag, in order
  int64_t bytes_ = 0;
};

}  // namespace pipetrain::engine
