// Ring attention over the world as one context group (2 and 4 ranks) against attention over
// the whole sequence in one process: each rank's outputs and its slices' gradients of q, k
// and v, causal and not, grouped-query, and packed documents (some blocks left empty).
// With PIPETRAIN_TEST_DEVICE=cuda (ctest's ring_attention_cuda_2_ranks, label gpu) each
// rank's slices and the ring live on the GPU (the ranks share it; the ring's messages go
// through the host), against the whole computed on the CPU.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "../comm/forwarding_communicator.h"
#include "context_parallel/fused_attention.h"
#include "device/cuda.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/context_parallel/ring_attention.h"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipetrain::context_parallel {
namespace {

Group world_group() {
  static const auto world = comm::MpiCommunicator::world();
  return Group{world};
}

bool on_gpu() {
  const char* device = std::getenv("PIPETRAIN_TEST_DEVICE");
  return device && std::string(device) == "cuda";
}

// Where the ring runs: the GPU under PIPETRAIN_TEST_DEVICE=cuda, else the CPU.
at::Device ring_device() {
  return on_gpu() ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
}

// The fused kernel the ring should take for rectangles of `dtype` (16 dims per head).
FusedKernel expected_kernel(at::ScalarType dtype) {
  if (!on_gpu()) return FusedKernel::kCpuFlash;
  return dtype == at::kFloat ? FusedKernel::kCudaEfficient : FusedKernel::kCudaFlash;
}

void expect_near(const at::Tensor& got, const at::Tensor& expected, const std::string& what,
                 double tolerance = 1e-5) {
  ASSERT_EQ(got.sizes(), expected.sizes()) << what;
  const at::Tensor a = got.cpu().to(at::kDouble), b = expected.cpu().to(at::kDouble);
  EXPECT_TRUE(at::allclose(a, b, tolerance, tolerance))
      << what << " differs by " << (a - b).abs().max().item<double>();
}

struct Problem {
  int64_t batch = 2, heads = 2, kv_heads = 2, seq_per_rank = 4, head_dim = 4;
  bool causal = true;
  at::Tensor documents;  // [batch, whole seq], or undefined
  double dropout = 0;    // attention dropout's probability (plain path)
  // Double: the plain path; float and bf16: ATen's fused kernels on the chunks'
  // rectangles (bf16 against the whole computed in float from the same values).
  at::ScalarType dtype = at::kDouble;
  // The fused kernel every rectangle should take (a float or bf16 problem without
  // documents or dropout); unset: plain operators, no fused kernel at all.
  std::optional<FusedKernel> fused;
};

// Rectangles computed by each fused kernel so far.
std::vector<int64_t> fused_calls() {
  std::vector<int64_t> calls;
  for (const auto kernel :
       {FusedKernel::kCpuFlash, FusedKernel::kCudaFlash, FusedKernel::kCudaEfficient})
    calls.push_back(fused_forward_calls(kernel));
  return calls;
}

// Attention over the whole sequence: SDPA with the mask the problem asks for; under
// dropout, softmax(scores) * kept / (1 - p) @ v written out.
at::Tensor whole_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const Problem& p, const at::Tensor& kept) {
  const int64_t whole = q.size(2);
  std::optional<at::Tensor> mask;
  if (p.documents.defined()) {
    at::Tensor visible = (p.documents.unsqueeze(2) == p.documents.unsqueeze(1)).unsqueeze(1);
    if (p.causal) visible = visible & at::ones({whole, whole}, at::kBool).tril();
    mask = visible;
  }
  if (kept.defined()) {
    const int64_t repeats = q.size(1) / k.size(1);
    const at::Tensor keys = k.repeat_interleave(repeats, 1),
                     values = v.repeat_interleave(repeats, 1);
    at::Tensor visible = mask ? *mask : at::ones({whole, whole}, at::kBool);
    if (p.causal && !mask) visible = visible.tril();
    const at::Tensor scores = at::matmul(q, keys.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
    const at::Tensor weights = at::softmax(
        scores.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity()), -1);
    return at::matmul(weights * kept / (1 - p.dropout), values);
  }
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, p.causal && !p.documents.defined(),
                                          {},
                                          /*enable_gqa=*/p.heads != p.kv_heads);
}

void expect_ring_equals_whole(const Problem& p, const Group& group = world_group()) {
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  const int64_t whole = p.seq_per_rank * group.size();
  at::manual_seed(17);  // the same whole tensors on every rank
  const at::Tensor q = at::randn({p.batch, p.heads, whole, p.head_dim}, p.dtype);
  const at::Tensor k = at::randn({p.batch, p.kv_heads, whole, p.head_dim}, p.dtype);
  const at::Tensor v = at::randn({p.batch, p.kv_heads, whole, p.head_dim}, p.dtype);
  const at::Tensor upstream = at::randn({p.batch, p.heads, whole, p.head_dim}, p.dtype);
  at::Tensor kept;  // 1 or 0 per weight of the whole sequence
  if (p.dropout > 0)
    kept = at::empty({p.batch, p.heads, whole, whole}, p.dtype).bernoulli_(1 - p.dropout);

  const bool bf16 = p.dtype == at::kBFloat16;
  const auto reference = bf16 ? at::kFloat : p.dtype;
  const double tolerance = bf16 ? 3e-2 : 1e-5;
  const at::Tensor q_whole = q.to(reference).clone().requires_grad_(true);
  const at::Tensor k_whole = k.to(reference).clone().requires_grad_(true);
  const at::Tensor v_whole = v.to(reference).clone().requires_grad_(true);
  const at::Tensor expected =
      whole_attention(q_whole, k_whole, v_whole, p, kept.defined() ? kept.to(reference) : kept);
  (expected * upstream.to(reference)).sum().backward();

  const at::Device device = ring_device();
  const at::Tensor q_mine = take_local(q, 2, group).to(device).requires_grad_(true);
  const at::Tensor k_mine = take_local(k, 2, group).to(device).requires_grad_(true);
  const at::Tensor v_mine = take_local(v, 2, group).to(device).requires_grad_(true);
  RingAttentionOptions options;
  options.causal = p.causal;
  if (p.documents.defined()) options.documents = take_local(p.documents, 1, group).to(device);
  if (kept.defined()) {
    options.dropout_kept = take_local(kept, 2, group).to(device);
    options.dropout_p = p.dropout;
  }
  const at::Tensor positions = local_positions(whole, group.rank(), group.size()).to(device);
  const std::vector<int64_t> before = fused_calls();
  const at::Tensor out = ring_attention(q_mine, k_mine, v_mine, positions, group, options);
  EXPECT_EQ(out.device(), device);
  const std::vector<int64_t> after = fused_calls();
  for (size_t i = 0; i < before.size(); ++i) {
    const bool taken = p.fused && static_cast<size_t>(*p.fused) == i + 1;
    EXPECT_EQ(after[i] > before[i], taken)
        << "fused kernel " << to_string(static_cast<FusedKernel>(i + 1))
        << (taken ? " was not taken" : " was taken");
  }
  (out * take_local(upstream, 2, group).to(device)).sum().backward();

  expect_near(out, take_local(expected, 2, group), "output", tolerance);
  expect_near(q_mine.grad(), take_local(q_whole.grad(), 2, group), "q gradient", tolerance);
  expect_near(k_mine.grad(), take_local(k_whole.grad(), 2, group), "k gradient", tolerance);
  expect_near(v_mine.grad(), take_local(v_whole.grad(), 2, group), "v gradient", tolerance);
}

TEST(RingAttention, LocalPositionsAreChunksIAndTwoCMinusOneMinusI) {
  EXPECT_TRUE(at::equal(local_positions(8, 0, 2), at::tensor({0, 1, 6, 7}, at::kLong)));
  EXPECT_TRUE(at::equal(local_positions(8, 1, 2), at::tensor({2, 3, 4, 5}, at::kLong)));
  EXPECT_TRUE(at::equal(local_positions(8, 3, 4), at::tensor({3, 4}, at::kLong)));
  EXPECT_TRUE(at::equal(local_positions(5, 0, 1), at::arange(5, at::kLong)));
  EXPECT_THROW(local_positions(6, 0, 2), std::invalid_argument);  // 4 chunks of 1.5
}

TEST(RingAttention, CausalEqualsWholeSequenceAttention) {
  expect_ring_equals_whole(Problem{});
}

TEST(RingAttention, WithoutAMaskEqualsWholeSequenceAttention) {
  Problem p;
  p.causal = false;
  expect_ring_equals_whole(p);
}

TEST(RingAttention, GroupedQueryEqualsWholeSequenceAttention) {
  Problem p;
  p.heads = 4;
  expect_ring_equals_whole(p);
}

// Which fused kernel a rectangle of 8 queries of `dtype` takes, as the ring asks it (with
// gradients); the question leaves ATen's cuDNN attention setting as it found it.
FusedKernel kernel_taken(at::ScalarType dtype) {
  const at::Tensor q =
      at::zeros({2, 4, 16, 16}, at::TensorOptions(ring_device()).dtype(dtype)).requires_grad_(true);
  const bool cudnn = at::globalContext().userEnabledCuDNNSDP();
  const FusedKernel kernel = choose_fused_kernel(q, 8);
  EXPECT_EQ(at::globalContext().userEnabledCuDNNSDP(), cudnn);
  return kernel;
}

TEST(RingAttention, InFloatTheFusedKernelEqualsWholeSequenceAttention) {
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  EXPECT_STREQ(to_string(kernel_taken(at::kFloat)), to_string(expected_kernel(at::kFloat)));
  EXPECT_EQ(choose_fused_kernel(at::zeros({1, 1, 4, 4}, at::kDouble), 2), FusedKernel::kNone);
  for (const bool causal : {true, false}) {
    for (const int64_t heads : {2, 4}) {  // 4: grouped-query
      Problem p;
      p.dtype = at::kFloat;
      p.causal = causal;
      p.heads = heads;
      p.seq_per_rank = 8;
      p.head_dim = 16;
      p.fused = expected_kernel(at::kFloat);
      SCOPED_TRACE("causal " + std::to_string(causal) + ", heads " + std::to_string(heads));
      expect_ring_equals_whole(p);
    }
  }
}

TEST(RingAttention, InBf16TheFusedKernelStaysWithinBf16OfTheWholeInFloat) {
  if (on_gpu() && device::visible_gpus() == 0) GTEST_SKIP() << "skipped: no GPU";
  EXPECT_STREQ(to_string(kernel_taken(at::kBFloat16)), to_string(expected_kernel(at::kBFloat16)));
  Problem p;
  p.dtype = at::kBFloat16;
  p.heads = 4;
  p.seq_per_rank = 16;
  p.head_dim = 16;
  p.fused = expected_kernel(at::kBFloat16);
  expect_ring_equals_whole(p);
  if (on_gpu()) {  // bf16 on the memory-efficient kernel too, with flash turned off
    auto& context = at::globalContext();
    context.setSDPUseFlash(false);
    EXPECT_STREQ(to_string(kernel_taken(at::kBFloat16)), to_string(FusedKernel::kCudaEfficient));
    p.fused = FusedKernel::kCudaEfficient;
    expect_ring_equals_whole(p);
    context.setSDPUseFlash(true);
  }
}

TEST(RingAttention, PackedDocumentsEqualWholeSequenceAttentionWithTheirMask) {
  const int64_t whole = 8 * world_group().size();
  Problem p;
  p.seq_per_rank = 8;
  // Documents of random lengths, different in each sample.
  at::manual_seed(5);
  const at::Tensor starts = at::rand({2, whole}) < 0.2;
  p.documents = starts.to(at::kLong).cumsum(1);
  expect_ring_equals_whole(p);
}

TEST(RingAttention, DocumentsOfOneChunkLeaveWholeBlocksEmpty) {
  // Every chunk its own document: each rank's queries see only its own keys, so every
  // block after the first is skipped, and backward still passes the ring around.
  const Group group = world_group();
  const int64_t chunk = 2, whole = 2 * chunk * group.size();
  Problem p;
  p.seq_per_rank = 2 * chunk;
  p.documents = (at::arange(whole, at::kLong) / chunk).unsqueeze(0).expand({2, whole}).contiguous();
  expect_ring_equals_whole(p);
}

TEST(RingAttention, AttentionDropoutEqualsTheWholeSequencesDroppedWeights) {
  for (const bool causal : {true, false}) {
    for (const int64_t heads : {2, 4}) {  // 4: grouped-query
      Problem p;
      p.causal = causal;
      p.heads = heads;
      p.dropout = 0.3;
      SCOPED_TRACE("causal " + std::to_string(causal) + ", heads " + std::to_string(heads));
      expect_ring_equals_whole(p);
    }
  }
  Problem packed;  // with documents, in float
  packed.dtype = at::kFloat;
  packed.dropout = 0.2;
  packed.seq_per_rank = 8;
  at::manual_seed(6);
  packed.documents = (at::rand({2, 8 * world_group().size()}) < 0.2).to(at::kLong).cumsum(1);
  expect_ring_equals_whole(packed);
  Problem bf16;  // in bf16, within bf16 of the whole in float
  bf16.dtype = at::kBFloat16;
  bf16.dropout = 0.1;
  bf16.heads = 4;
  bf16.seq_per_rank = 16;
  expect_ring_equals_whole(bf16);
}

TEST(RingAttention, AloneItIsScaledDotProductAttention) {
  at::manual_seed(3);
  const at::Tensor q = at::randn({1, 2, 6, 4}), k = at::randn({1, 2, 6, 4}),
                   v = at::randn({1, 2, 6, 4});
  const at::Tensor out = ring_attention(q, k, v, at::arange(6, at::kLong), Group{});
  expect_near(out, at::scaled_dot_product_attention(q, k, v, {}, 0.0, true), "output");
  EXPECT_THROW(ring_attention(q, k, v, at::arange(5, at::kLong), Group{}), std::invalid_argument);
}

// NCCL's rules for the ring, held on the CPU: no ungrouped send or receive (every rank
// sends to its successor first: on one NCCL stream each send would wait for a receive
// queued behind the successor's own send), each exchange's transfers matched by their
// order alone (MPI_Issend and MPI_Irecv on one tag of a communicator of their own, all
// posted before any is waited for, as ncclGroupStart/End issues them), and every rank
// issuing the same operations in the same order.
class RingRules final : public testing::ForwardingCommunicator {
 public:
  explicit RingRules(std::shared_ptr<comm::MpiCommunicator> world)
      : ForwardingCommunicator(world), order_only_(world->split(0, world->rank())) {}

  comm::WorkPtr send(const at::Tensor&, int peer, int) override {
    throw std::logic_error("an ungrouped send to " + std::to_string(peer) + " on the ring");
  }
  comm::WorkPtr recv(at::Tensor&, int peer, int) override {
    throw std::logic_error("an ungrouped receive from " + std::to_string(peer) + " on the ring");
  }
  at::Tensor all_gather(const at::Tensor& t) override {
    record(1, t.numel(), 0);
    return inner().all_gather(t);
  }
  void all_to_all(const std::vector<at::Tensor>& outgoing, std::vector<at::Tensor>& incoming,
                  int) override {
    std::vector<MPI_Request> requests;
    std::vector<std::array<int64_t, 3>> moves;  // (direction, numel, peer's place ahead)
    const MPI_Comm mpi = order_only_->handle();
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      if (incoming[r].numel() > 0) {
        moves.push_back({2, incoming[r].numel(), ahead(r)});
        requests.emplace_back();
        MPI_Irecv(incoming[r].data_ptr(), static_cast<int>(bytes(incoming[r])), MPI_BYTE, r, 0, mpi,
                  &requests.back());
      }
      if (outgoing[r].numel() > 0) {
        moves.push_back({3, outgoing[r].numel(), ahead(r)});
        requests.emplace_back();
        MPI_Issend(outgoing[r].data_ptr(), static_cast<int>(bytes(outgoing[r])), MPI_BYTE, r, 0,
                   mpi, &requests.back());
      }
    }
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    std::sort(moves.begin(), moves.end());  // a group's transfers have no order among them
    for (const auto& move : moves) record(move[0], move[1], move[2]);
    ++exchanges;
  }

  // Collective (unrecorded): whether every rank issued the same operations, the peers
  // taken relative to its own rank.
  bool agreed() {
    const at::Tensor mine = at::tensor({static_cast<int64_t>(hash_), ops_}, at::kLong);
    const at::Tensor all = inner().all_gather(mine);
    return at::equal(all, mine.unsqueeze(0).expand_as(all));
  }
  int exchanges = 0;

 private:
  static int64_t bytes(const at::Tensor& t) { return t.numel() * t.element_size(); }
  int64_t ahead(int peer) const { return (peer - rank() + size()) % size(); }
  void record(int64_t op, int64_t numel, int64_t ahead) {
    for (const int64_t word : {op, numel, ahead}) hash_ = (hash_ ^ word) * 1099511628211ull;
    ++ops_;
  }
  std::shared_ptr<comm::MpiCommunicator> order_only_;
  uint64_t hash_ = 14695981039346656037ull;
  int64_t ops_ = 0;
};

TEST(NcclRules, TheRingExchangesGroupedMatchedByOrderAndInOneOrder) {
  if (on_gpu()) GTEST_SKIP() << "the rules are held on the CPU";
  const auto rules = std::make_shared<RingRules>(comm::MpiCommunicator::world());
  Problem p;
  p.heads = 4;  // grouped-query: the ring passes the fewer key/value heads
  expect_ring_equals_whole(p, Group{rules});
  EXPECT_GT(rules->exchanges, 0);
  EXPECT_TRUE(rules->agreed());
}

}  // namespace
}  // namespace pipetrain::context_parallel
