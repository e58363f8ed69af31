#include "pipetrain/comm/tensor_transport.h"

#include <ATen/ATen.h>

#include <array>
#include <exception>
#include <stdexcept>
#include <string>

namespace pipetrain::comm {
namespace {

constexpr int64_t kMagic = 0x50495045;  // "PIPE"

// Wire codes, independent of at::ScalarType's numbering.
constexpr std::array<at::ScalarType, 9> kWireTypes = {
    at::kFloat, at::kHalf, at::kBFloat16, at::kDouble, at::kLong,
    at::kInt,   at::kChar, at::kByte,     at::kBool,
};

int64_t wire_code(at::ScalarType type) {
  for (std::size_t i = 0; i < kWireTypes.size(); ++i) {
    if (kWireTypes[i] == type) return static_cast<int64_t>(i);
  }
  throw std::invalid_argument(std::string("tensors of dtype ") + at::toString(type) +
                              " cannot be sent between stages");
}

}  // namespace

std::vector<int64_t> encode_header(const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> words{kMagic, static_cast<int64_t>(tensors.size())};
  for (const auto& tensor : tensors) {
    words.push_back(wire_code(tensor.scalar_type()));
    words.push_back((tensor.requires_grad() ? 1 : 0) | (tensor.is_cuda() ? 0 : 2));
    words.push_back(tensor.dim());
    words.insert(words.end(), tensor.sizes().begin(), tensor.sizes().end());
  }
  if (words.size() > kMaxHeaderWords) {
    throw std::invalid_argument("too many tensors or dimensions for one transfer (" +
                                std::to_string(words.size()) + " header words, at most " +
                                std::to_string(kMaxHeaderWords) + ")");
  }
  return words;
}

std::vector<TensorMeta> decode_header(const int64_t* words, int64_t size) {
  auto corrupt = [](const std::string& why) {
    return std::runtime_error("corrupt transfer header: " + why);
  };
  if (size < 2 || words[0] != kMagic) throw corrupt("no magic number");
  const int64_t count = words[1];
  if (count < 0 || count > size) throw corrupt("tensor count " + std::to_string(count));
  std::vector<TensorMeta> metas(count);
  int64_t at = 2;
  for (auto& meta : metas) {
    if (at + 3 > size) throw corrupt("truncated");
    const int64_t code = words[at];
    if (code < 0 || code >= static_cast<int64_t>(kWireTypes.size())) {
      throw corrupt("dtype code " + std::to_string(code));
    }
    meta.dtype = kWireTypes[code];
    const int64_t flags = words[at + 1];
    if (flags < 0 || flags > 3) throw corrupt("flags " + std::to_string(flags));
    meta.requires_grad = (flags & 1) != 0;
    meta.on_host = (flags & 2) != 0;
    const int64_t rank = words[at + 2];
    at += 3;
    if (rank < 0 || at + rank > size) throw corrupt("tensor rank " + std::to_string(rank));
    meta.shape.assign(words + at, words + at + rank);
    for (int64_t dim : meta.shape) {
      if (dim < 0) throw corrupt("negative dimension");
    }
    at += rank;
  }
  return metas;
}

std::optional<std::vector<at::Tensor>> broadcast_tensors(
    Communicator& comm, const std::optional<std::vector<at::Tensor>>& tensors, int root) {
  // The header's first word: the magic number, 0 when the root has nothing to give, or
  // kRootFailed when it cannot describe what it has (every rank then throws).
  constexpr int64_t kRootFailed = -1;
  const bool root_here = comm.rank() == root;
  at::Tensor header = at::zeros({kMaxHeaderWords}, at::kLong);
  std::exception_ptr failure;
  if (root_here && tensors) {
    try {
      const std::vector<int64_t> words = encode_header(*tensors);
      std::copy(words.begin(), words.end(), header.data_ptr<int64_t>());
    } catch (const std::exception&) {
      failure = std::current_exception();
      header.data_ptr<int64_t>()[0] = kRootFailed;
    }
  }
  comm.broadcast(header, root);
  if (failure) std::rethrow_exception(failure);
  const int64_t first = header.data_ptr<int64_t>()[0];
  if (first == kRootFailed) {
    throw std::runtime_error("rank " + std::to_string(comm.global_rank(root)) +
                             " could not describe the tensors it was to broadcast");
  }
  if (first == 0) return std::nullopt;
  if (root_here) {
    for (const auto& tensor : *tensors) {
      at::Tensor payload = tensor.contiguous();
      if (payload.numel() > 0) comm.broadcast(payload, root);
    }
    return tensors;
  }
  std::vector<at::Tensor> received;
  for (const TensorMeta& meta : decode_header(header.data_ptr<int64_t>(), kMaxHeaderWords)) {
    at::Tensor tensor = at::empty(meta.shape, meta.dtype);
    if (tensor.numel() > 0) comm.broadcast(tensor, root);
    received.push_back(std::move(tensor));
  }
  return received;
}

void PendingSend::wait() {
  for (auto& work : works_) work->wait();
  works_.clear();
  keep_alive_.clear();
}

bool PendingSend::test() {
  for (auto& work : works_) {
    if (!work->test()) return false;
  }
  works_.clear();
  keep_alive_.clear();
  return true;
}

TensorTransport::TensorTransport(std::shared_ptr<Communicator> comm, at::Device device)
    : comm_(std::move(comm)), device_(device), header_(at::empty({kMaxHeaderWords}, at::kLong)) {}

void TensorTransport::route_sends(int peer, int tag, std::shared_ptr<Communicator> way,
                                  int rank_there) {
  sends_[{peer, tag}] = Route{std::move(way), rank_there};
}

void TensorTransport::route_receives(int peer, int tag, std::shared_ptr<Communicator> way,
                                     int rank_there) {
  receives_[{peer, tag}] = Route{std::move(way), rank_there};
}

std::pair<Communicator*, int> TensorTransport::payload_path(int peer, int tag, bool on_host,
                                                            bool sending) const {
  const Routes& routes = sending ? sends_ : receives_;
  auto route = routes.find({peer, tag});
  if (route == routes.end()) route = routes.find({peer, kEveryTag});
  if (route == routes.end()) return {comm_.get(), peer};
  Communicator* way = route->second.way.get();
  if (on_host && way->transport() == Transport::kNccl) return {comm_.get(), peer};
  return {way, route->second.rank};
}

WorkPtr TensorTransport::send_payload(const at::Tensor& payload, int peer, int tag) {
  const auto [comm, rank] = payload_path(peer, tag, !payload.is_cuda(), /*sending=*/true);
  return comm->send(payload, rank, tag);
}

WorkPtr TensorTransport::recv_payload(at::Tensor& payload, bool on_host, int peer, int tag) {
  const auto [comm, rank] = payload_path(peer, tag, on_host, /*sending=*/false);
  return comm->recv(payload, rank, tag);
}

PendingSend TensorTransport::send(const std::vector<at::Tensor>& tensors, int peer, int tag) {
  const std::vector<int64_t> words = encode_header(tensors);
  PendingSend pending;
  at::Tensor header = at::empty({static_cast<int64_t>(words.size())}, at::kLong);
  std::copy(words.begin(), words.end(), header.data_ptr<int64_t>());
  pending.works_.push_back(comm_->send(header, peer, tag));
  pending.keep_alive_.push_back(std::move(header));
  for (const auto& tensor : tensors) {
    at::Tensor payload = tensor.detach().contiguous();
    if (payload.numel() > 0) pending.works_.push_back(send_payload(payload, peer, tag));
    pending.keep_alive_.push_back(std::move(payload));
  }
  return pending;
}

std::unique_ptr<PendingRecv> TensorTransport::post_recv(int peer, int tag,
                                                        std::vector<at::Tensor> reuse) {
  return std::unique_ptr<PendingRecv>(
      new PendingRecv(*this, peer, tag, at::empty({kMaxHeaderWords}, at::kLong), std::move(reuse)));
}

std::vector<at::Tensor> TensorTransport::recv(int peer, int tag,
                                              const std::vector<at::Tensor>& reuse) {
  return PendingRecv(*this, peer, tag, header_, reuse).wait();  // done before the next
}

PendingRecv::PendingRecv(TensorTransport& transport, int peer, int tag, at::Tensor header,
                         std::vector<at::Tensor> reuse)
    : transport_(&transport),
      peer_(peer),
      tag_(tag),
      header_(std::move(header)),
      reuse_(std::move(reuse)) {
  header_work_ = transport_->comm_->recv(header_, peer_, tag_);
}

void PendingRecv::post_payloads() {
  header_in_ = true;
  try {
    metas_ = decode_header(header_.data_ptr<int64_t>(), kMaxHeaderWords);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string(e.what()) + " from rank " +
                             std::to_string(transport_->comm_->global_rank(peer_)) + " (tag " +
                             std::to_string(tag_) + ")");
  }
  tensors_.reserve(metas_.size());
  for (std::size_t i = 0; i < metas_.size(); ++i) {
    const TensorMeta& meta = metas_[i];
    const at::Device device = meta.on_host ? at::Device(at::kCPU) : transport_->device_;
    const bool reusable = i < reuse_.size() && reuse_[i].defined() &&
                          reuse_[i].scalar_type() == meta.dtype &&
                          reuse_[i].sizes() == meta.shape && reuse_[i].is_contiguous() &&
                          reuse_[i].device() == device;
    at::Tensor tensor = reusable
                            ? reuse_[i].detach()
                            : at::empty(meta.shape, at::TensorOptions(meta.dtype).device(device));
    if (tensor.numel() > 0)
      payload_works_.push_back(transport_->recv_payload(tensor, meta.on_host, peer_, tag_));
    tensors_.push_back(std::move(tensor));
  }
  reuse_.clear();
}

bool PendingRecv::test() {
  if (!header_in_) {
    if (!header_work_->test()) return false;
    post_payloads();
  }
  std::erase_if(payload_works_, [](WorkPtr& work) { return work->test(); });
  return payload_works_.empty();
}

std::vector<at::Tensor> PendingRecv::wait() {
  if (!header_in_) {
    header_work_->wait();
    post_payloads();
  }
  for (auto& work : payload_works_) work->wait();
  payload_works_.clear();
  for (std::size_t i = 0; i < metas_.size(); ++i) {
    if (metas_[i].requires_grad && at::isFloatingType(metas_[i].dtype))
      tensors_[i].requires_grad_(true);
  }
  return std::move(tensors_);
}

}  // namespace pipetrain::comm
