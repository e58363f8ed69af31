#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "pipetrain/comm/communicator.h"

namespace pipetrain::comm {

// A route for payloads on every tag of a peer that has no route of its own for the tag
// (TensorTransport::route_sends).
inline constexpr int kEveryTag = -1;

// What a receiver needs to know to allocate one tensor.
struct TensorMeta {
  at::ScalarType dtype = at::kFloat;
  bool requires_grad = false;
  // Sent from host memory: received into host memory, and over MPI with the header even
  // where the peer's payloads take NCCL (e.g. a partitioned transfer's layout).
  bool on_host = false;
  std::vector<int64_t> shape;

  bool operator==(const TensorMeta&) const = default;
};

// Transfer headers: [magic, count, then per tensor: dtype, flags, rank, dims...] as int64
// words; flags: 1 requires grad, 2 in host memory. Supported dtypes: float32, float16, bfloat16,
// float64, int64, int32, int8, uint8 and bool. Headers are at most kMaxHeaderWords long.
inline constexpr int kMaxHeaderWords = 512;
std::vector<int64_t> encode_header(const std::vector<at::Tensor>& tensors);
// Throws std::runtime_error for a header that is not one.
std::vector<TensorMeta> decode_header(const int64_t* words, int64_t size);

// Collective over `comm`: the root's tensors on every rank, whatever their shapes and
// dtypes. The root may have none to give (nullopt); then every rank gets nullopt.
std::optional<std::vector<at::Tensor>> broadcast_tensors(
    Communicator& comm, const std::optional<std::vector<at::Tensor>>& tensors, int root);

// A send in flight; wait() before touching the sent tensors again.
class PendingSend {
 public:
  PendingSend() = default;
  void wait();
  // Whether every message has left, without blocking (moving the transfer along).
  bool test();

 private:
  friend class TensorTransport;
  std::vector<WorkPtr> works_;
  std::vector<at::Tensor> keep_alive_;  // header and contiguous payload copies
};

class TensorTransport;

// A receive in flight: its header first, then (once the header is in) its payloads, each
// posted as soon as it can be. test() moves it along without blocking; wait() blocks (with
// the communicators' deadlines) until every tensor is in. Not thread-safe: one thread at a
// time (see engine::TransferProgress).
class PendingRecv {
 public:
  bool test();
  std::vector<at::Tensor> wait();

 private:
  friend class TensorTransport;
  PendingRecv(TensorTransport& transport, int peer, int tag, at::Tensor header,
              std::vector<at::Tensor> reuse);
  void post_payloads();  // after the header arrived

  TensorTransport* transport_;
  int peer_, tag_;
  at::Tensor header_;  // receive buffer, kMaxHeaderWords int64
  WorkPtr header_work_;
  std::vector<at::Tensor> reuse_, tensors_;
  std::vector<TensorMeta> metas_;
  std::vector<WorkPtr> payload_works_;
  bool header_in_ = false;
};

// Sends a tensor or a tuple of tensors with its description, so shapes and dtypes may
// change from one transfer to the next: one small header message, then the payloads,
// all posted at once, over `comm` (MPI: headers live in host memory), unless a peer's
// payloads are routed over a communicator of their own (NCCL between two GPUs).
class TensorTransport {
 public:
  explicit TensorTransport(std::shared_ptr<Communicator> comm, at::Device device = at::kCPU);

  PendingSend send(const std::vector<at::Tensor>& tensors, int peer, int tag);
  // Posts the next receive from `peer` on `tag` (transfers on one tag arrive in the order
  // they were sent). Entries of `reuse` whose dtype and shape match are filled in place
  // instead of allocating.
  std::unique_ptr<PendingRecv> post_recv(int peer, int tag, std::vector<at::Tensor> reuse = {});
  // Blocks (with deadline) until the tensors arrive: post_recv waited for at once, into the
  // transport's own header buffer.
  std::vector<at::Tensor> recv(int peer, int tag, const std::vector<at::Tensor>& reuse = {});

  // From now on, payloads to `peer` on `tag` (kEveryTag: on any tag without a route of its
  // own) travel over `way` (e.g. an NCCL lane between the two), in which the peer is rank
  // `rank_there`; headers still travel over the transport's communicator.
  void route_sends(int peer, int tag, std::shared_ptr<Communicator> way, int rank_there);
  // Likewise for payloads from `peer`.
  void route_receives(int peer, int tag, std::shared_ptr<Communicator> way, int rank_there);

 private:
  friend class PendingRecv;
  struct Route {
    std::shared_ptr<Communicator> way;
    int rank;
  };
  using Routes = std::map<std::pair<int, int>, Route>;  // by (peer, tag)
  // The communicator and rank for a payload to or from `peer` on `tag`: its route, unless
  // the payload is in host memory and the route carries device tensors only (NCCL).
  std::pair<Communicator*, int> payload_path(int peer, int tag, bool on_host, bool sending) const;
  WorkPtr send_payload(const at::Tensor& payload, int peer, int tag);
  WorkPtr recv_payload(at::Tensor& payload, bool on_host, int peer, int tag);

  std::shared_ptr<Communicator> comm_;
  Routes sends_, receives_;
  at::Device device_;
  at::Tensor header_;  // recv()'s header buffer, reused (a receive posted ahead has its own)
};

}  // namespace pipetrain::comm
