// A communicator that passes every call to another: the base of the tests' recording and
// checking wrappers, which override what they watch.
#pragma once

#include <memory>
#include <utility>

#include "pipetrain/comm/communicator.h"

namespace pipetrain::testing {

class ForwardingCommunicator : public comm::Communicator {
 public:
  explicit ForwardingCommunicator(std::shared_ptr<comm::Communicator> inner)
      : inner_(std::move(inner)) {
    set_timeout(inner_->timeout());
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int global_rank(int rank) const override { return inner_->global_rank(rank); }
  comm::Transport transport() const override { return inner_->transport(); }
  comm::WorkPtr send(const at::Tensor& t, int peer, int tag) override {
    return inner_->send(t, peer, tag);
  }
  comm::WorkPtr recv(at::Tensor& t, int peer, int tag) override {
    return inner_->recv(t, peer, tag);
  }
  void all_reduce(at::Tensor& t, comm::ReduceOp op) override { inner_->all_reduce(t, op); }
  comm::WorkPtr all_reduce_async(at::Tensor& t, comm::ReduceOp op) override {
    return inner_->all_reduce_async(t, op);
  }
  bool starts_from_any_thread() const override { return inner_->starts_from_any_thread(); }
  void broadcast(at::Tensor& t, int root) override { inner_->broadcast(t, root); }
  at::Tensor all_gather(const at::Tensor& t) override { return inner_->all_gather(t); }
  void all_gather_in_place(at::Tensor& t) override { inner_->all_gather_in_place(t); }
  comm::WorkPtr all_gather_in_place_async(at::Tensor& t) override {
    return inner_->all_gather_in_place_async(t);
  }
  at::Tensor reduce_scatter(const at::Tensor& t, comm::ReduceOp op) override {
    return inner_->reduce_scatter(t, op);
  }
  comm::WorkPtr reduce_scatter_async(const at::Tensor& t, at::Tensor& out,
                                     comm::ReduceOp op) override {
    return inner_->reduce_scatter_async(t, out, op);
  }
  void barrier() override { inner_->barrier(); }

 protected:
  comm::Communicator& inner() { return *inner_; }

 private:
  std::shared_ptr<comm::Communicator> inner_;
};

}  // namespace pipetrain::testing
