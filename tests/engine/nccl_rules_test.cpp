// NCCL's rules, held on the CPU (4 ranks): NCCL matches the transfers between two ranks by
// their order alone and its sends block until received; every rank of a group must issue
// its collectives in one order; and one thread at a time may be inside a communicator.
// Wrappers check each rule while the engine trains to the same losses as one process
// (every schedule kind: 1F1B, GPipe, ZB-H1 at pipe 2 x data 2 and pipe 4; ZB-H2,
// interleaved, interleaved zero bubble, looped BFS, ZBV and DualPipeV at pipe 4, and those
// over chunks at pipe 2 x data 2 too): the pipe's payloads travel as MPI_Issend on one tag
// per lane (schedule::pipe_lanes: a pair of stages, or one channel of it where chunks pass
// each other; a ring link from the last stage to the first where interleaving needs it)
// (order-only matching, blocking senders), and the data-parallel and tied groups' collectives are
// hashed (op, dtype, count, peer) in issue order and compared across ranks after every
// step. The steps run on a thread other than the one that built the engine (and its
// gradient buckets), which starts its buckets from backward as NCCL lets it.
#include <gtest/gtest.h>
#include <mpi.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "../comm/forwarding_communicator.h"
#include "data_parallel/gradient_buckets.h"
#include "nccl_rules.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/schedule/pipe_lanes.h"
#include "pipetrain/schedule/schedule.h"
#include "reference_training.h"

namespace pipetrain::engine {
namespace {

using namespace pipetrain::testing;

// Hashes a group's collectives in issue order and counts threads inside an issuing call.
class Recording final : public ForwardingCommunicator {
 public:
  Recording(std::shared_ptr<comm::Communicator> inner, groups::TensorGroup group, bool any_thread)
      : ForwardingCommunicator(std::move(inner)), group_(group), any_thread_(any_thread) {}

  void all_reduce(at::Tensor& t, comm::ReduceOp op) override {
    const Inside inside(*this, 1, t, static_cast<int>(op));
    inner().all_reduce(t, op);
  }
  comm::WorkPtr all_reduce_async(at::Tensor& t, comm::ReduceOp op) override {
    const Inside inside(*this, 2, t, static_cast<int>(op));
    return inner().all_reduce_async(t, op);
  }
  void broadcast(at::Tensor& t, int root) override {
    const Inside inside(*this, 3, t, root);
    inner().broadcast(t, root);
  }
  at::Tensor all_gather(const at::Tensor& t) override {
    const Inside inside(*this, 4, t, 0);
    return inner().all_gather(t);
  }
  void all_gather_in_place(at::Tensor& t) override {
    const Inside inside(*this, 5, t, 0);
    inner().all_gather_in_place(t);
  }
  at::Tensor reduce_scatter(const at::Tensor& t, comm::ReduceOp op) override {
    const Inside inside(*this, 6, t, static_cast<int>(op));
    return inner().reduce_scatter(t, op);
  }
  comm::WorkPtr reduce_scatter_async(const at::Tensor& t, at::Tensor& out,
                                     comm::ReduceOp op) override {
    const Inside inside(*this, 7, t, static_cast<int>(op));
    return inner().reduce_scatter_async(t, out, op);
  }
  // As NCCL's: buckets may start on autograd's thread.
  bool starts_from_any_thread() const override { return any_thread_; }

  // Collective over the group (unrecorded): whether every rank issued the same operations.
  bool agreed() {
    at::Tensor mine = at::tensor({static_cast<int64_t>(hash_.load()), ops_.load()}, at::kLong);
    const at::Tensor all = inner().all_gather(mine);
    return at::equal(all, mine.unsqueeze(0).expand_as(all));
  }
  int64_t ops() const { return ops_.load(); }
  int overlaps() const { return overlaps_.load(); }
  groups::TensorGroup group() const { return group_; }

 private:
  // One issuing call: recorded, and counted while inside.
  struct Inside {
    Inside(Recording& r, int op, const at::Tensor& t, int detail) : r_(r) {
      if (r_.inside_.fetch_add(1) > 0) ++r_.overlaps_;
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // widen a race's window
      const std::lock_guard lock(r_.mutex_);
      uint64_t h = r_.hash_.load();
      for (const int64_t word :
           {int64_t{op}, static_cast<int64_t>(t.scalar_type()), t.numel(), int64_t{detail}})
        h = (h ^ static_cast<uint64_t>(word)) * 1099511628211ull;  // FNV-1a over words
      r_.hash_ = h;
      ++r_.ops_;
    }
    ~Inside() { --r_.inside_; }
    Recording& r_;
  };

  groups::TensorGroup group_;
  bool any_thread_;
  std::mutex mutex_;
  std::atomic<uint64_t> hash_{14695981039346656037ull};
  std::atomic<int64_t> ops_{0};
  std::atomic<int> inside_{0}, overlaps_{0};
};

TEST(NcclRules, TheRecorderCatchesTwoThreadsInsideOneCommunicator) {
  // A communicator whose all_reduce only takes time: two threads call it at once.
  class Slow final : public ForwardingCommunicator {
   public:
    using ForwardingCommunicator::ForwardingCommunicator;
    void all_reduce(at::Tensor&, comm::ReduceOp) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  Recording recording(std::make_shared<Slow>(comm::MpiCommunicator::world()),
                      groups::TensorGroup::kData, true);
  at::Tensor a = at::zeros({4}), b = at::zeros({4});
  std::thread other([&] { recording.all_reduce(a, comm::ReduceOp::kSum); });
  recording.all_reduce(b, comm::ReduceOp::kSum);
  other.join();
  EXPECT_GT(recording.overlaps(), 0);
  EXPECT_EQ(recording.ops(), 2);
}

// Trains `c` under `kind` on pipe x data with the rule-checking wrappers, comparing every
// loss, the weights and the evaluation with one process.
// Whether `kind` plans `c` on pipe x chunks.
bool runs(schedule::Kind kind, int micro_batches, int pipe, int chunks) {
  try {
    schedule::plan_pipeline(kind,
                            {micro_batches, pipe, chunks, schedule::schedule_kind(kind).placement});
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

void expect_rules_hold(schedule::Kind kind, int pipe, int data, const Case& c, int chunks = 1) {
  auto world = comm::MpiCommunicator::world();
  auto grid =
      std::make_shared<topology::Grid>(topology::pipe_data_parallel_topology(pipe, data), world);
  std::vector<std::shared_ptr<Recording>> recordings;
  std::vector<std::shared_ptr<Rendezvous>> links;
  groups::CommunicatorTesting testing{
      .wrap =
          [&](std::shared_ptr<comm::Communicator> made, groups::TensorGroup group) {
            if (group == groups::TensorGroup::kPipePair) {
              links.push_back(std::make_shared<Rendezvous>(made));
              return std::shared_ptr<comm::Communicator>(links.back());
            }
            recordings.push_back(std::make_shared<Recording>(made, group, true));
            return std::shared_ptr<comm::Communicator>(recordings.back());
          },
      .pair_links = true};
  auto comms = std::make_shared<groups::Communicators>(grid, device::DeviceKind::kCpu,
                                                       comm::Seconds(60), testing);
  const auto samples = dataset(c, data);
  const Reference reference = reference_run(c, data, samples);
  TrainingConfig config = training_config(c);
  config.pipeline.schedule.kind = kind;
  config.ddp_bucket_size = 3000;  // several buckets, started during backward
  config.overlap_grad_reduce = true;
  const auto model = models::make_builtin_model(model_config(c.model));
  auto module = std::make_shared<module::PipelineModule>(
      model.layers, model.loss,
      module::PipelineModuleOptions{.stages = pipe,
                                    .stage_id = grid->stage_id(),
                                    .chunks = chunks,
                                    .placement = config.pipeline.schedule.placement(),
                                    .seed = static_cast<uint64_t>(config.seed),
                                    .activation_checkpoint_interval = c.checkpoint_interval});
  PipelineEngine engine(module, comms, config);
  // A wrapped communicator per lane this rank's stage sends or receives on: the plans', and
  // generation's feedback from the output stage to the first.
  const schedule::PipeShape shape{c.micro_batches, pipe, chunks, module->options().placement};
  const auto lanes = schedule::pipe_lanes(
      {schedule::plan_pipeline(kind, shape),
       schedule::plan_pipeline(schedule::Kind::kInference, shape),
       schedule::plan_pipeline(schedule::Kind::kInference, {1, pipe, chunks, shape.placement})});
  ASSERT_TRUE(lanes.has_value());
  const int stage = grid->stage_id();
  const int output = engine.output_stage();
  const bool fed_back = output != 0 && (stage == 0 || stage == output);
  EXPECT_EQ(links.size(),
            static_cast<std::size_t>(std::count_if(lanes->begin(), lanes->end(),
                                                   [&](const schedule::PipeLane& lane) {
                                                     return lane.from == stage || lane.to == stage;
                                                   }) +
                                     (fed_back ? 1 : 0)));
  data::DataLoader loader(samples, kMicroBatchSize, data, grid->data_parallel_id());
  std::thread steps([&] {  // not the thread that built the engine
    for (int step = 0; step < kSteps; ++step) {
      const double loss = engine.train_batch(&loader);
      EXPECT_NEAR(loss, reference.losses[step], 1e-5 * std::abs(reference.losses[step]))
          << "step " << step;
      for (const auto& recording : recordings) {
        EXPECT_TRUE(recording->agreed())
            << "group " << static_cast<int>(recording->group()) << " after step " << step;
      }
    }
    const auto evaluation = engine.eval_batch(&loader);
    EXPECT_NEAR(evaluation.loss, reference.eval_loss, 1e-5 * std::abs(reference.eval_loss));
  });
  steps.join();
  for (const auto& [name, parameter] : engine.module().named_parameters()) {
    EXPECT_TRUE(at::allclose(parameter, reference.weights.at(name), 1e-5, 1e-6)) << name;
  }
  for (const auto& recording : recordings) EXPECT_EQ(recording->overlaps(), 0);
  int64_t collectives = 0;
  for (const auto& recording : recordings) collectives += recording->ops();
  if (data > 1) {
    EXPECT_GT(collectives, 0);
  }
  const comm::Communicator* feedback = nullptr;  // unused in training
  if (fed_back) {
    const auto& link = engine.communicators().pipe_links().at(stage == 0 ? output : 0);
    feedback = (stage == 0 ? link.from : link.to).at(schedule::Channel::feedback().tag()).get();
  }
  for (const auto& link : links) {
    if (link.get() != feedback) {
      EXPECT_GT(link->sends + link->receives, 0);
    }
  }
  const data_parallel::GradientBuckets* buckets = engine.gradient_buckets();
  if (data > 1 && buckets) {
    EXPECT_GT(buckets->started_in_backward(), 0);
  }
}

TEST(NcclRules, PipeMatchedByOrderAndCollectivesInOneOrderUnderEveryScheduleThatMayUseNccl) {
  auto world = comm::MpiCommunicator::world();
  ASSERT_EQ(world->size(), 4);
  // Blocking sends (1F1B, GPipe) and deferred ones (ZB-H1, whose neighbours send to each
  // other at once: NCCL carries it with a communicator per direction).
  for (const schedule::Kind kind :
       {schedule::Kind::k1F1B, schedule::Kind::kGpipe, schedule::Kind::kZbH1}) {
    for (const auto& [pipe, data] : {std::pair{2, 2}, std::pair{4, 1}}) {
      for (const Case& c : {Case{"gpt", 4, 0, 0.0}, Case{"gpt-untied", 2, 1, 0.05}}) {
        SCOPED_TRACE(std::string(schedule::name(kind)) + " pipe " + std::to_string(pipe) +
                     " x data " + std::to_string(data) + ": " + name(c));
        expect_rules_hold(kind, pipe, data, c);
      }
    }
  }
}

// The schedules whose chunks pass each other between two stages (each channel a lane of
// its own), with a ring link from the last stage to the first where the chunks loop (pipe
// 4), and ZB-H2.
TEST(NcclRules, LanesPerChannelAndTheRingLinkUnderTheOtherSchedules) {
  auto world = comm::MpiCommunicator::world();
  ASSERT_EQ(world->size(), 4);
  for (const auto& [kind, chunks] :
       std::vector<std::pair<schedule::Kind, int>>{{schedule::Kind::kZbH2, 1},
                                                   {schedule::Kind::kInterleaved, 2},
                                                   {schedule::Kind::kInterleavedZb, 2},
                                                   {schedule::Kind::kLoopedBfs, 2},
                                                   {schedule::Kind::kZbv, 2},
                                                   {schedule::Kind::kDualPipeV, 2}}) {
    const Case c{chunks > 1 ? "gpt-deep" : "gpt", 8, 0, 0.0};
    for (const auto& [pipe, data] : {std::pair{4, 1}, std::pair{2, 2}}) {
      if (pipe == 2 && chunks == 1) continue;  // ZB-H2 at pipe 2 is the first test's shape
      SCOPED_TRACE(std::string(schedule::name(kind)) + " pipe " + std::to_string(pipe) +
                   " x data " + std::to_string(data));
      ASSERT_TRUE(runs(kind, c.micro_batches, pipe, chunks));
      expect_rules_hold(kind, pipe, data, c, chunks);
    }
  }
}

}  // namespace
}  // namespace pipetrain::engine
