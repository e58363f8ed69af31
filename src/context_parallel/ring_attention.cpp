#include "pipetrain/context_parallel/ring_attention.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetrain/context_parallel/whole_sequences.h"

namespace pipetrain::context_parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int kForwardTag = 0;
constexpr int kBackwardTag = 1;

struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(Group g) : group(std::move(g)) {}
  Group group;
};

// `x` to the rank `ahead` places on in the ring, from the one `ahead` places back. Both are
// started before either is waited for, which MPI's nonblocking calls allow; NCCL would need
// them grouped (the job gives the ring the grid's MPI communicator).
at::Tensor pass_around(const at::Tensor& x, const Group& group, int ahead, int tag) {
  const int size = group.size();
  const int to = (group.rank() + ahead + size) % size;
  const int from = (group.rank() - ahead + size) % size;
  const at::Tensor outgoing = x.detach().contiguous();
  at::Tensor incoming = at::empty_like(outgoing);
  const comm::WorkPtr sent = group.comm->send(outgoing, to, tag);
  const comm::WorkPtr received = group.comm->recv(incoming, from, tag);
  sent->wait();
  received->wait();
  return incoming;
}

// Forward: the previous rank's tensor. Backward: the gradient goes back to where the
// tensor came from.
struct RingPass : torch::autograd::Function<RingPass> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Group& group) {
    ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(group));
    return pass_around(x, group, 1, kForwardTag);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Group& group = static_cast<GroupHolder&>(*ctx->saved_data["group"].toCapsule()).group;
    return {pass_around(grads[0], group, -1, kBackwardTag), at::Tensor()};
  }
};

// One block's attention with its log-sum-exp, in plain differentiable operations:
// out [b, h, sq, d] (zero where a query sees none of the block's keys) and lse [b, h, sq]
// (-inf there).
struct Partial {
  at::Tensor out;
  at::Tensor lse;
};
Partial block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& visible, double scale) {
  const double inf = std::numeric_limits<double>::infinity();
  const at::Tensor scores =
      (at::matmul(q, k.transpose(-2, -1)) * scale).masked_fill(visible.logical_not(), -inf);
  at::Tensor maximum = std::get<0>(scores.detach().max(-1, /*keepdim=*/true));
  maximum = maximum.masked_fill(maximum.isinf(), 0);  // rows that see nothing
  const at::Tensor weights = (scores - maximum).exp();
  const at::Tensor sum = weights.sum(-1, /*keepdim=*/true);
  const at::Tensor sees = sum > 0;
  const at::Tensor safe_sum = at::where(sees, sum, at::ones_like(sum));
  const at::Tensor out = at::matmul(weights / safe_sum, v);
  const at::Tensor lse = at::where(sees, maximum + safe_sum.log(), at::full_like(sum, -inf));
  return {out, lse.squeeze(-1)};
}

// Which keys each query sees: [b or 1, 1, sq, sk] bool.
at::Tensor visibility(const at::Tensor& q_positions, const at::Tensor& k_positions,
                      const at::Tensor& q_documents, const at::Tensor& k_documents, bool causal) {
  at::Tensor visible = causal ? q_positions.unsqueeze(1) >= k_positions.unsqueeze(0)
                              : at::ones({q_positions.size(0), k_positions.size(0)},
                                         q_positions.options().dtype(at::kBool));
  visible = visible.unsqueeze(0).unsqueeze(0);  // [1, 1, sq, sk]
  if (q_documents.defined()) {
    const at::Tensor same = q_documents.unsqueeze(2) == k_documents.unsqueeze(1);  // [b, sq, sk]
    visible = visible & same.unsqueeze(1);
  }
  return visible;
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& positions, const RingAttentionOptions& options) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    throw std::invalid_argument("ring attention takes [batch, heads, seq, head dim] q, k, v");
  if (k.sizes() != v.sizes() || q.size(1) % k.size(1) != 0 || q.size(2) != k.size(2))
    throw std::invalid_argument(
        "ring attention: k and v of one shape, kv heads dividing the query heads, and as many "
        "local positions as the queries");
  if (positions.dim() != 1 || positions.size(0) != q.size(2))
    throw std::invalid_argument("ring attention: one position per local query");
  if (options.documents &&
      (options.documents->dim() != 2 || options.documents->size(0) != q.size(0) ||
       options.documents->size(1) != q.size(2)))
    throw std::invalid_argument("ring attention: documents must be [batch, local seq]");
}

}  // namespace

at::Tensor local_positions(int64_t whole, int rank, int size) {
  if (size == 1 && rank == 0) return at::arange(whole, at::kLong);
  if (size < 1 || rank < 0 || rank >= size || whole % (2 * int64_t{size}) != 0) {
    throw std::invalid_argument("context parallelism: a sequence of " + std::to_string(whole) +
                                " positions does not cut into 2 x " + std::to_string(size) +
                                " equal chunks");
  }
  const int64_t chunk = whole / (2 * int64_t{size});
  const int64_t mirror = 2 * int64_t{size} - 1 - rank;
  return at::cat({at::arange(rank * chunk, (rank + 1) * chunk, at::kLong),
                  at::arange(mirror * chunk, (mirror + 1) * chunk, at::kLong)});
}

bool splits(const Group& group) {
  return group.parallel() && !whole_sequences();
}

at::Tensor take_local(const at::Tensor& x, int64_t dim, const Group& group) {
  if (!splits(group)) return x;
  const at::Tensor where = local_positions(x.size(dim), group.rank(), group.size());
  return x.index_select(dim, where.to(x.device()));
}

at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& positions, const Group& group,
                          const RingAttentionOptions& options) {
  check_inputs(q, k, v, positions, options);
  const double scale = options.scale.value_or(1.0 / std::sqrt(double(q.size(-1))));
  const int64_t repeats = q.size(1) / k.size(1);
  // Every rank's positions and documents, once: block j comes from rank - j.
  const at::Tensor q_positions = positions.to(q.device());
  const at::Tensor q_documents =
      options.documents ? options.documents->to(q.device()) : at::Tensor();
  at::Tensor all_positions = q_positions.unsqueeze(0), all_documents;
  if (group.parallel()) {
    all_positions = group.comm->all_gather(q_positions.contiguous());
    if (options.documents) all_documents = group.comm->all_gather(q_documents.contiguous());
  } else if (options.documents) {
    all_documents = q_documents.unsqueeze(0);
  }

  std::vector<at::Tensor> outs, lses;
  at::Tensor kv = at::stack({k, v});  // one pass per step carries both
  bool last_skipped = false;
  for (int step = 0; step < group.size(); ++step) {
    if (step > 0) kv = RingPass::apply(kv, group);
    const int from = (group.rank() - step + group.size()) % group.size();
    const at::Tensor visible =
        visibility(q_positions, all_positions[from], q_documents,
                   all_documents.defined() ? all_documents[from] : at::Tensor(), options.causal);
    last_skipped = !visible.any().item<bool>();
    if (last_skipped) continue;  // the mask empties this block
    at::Tensor block_k = kv[0], block_v = kv[1];
    if (repeats > 1) {
      block_k = block_k.repeat_interleave(repeats, 1);
      block_v = block_v.repeat_interleave(repeats, 1);
    }
    Partial partial = block_attention(q, block_k, block_v, visible, scale);
    outs.push_back(partial.out);
    lses.push_back(partial.lse);
  }
  if (outs.empty()) throw std::invalid_argument("ring attention: a query sees no key at all");
  at::Tensor merged = outs.front();
  if (outs.size() > 1) {
    const at::Tensor total = at::logsumexp(at::stack(lses), 0);  // finite: each query sees a key
    merged = at::zeros_like(outs.front());
    for (std::size_t j = 0; j < outs.size(); ++j)
      merged = merged + (lses[j] - total).exp().unsqueeze(-1) * outs[j];
  }
  // Every rank's last pass must take part in backward, whose ring passes the gradients on:
  // a block skipped here still gets its (zero) gradient.
  if (last_skipped && group.parallel()) merged = merged + kv.sum() * 0;
  return merged;
}

}  // namespace pipetrain::context_parallel
