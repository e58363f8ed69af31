// Real MPI ranks (run with 4 through pipetrain launch): p2p with metadata, collectives on
// the sub-communicators of a 2x2 pipe x data grid, deadlines.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "pipetrain/comm/tensor_transport.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::comm {
namespace {

topology::Grid& grid() {
  static topology::Grid instance(topology::pipe_data_parallel_topology(2, 2),
                                 MpiCommunicator::world());
  return instance;
}

// Deterministic contents for transfer `i`, tensor `j`, of the given dtype and shape.
at::Tensor pattern(int i, int j, at::ScalarType dtype, std::vector<int64_t> shape) {
  const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  at::Tensor values = at::arange(n, at::kDouble).add(100 * i + 10 * j).reshape(shape);
  if (dtype == at::kBool) return values.remainder(3).eq(0);
  return values.to(dtype);
}

TEST(Grid, CoordinatesAndStageMapping) {
  const topology::Grid& g = grid();
  ASSERT_EQ(g.world_size(), 4);
  EXPECT_EQ(g.stage_id(), g.global_rank() / 2);
  EXPECT_EQ(g.data_parallel_id(), g.global_rank() % 2);
  EXPECT_EQ(g.tensor_parallel_size(), 1);
  EXPECT_EQ(g.pipe_comm()->size(), 2);
  EXPECT_EQ(g.pipe_comm()->rank(), g.stage_id());
  EXPECT_EQ(g.data_comm()->rank(), g.data_parallel_id());
  EXPECT_EQ(g.stage_to_global(1 - g.stage_id()), (g.global_rank() + 2) % 4);
  EXPECT_EQ(g.pipe_comm()->global_rank(1), 2 + g.data_parallel_id());
}

TEST(TensorTransport, SingleTensorsWhoseShapeChangesEveryTransfer) {
  const topology::Grid& g = grid();
  TensorTransport transport(g.pipe_comm());
  const int peer = 1 - g.stage_id();
  constexpr int kTag = 11;
  std::vector<at::Tensor> previous;
  for (int i = 0; i < 24; ++i) {
    const std::vector<int64_t> shape = {1 + i % 5, 3 + (i * 7) % 11};  // a new shape each time
    if (g.is_first_stage()) {
      PendingSend sent = transport.send({pattern(i, 0, at::kFloat, shape)}, peer, kTag);
      sent.wait();
    } else {
      const auto received = transport.recv(peer, kTag, previous);
      ASSERT_EQ(received.size(), 1u);
      EXPECT_TRUE(at::equal(received[0], pattern(i, 0, at::kFloat, shape))) << "transfer " << i;
      previous = received;
    }
  }
}

TEST(TensorTransport, MixedDtypeTuplesBothWays) {
  const topology::Grid& g = grid();
  TensorTransport transport(g.pipe_comm());
  const int peer = 1 - g.stage_id();
  const std::vector<at::ScalarType> dtypes = {at::kFloat, at::kHalf, at::kBFloat16,
                                              at::kLong,  at::kInt,  at::kBool};
  for (int i = 0; i < 6; ++i) {
    std::vector<at::Tensor> tuple;
    for (int j = 0; j < static_cast<int>(dtypes.size()); ++j) {
      tuple.push_back(pattern(i, j, dtypes[(i + j) % dtypes.size()], {2 + i, 1 + j}));
    }
    // The first floating tensor asks for a gradient; the flag travels with the header.
    for (auto& tensor : tuple) {
      if (at::isFloatingType(tensor.scalar_type())) {
        tensor.requires_grad_(true);
        break;
      }
    }
    // Activations go down the pipe, gradients come back up with another tag.
    const bool sender = (i % 2 == 0) == g.is_first_stage();
    if (sender) {
      transport.send(tuple, peer, 20 + i).wait();
    } else {
      const auto received = transport.recv(peer, 20 + i);
      ASSERT_EQ(received.size(), tuple.size());
      for (std::size_t j = 0; j < tuple.size(); ++j) {
        EXPECT_EQ(received[j].scalar_type(), tuple[j].scalar_type());
        EXPECT_TRUE(at::equal(received[j], tuple[j].detach()))
            << "transfer " << i << " tensor " << j;
        EXPECT_EQ(received[j].requires_grad(), tuple[j].requires_grad());
      }
    }
  }
}

TEST(TensorTransport, ReusesAMatchingBuffer) {
  const topology::Grid& g = grid();
  TensorTransport transport(g.pipe_comm());
  const int peer = 1 - g.stage_id();
  if (g.is_first_stage()) {
    transport.send({at::ones({4, 4})}, peer, 40).wait();
    transport.send({at::full({4, 4}, 2.0)}, peer, 40).wait();
  } else {
    const auto first = transport.recv(peer, 40);
    const void* storage = first[0].data_ptr();
    const auto second = transport.recv(peer, 40, first);
    EXPECT_EQ(second[0].data_ptr(), storage);
    EXPECT_TRUE(at::equal(second[0], at::full({4, 4}, 2.0)));
  }
}

TEST(Collectives, AllReduceOnTheDataCommunicator) {
  const topology::Grid& g = grid();
  auto& data = *g.data_comm();
  // Replicas of a stage hold rank-dependent values; sums stay within the stage.
  at::Tensor sum = at::full({3}, static_cast<double>(g.global_rank()), at::kFloat);
  data.all_reduce(sum, ReduceOp::kSum);
  const double stage_sum = 2 * g.stage_id() * 2 + 1;  // ranks 2s and 2s+1
  EXPECT_TRUE(at::equal(sum, at::full({3}, stage_sum, at::kFloat)));

  at::Tensor average = at::full({2}, static_cast<double>(g.global_rank()), at::kBFloat16);
  data.all_reduce(average, ReduceOp::kAverage);
  EXPECT_EQ(average.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(average, at::full({2}, stage_sum / 2, at::kBFloat16)));

  at::Tensor largest = at::tensor({static_cast<int64_t>(g.global_rank()), int64_t{-1}});
  g.world_comm()->all_reduce(largest, ReduceOp::kMax);
  EXPECT_TRUE(at::equal(largest, at::tensor({int64_t{3}, int64_t{-1}})));

  at::Tensor integers = at::full({2}, 1, at::kInt);
  EXPECT_THROW(data.all_reduce(integers, ReduceOp::kAverage), std::invalid_argument);
}

TEST(Collectives, BroadcastAndAllGatherOnSubCommunicators) {
  const topology::Grid& g = grid();
  // Broadcast along the pipe from stage 1: every stage ends with stage 1's value.
  at::Tensor value = at::full({2, 2}, static_cast<double>(g.global_rank()), at::kDouble);
  g.pipe_comm()->broadcast(value, 1);
  EXPECT_TRUE(at::equal(value, at::full({2, 2}, 2.0 + g.data_parallel_id(), at::kDouble)));

  const at::Tensor flags = at::tensor({g.global_rank() % 2 == 0 ? 1 : 0, 1}).to(at::kBool);
  const at::Tensor gathered = g.data_comm()->all_gather(flags);
  ASSERT_EQ(gathered.sizes(), (std::vector<int64_t>{2, 2}));
  EXPECT_TRUE(at::equal(gathered, at::tensor({1, 1, 0, 1}).to(at::kBool).reshape({2, 2})));

  g.world_comm()->barrier();
}

TEST(Collectives, ReduceScatterGivesEachRankItsBlock) {
  auto& world = *grid().world_comm();
  const int n = world.size();
  // Rank r contributes (r + 1) * [0, 1, ..., 3n - 1]; block b holds elements [3b, 3b + 3).
  const at::Tensor input = at::arange(3 * n, at::kFloat) * (world.rank() + 1);
  const double ranks_sum = n * (n + 1) / 2.0;
  const at::Tensor mine = at::arange(3 * world.rank(), 3 * world.rank() + 3, at::kFloat);
  EXPECT_TRUE(at::equal(world.reduce_scatter(input, ReduceOp::kSum), mine * ranks_sum));
  EXPECT_TRUE(at::allclose(world.reduce_scatter(input, ReduceOp::kAverage), mine * ranks_sum / n));
  const at::Tensor half = world.reduce_scatter(input.to(at::kBFloat16), ReduceOp::kMax);
  EXPECT_EQ(half.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(half.to(at::kFloat), mine * n));
  EXPECT_THROW(world.reduce_scatter(at::zeros({3 * n + 1}), ReduceOp::kSum), std::invalid_argument);
  EXPECT_THROW(world.reduce_scatter(at::zeros({n}, at::kLong), ReduceOp::kAverage),
               std::invalid_argument);
}

TEST(Collectives, AsynchronousReductionsAndAnInPlaceAllGather) {
  auto& world = *grid().world_comm();
  const int n = world.size();
  const double ranks_sum = n * (n + 1) / 2.0;
  at::Tensor summed = at::full({5}, world.rank() + 1.0);
  auto work = world.all_reduce_async(summed, ReduceOp::kAverage);
  work->wait();
  EXPECT_TRUE(at::allclose(summed, at::full({5}, ranks_sum / n)));
  // Rank r contributes (r + 1) * [0, 1, ..., 2n - 1]; its block is elements [2r, 2r + 2).
  const at::Tensor input = (at::arange(2 * n, at::kFloat) * (world.rank() + 1)).to(at::kBFloat16);
  at::Tensor block = at::empty({2}, at::kBFloat16);
  world.reduce_scatter_async(input, block, ReduceOp::kSum)->wait();
  const at::Tensor mine = at::arange(2 * world.rank(), 2 * world.rank() + 2, at::kFloat);
  EXPECT_TRUE(at::equal(block.to(at::kFloat), mine * ranks_sum));
  at::Tensor wrong = at::empty({3}, at::kBFloat16);
  EXPECT_THROW(world.reduce_scatter_async(input, wrong, ReduceOp::kSum), std::invalid_argument);
  // Block r of `blocks` is rank r's before the all-gather, everyone's after.
  at::Tensor blocks = at::full({3 * n}, -1.0);
  blocks.narrow(0, 3 * world.rank(), 3).fill_(world.rank());
  world.all_gather_in_place(blocks);
  EXPECT_TRUE(at::equal(blocks, at::arange(n, at::kFloat).repeat_interleave(3)));
  at::Tensor uneven = at::zeros({3 * n + 1});
  EXPECT_THROW(world.all_gather_in_place(uneven), std::invalid_argument);
}

TEST(Deadline, AReceiveThatNeverCompletesThrowsWithWhoAndWhat) {
  const topology::Grid& g = grid();
  auto& pipe = *g.pipe_comm();
  const Seconds saved = pipe.timeout();
  pipe.set_timeout(Seconds(0.3));
  at::Tensor never = at::empty({1});
  ScopedWaitContext context("test step 7");
  try {
    pipe.recv(never, 1 - g.stage_id(), 999)->wait();  // nobody sends tag 999
    ADD_FAILURE() << "expected a deadline";
  } catch (const DeadlineExceeded& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("waited 0.", 0), 0u) << message;
    EXPECT_NE(message.find("recv from rank " + std::to_string(g.stage_to_global(1 - g.stage_id())) +
                           " (tag 999)"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("[test step 7]"), std::string::npos) << message;
  }
  pipe.set_timeout(saved);
  g.world_comm()->barrier();
}

}  // namespace
}  // namespace pipetrain::comm
