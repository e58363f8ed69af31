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

// What one ring attention call keeps between its forward and its backward.
struct Ring : torch::CustomClassHolder {
  Group group;
  bool causal = true;
  double scale = 1;
  int64_t repeats = 1;                      // query heads per key/value head
  at::Tensor q_positions, q_documents;      // this rank's
  at::Tensor all_positions, all_documents;  // every rank's, stacked in rank order

  int owner(int step) const { return (group.rank() - step + group.size()) % group.size(); }
  // Which of the block held at `step` the queries see; undefined when none.
  at::Tensor visible(int step) const {
    const int from = owner(step);
    at::Tensor seen =
        visibility(q_positions, all_positions[from], q_documents,
                   all_documents.defined() ? all_documents[from] : at::Tensor(), causal);
    return seen.any().item<bool>() ? seen : at::Tensor();
  }
  at::Tensor widened(const at::Tensor& kv) const {  // kv heads repeated for the query heads
    return repeats > 1 ? kv.repeat_interleave(repeats, 1) : kv;
  }
  at::Tensor narrowed(const at::Tensor& grad) const {  // summed back to the kv heads
    if (repeats == 1) return grad;
    return grad.view({grad.size(0), grad.size(1) / repeats, repeats, grad.size(2), grad.size(3)})
        .sum(2);
  }
};

// Ring attention as one autograd node that keeps only q, k, v, the output and its
// log-sum-exp (never a block's scores): backward passes the keys and values around the
// ring again, recomputes each block's probabilities from the saved log-sum-exp, and sends
// each block's key and value gradients along with it back to its owner (the
// memory-efficient formulation of ring and flash attention).
struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v,
                            const c10::intrusive_ptr<torch::CustomClassHolder>& holder) {
    const auto ring = c10::static_intrusive_pointer_cast<Ring>(holder);
    const at::NoGradGuard no_grad;
    const int size = ring->group.size();
    std::vector<at::Tensor> outs, lses;
    at::Tensor kv = at::stack({k, v});
    for (int step = 0; step < size; ++step) {
      if (step > 0) kv = pass_around(kv, ring->group, 1, kForwardTag);
      const at::Tensor visible = ring->visible(step);
      if (!visible.defined()) continue;  // the mask empties this block
      Partial partial =
          block_attention(q, ring->widened(kv[0]), ring->widened(kv[1]), visible, ring->scale);
      outs.push_back(partial.out);
      lses.push_back(partial.lse);
    }
    if (outs.empty()) throw std::invalid_argument("ring attention: a query sees no key at all");
    const at::Tensor lse = at::logsumexp(at::stack(lses), 0);  // finite: each query sees a key
    at::Tensor out = at::zeros_like(outs.front());
    for (std::size_t j = 0; j < outs.size(); ++j)
      out.add_((lses[j] - lse).exp().unsqueeze(-1) * outs[j]);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["ring"] = c10::IValue::make_capsule(holder);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const auto ring = c10::static_intrusive_pointer_cast<Ring>(ctx->saved_data["ring"].toCapsule());
    const at::Tensor d_out = grads[0].contiguous();
    const at::Tensor delta = (d_out * out).sum(-1, /*keepdim=*/true);  // rowsum(dO * O)
    at::Tensor d_q = at::zeros_like(q);
    // k, v and their gradients so far travel together: [k, v, dk, dv].
    at::Tensor travelling = at::stack({k, v, at::zeros_like(k), at::zeros_like(v)});
    const int size = ring->group.size();
    for (int step = 0; step < size; ++step) {
      if (step > 0) travelling = pass_around(travelling, ring->group, 1, kBackwardTag);
      const at::Tensor visible = ring->visible(step);
      if (!visible.defined()) continue;
      const at::Tensor block_k = ring->widened(travelling[0]);
      const at::Tensor block_v = ring->widened(travelling[1]);
      const at::Tensor scores = at::matmul(q, block_k.transpose(-2, -1)) * ring->scale;
      const at::Tensor p = (scores - lse.unsqueeze(-1)).exp().masked_fill(visible.logical_not(), 0);
      const at::Tensor d_p = at::matmul(d_out, block_v.transpose(-2, -1));
      const at::Tensor d_scores = p * (d_p - delta) * ring->scale;
      d_q.add_(at::matmul(d_scores, block_k));
      travelling[2].add_(ring->narrowed(at::matmul(d_scores.transpose(-2, -1), q)));
      travelling[3].add_(ring->narrowed(at::matmul(p.transpose(-2, -1), d_out)));
    }
    // The block held now is the next rank's: one more pass brings each owner its gradients.
    at::Tensor d_kv = travelling.narrow(0, 2, 2);
    if (size > 1) d_kv = pass_around(d_kv, ring->group, 1, kBackwardTag);
    return {d_q, d_kv[0], d_kv[1], at::Tensor()};
  }
};

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
  const auto ring = c10::make_intrusive<Ring>();
  ring->group = group;
  ring->causal = options.causal;
  ring->scale = options.scale.value_or(1.0 / std::sqrt(double(q.size(-1))));
  ring->repeats = q.size(1) / k.size(1);
  // Every rank's positions and documents, once: the block held at step j is rank - j's.
  ring->q_positions = positions.to(q.device());
  if (options.documents) ring->q_documents = options.documents->to(q.device());
  ring->all_positions = ring->q_positions.unsqueeze(0);
  if (group.parallel()) {
    ring->all_positions = group.comm->all_gather(ring->q_positions.contiguous());
    if (options.documents)
      ring->all_documents = group.comm->all_gather(ring->q_documents.contiguous());
  } else if (options.documents) {
    ring->all_documents = ring->q_documents.unsqueeze(0);
  }
  return RingAttention::apply(q, k, v,
                              c10::static_intrusive_pointer_cast<torch::CustomClassHolder>(ring));
}

}  // namespace pipetrain::context_parallel
