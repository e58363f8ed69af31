// ZeRO stage 3's parameter storage on its own, over a stand-in communicator: the pieces
// hold the values, a gather fills the parameters, a release leaves them without bytes but
// with their shapes, and a gather left on its way by a failure is forgotten safely.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <stdexcept>

#include "data_parallel/sharded_parameters.h"

namespace pipetrain::engine {
namespace {

// Rank 0 of 2 whose peer holds `peer_values` (its pieces laid out as an all-gather sends
// them); a gather completes at wait() unless `stuck`, then it never does.
class TwoRanks final : public comm::Communicator {
 public:
  bool stuck = false;
  at::Tensor peer;  // rank 1's block of the next gather

  int rank() const override { return 0; }
  int size() const override { return 2; }
  int global_rank(int rank) const override { return rank; }
  comm::Transport transport() const override { return comm::Transport::kMpi; }
  comm::WorkPtr send(const at::Tensor&, int, int) override { throw std::logic_error("unused"); }
  comm::WorkPtr recv(at::Tensor&, int, int) override { throw std::logic_error("unused"); }
  void all_reduce(at::Tensor&, comm::ReduceOp) override { throw std::logic_error("unused"); }
  comm::WorkPtr all_reduce_async(at::Tensor&, comm::ReduceOp) override {
    throw std::logic_error("unused");
  }
  bool starts_from_any_thread() const override { return false; }
  void broadcast(at::Tensor&, int) override { throw std::logic_error("unused"); }
  at::Tensor all_gather(const at::Tensor&) override { throw std::logic_error("unused"); }
  void all_gather_in_place(at::Tensor& blocks) override {
    all_gather_in_place_async(blocks)->wait();
  }
  comm::WorkPtr all_gather_in_place_async(at::Tensor& blocks) override {
    class Gather final : public comm::Work {
     public:
      Gather(at::Tensor target, at::Tensor peer, bool stuck)
          : target_(std::move(target)), peer_(std::move(peer)), stuck_(stuck) {}
      void wait() override {
        if (stuck_) throw std::runtime_error("deadline");
        target_.narrow(0, peer_.numel(), peer_.numel()).copy_(peer_);
      }
      bool test() override { return !stuck_; }

     private:
      at::Tensor target_, peer_;
      bool stuck_;
    };
    return std::make_unique<Gather>(blocks, peer, stuck);
  }
  at::Tensor reduce_scatter(const at::Tensor&, comm::ReduceOp) override {
    throw std::logic_error("unused");
  }
  comm::WorkPtr reduce_scatter_async(const at::Tensor&, at::Tensor&, comm::ReduceOp) override {
    throw std::logic_error("unused");
  }
  void barrier() override {}
};

TEST(ShardedParameters, GathersReleasesAndForgetsAnAbandonedGather) {
  // Two parameters of 3 and 4 elements in one bucket of 8 (7 padded): rank 0 holds [0, 4).
  at::Tensor a = at::arange(3, at::kFloat).reshape({3}).requires_grad_(true);
  at::Tensor b = at::arange(3, 7, at::kFloat).reshape({2, 2}).requires_grad_(true);
  const data_parallel::FlatShards layout({3, 4}, 2);
  auto comm = std::make_shared<TwoRanks>();
  data_parallel::ShardedParameters sharded({a, b}, {0, 0}, layout, comm);
  EXPECT_EQ(sharded.buckets(), 1);
  EXPECT_EQ(sharded.buckets_of(0), std::vector<int>{0});
  EXPECT_TRUE(sharded.buckets_of(1).empty());
  EXPECT_TRUE(at::equal(sharded.piece(0), at::arange(4, at::kFloat)));
  EXPECT_EQ(a.storage().nbytes(), 0u);  // released from the start, shapes kept
  EXPECT_EQ(b.sizes(), (at::IntArrayRef{2, 2}));

  comm->peer = at::tensor({4.f, 5.f, 6.f, 0.f});
  sharded.start(0);
  sharded.wait(0);
  EXPECT_TRUE(at::equal(a.detach(), at::arange(3, at::kFloat)));
  EXPECT_TRUE(at::equal(b.detach(), at::arange(3, 7, at::kFloat).reshape({2, 2})));
  EXPECT_EQ(sharded.gathered_count(), 1);
  sharded.release(0);
  EXPECT_EQ(a.storage().nbytes(), 0u);
  EXPECT_EQ(sharded.gathered_count(), 0);

  // A gather that never completes (a failed peer) is forgotten with grad mode on, as a
  // failing training step leaves it; the parameters get storage of their own again.
  comm->stuck = true;
  sharded.start(0);
  const void* storage = a.storage().unsafeGetStorageImpl();
  sharded.abandon();
  EXPECT_EQ(sharded.gathered_count(), 0);
  EXPECT_NE(a.storage().unsafeGetStorageImpl(), storage);
  EXPECT_TRUE(a.requires_grad());
  comm->stuck = false;
  sharded.start(0);
  sharded.wait(0);
  EXPECT_TRUE(at::equal(b.detach(), at::arange(3, 7, at::kFloat).reshape({2, 2})));
  sharded.release_all();
}

}  // namespace
}  // namespace pipetrain::engine
