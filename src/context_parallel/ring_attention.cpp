#include "pipetrain/context_parallel/ring_attention.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "context_parallel/fused_attention.h"
#include "context_parallel/whole_sequences.h"

namespace pipetrain::context_parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int kForwardTag = 0;
constexpr int kBackwardTag = 1;

// `x` to the rank `ahead` places on in the ring, from the one `ahead` places back: one
// exchange in which only those two pairs move anything (Communicator::all_to_all), so the
// send and the receive are started together: MPI posts both before waiting, NCCL groups them
// (every rank sends before it receives: on one stream, ungrouped, each send would wait for a
// receive queued behind the peer's own send).
at::Tensor pass_around(const at::Tensor& x, const Group& group, int ahead, int tag) {
  const int size = group.size();
  const int to = (group.rank() + ahead + size) % size;
  const int from = (group.rank() - ahead + size) % size;
  const at::Tensor outgoing = x.detach().contiguous();
  const at::Tensor nothing = at::empty({0}, outgoing.options());
  std::vector<at::Tensor> sent(size, nothing), received(size, nothing);
  sent[to] = outgoing;
  received[from] = at::empty_like(outgoing);
  group.comm->all_to_all(sent, received, tag);
  return received[from];
}

// One block's attention with its log-sum-exp, in plain operations: out [b, h, sq, d] (zero
// where a query sees none of the block's keys) and lse [b, h, sq] (-inf there). `kept`,
// where defined, is attention dropout's mask (1 or 0), applied after the softmax with
// kept weights divided by 1 - p: the block's weights are normalised over its own keys
// here, and merge() rescales them to the whole row's, to which dropout applies alike.
AttentionPartial block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& visible, const at::Tensor& kept, double p,
                                 double scale) {
  const double inf = std::numeric_limits<double>::infinity();
  // One [b, h, sq, sk] tensor, worked on in place (no autograd records this).
  at::Tensor weights = at::matmul(q, k.transpose(-2, -1));
  weights.mul_(scale).masked_fill_(visible.logical_not(), -inf);
  at::Tensor maximum = std::get<0>(weights.max(-1, /*keepdim=*/true));
  maximum.masked_fill_(maximum.isinf(), 0);  // rows that see nothing
  weights.sub_(maximum).exp_();
  const at::Tensor sum = weights.sum(-1, /*keepdim=*/true);
  const at::Tensor sees = sum > 0;
  const at::Tensor safe_sum = at::where(sees, sum, at::ones_like(sum));
  weights.div_(safe_sum);
  if (kept.defined()) weights.mul_(kept).div_(1 - p);
  const at::Tensor out = at::matmul(weights, v);
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
  if (options.dropout_kept &&
      (options.dropout_kept->dim() != 4 || options.dropout_kept->size(0) != q.size(0) ||
       options.dropout_kept->size(1) != q.size(1) || options.dropout_kept->size(2) != q.size(2)))
    throw std::invalid_argument(
        "ring attention: the dropout mask must be [batch, heads, local seq, whole seq]");
  if (options.dropout_kept && (options.dropout_p < 0 || options.dropout_p >= 1))
    throw std::invalid_argument("ring attention: the dropout probability must be in [0, 1)");
}

// A rectangle of one block's attention: queries [q0, q1) of this rank against keys
// [k0, k1) of the block, all visible (kFull), causal along the diagonal (kCausal), or
// under the block's mask (kMasked; rows may see nothing).
struct Piece {
  enum Kind { kFull, kCausal, kMasked } kind;
  int64_t q0, q1, k0, k1;
};

// Whether positions [from, from + length) of `positions` are consecutive; their first.
std::optional<int64_t> range_start(const at::Tensor& positions, int64_t from, int64_t length) {
  const at::Tensor part = positions.narrow(0, from, length).cpu();
  const int64_t first = part[0].item<int64_t>();
  if (!at::equal(part, at::arange(first, first + length, at::kLong))) return std::nullopt;
  return first;
}

// The fused kernel (fused_attention.h) that computes every rectangle, if one can: a type and
// shape one takes, no documents and no dropout (`masked`), distinct positions (two halves of
// consecutive ones then either coincide or lie apart, so every rectangle is all visible,
// causal or empty), and each half of every rank's positions consecutive (as local_positions
// cuts). Asked before the forward, with gradients on, as the backward will need them.
FusedKernel fused_kernel_for(const at::Tensor& q, const at::Tensor& all_positions, bool masked) {
  const int64_t seq = all_positions.size(1);
  if (masked || seq % 2 != 0) return FusedKernel::kNone;
  const FusedKernel kernel = choose_fused_kernel(q, seq / 2);
  if (kernel == FusedKernel::kNone) return kernel;
  const at::Tensor every = all_positions.flatten().cpu();
  if (std::get<0>(at::_unique(every)).numel() != every.numel()) return FusedKernel::kNone;
  for (int64_t r = 0; r < all_positions.size(0); ++r) {
    for (int64_t a = 0; a < 2; ++a) {
      if (!range_start(all_positions[r], a * (seq / 2), seq / 2)) return FusedKernel::kNone;
    }
  }
  return kernel;
}

// What one ring attention call keeps between its forward and its backward.
struct Ring : torch::CustomClassHolder {
  Group group;
  bool causal = true;
  double scale = 1;
  int64_t repeats = 1;                      // query heads per key/value head
  at::Tensor q_positions, q_documents;      // this rank's
  at::Tensor all_positions, all_documents;  // every rank's, stacked in rank order
  at::Tensor dropout_kept;                  // [b, h, sq, whole seq] in q's type, or undefined
  double dropout_p = 0;
  FusedKernel kernel = FusedKernel::kNone;  // for every rectangle, or plain operators
  FusedRandomState random;                  // the first fused forward's, for the backward
  // Per step of the ring, the rectangles of the block held then that the queries see (none:
  // skip the block). Worked out once, for forward and backward.
  std::vector<std::vector<Piece>> steps;

  int owner(int step) const { return (group.rank() - step + group.size()) % group.size(); }

  // Which of the block held at `step` the queries see, [b or 1, 1, sq, sk] (kMasked pieces).
  at::Tensor mask(int step) const {
    const int from = owner(step);
    return visibility(q_positions, all_positions[from], q_documents,
                      all_documents.defined() ? all_documents[from] : at::Tensor(), causal);
  }

  // The dropout mask of the block held at `step` ([b, h, sq, sk]), or undefined.
  at::Tensor kept(int step) const {
    if (!dropout_kept.defined()) return {};
    return dropout_kept.index_select(3, all_positions[owner(step)]);
  }

  // Fused (fused_kernel_for): each half of the queries against each half of the keys.
  // Otherwise one rectangle under the whole mask.
  void plan() {
    const bool fused = kernel != FusedKernel::kNone;
    const int64_t seq = q_positions.size(0);
    for (int step = 0; step < group.size(); ++step) {
      std::vector<Piece>& pieces = steps.emplace_back();
      if (!fused) {
        if (mask(step).any().item<bool>()) pieces.push_back({Piece::kMasked, 0, seq, 0, seq});
        continue;
      }
      const int64_t half = seq / 2;
      for (int64_t a = 0; a < 2; ++a) {
        const int64_t q_first = *range_start(q_positions, a * half, half);
        for (int64_t b = 0; b < 2; ++b) {
          const int64_t k_first = *range_start(all_positions[owner(step)], b * half, half);
          if (causal && k_first > q_first + half - 1) continue;  // every key after every query
          const bool diagonal = causal && k_first == q_first;
          pieces.push_back({diagonal ? Piece::kCausal : Piece::kFull, a * half, (a + 1) * half,
                            b * half, (b + 1) * half});
        }
      }
    }
  }

  at::Tensor widened(const at::Tensor& kv) const {  // kv heads repeated for the query heads
    return repeats > 1 ? kv.repeat_interleave(repeats, 1) : kv;
  }
  at::Tensor narrowed(const at::Tensor& grad) const {  // summed back to the kv heads
    if (repeats == 1) return grad;
    return grad.reshape({grad.size(0), grad.size(1) / repeats, repeats, grad.size(2), grad.size(3)})
        .sum(2);
  }
};

at::Tensor rows(const at::Tensor& x, const Piece& p) {
  return x.narrow(2, p.q0, p.q1 - p.q0);
}
at::Tensor columns(const at::Tensor& x, const Piece& p) {
  return x.narrow(2, p.k0, p.k1 - p.k0);
}

// Ring attention as one autograd node that keeps only q, k, v, the output and its
// log-sum-exp (and attention dropout's mask rows, where given; never a block's scores): backward
// passes the keys and values around the ring again, recomputes each block's probabilities from the
// saved log-sum-exp, and sends each block's key and value gradients along with it back to its owner
// (the memory-efficient formulation of ring and flash attention).
struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v,
                            const c10::intrusive_ptr<torch::CustomClassHolder>& holder) {
    const auto ring = c10::static_intrusive_pointer_cast<Ring>(holder);
    const at::NoGradGuard no_grad;
    const int size = ring->group.size();
    // The merged output and log-sum-exp so far, in float (double for double inputs).
    const auto wide = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    at::Tensor out = at::zeros(q.sizes(), q.options().dtype(wide));
    at::Tensor lse = at::full({q.size(0), q.size(1), q.size(2)},
                              -std::numeric_limits<double>::infinity(), q.options().dtype(wide));
    at::Tensor kv = at::stack({k, v});
    for (int step = 0; step < size; ++step) {
      if (step > 0) kv = pass_around(kv, ring->group, 1, kForwardTag);
      const at::Tensor block_k = ring->widened(kv[0]), block_v = ring->widened(kv[1]);
      for (const Piece& piece : ring->steps[step]) {
        const AttentionPartial partial =
            piece.kind == Piece::kMasked
                ? block_attention(rows(q, piece), columns(block_k, piece), columns(block_v, piece),
                                  ring->mask(step), ring->kept(step), ring->dropout_p, ring->scale)
                : fused_forward(ring->kernel, rows(q, piece), columns(block_k, piece),
                                columns(block_v, piece), piece.kind == Piece::kCausal, ring->scale,
                                ring->random.seed.defined() ? nullptr : &ring->random);
        merge(rows(out, piece), rows(lse.unsqueeze(-1), piece).squeeze(-1), partial);
      }
    }
    if (lse.isinf().any().item<bool>())
      throw std::invalid_argument("ring attention: a query sees no key at all");
    out = out.to(q.scalar_type());
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["ring"] = c10::IValue::make_capsule(holder);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const auto ring = c10::static_intrusive_pointer_cast<Ring>(ctx->saved_data["ring"].toCapsule());
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const at::Tensor d_out = grads[0].contiguous();
    // Gradients are summed in the log-sum-exp's type (float for bf16 and fp16).
    const auto wide = lse.scalar_type();
    at::Tensor d_q = at::zeros(q.sizes(), q.options().dtype(wide));
    // The block and its gradients so far travel together: [k, v] and [dk, dv].
    at::Tensor kv = at::stack({k, v});
    at::Tensor d_kv = at::zeros(kv.sizes(), kv.options().dtype(wide));
    const int size = ring->group.size();
    for (int step = 0; step < size; ++step) {
      if (step > 0) {
        kv = pass_around(kv, ring->group, 1, kBackwardTag);
        d_kv = pass_around(d_kv, ring->group, 1, kBackwardTag);
      }
      const std::vector<Piece>& pieces = ring->steps[step];
      if (pieces.empty()) continue;  // the block only passes through
      const at::Tensor block_k = ring->widened(kv[0]);
      const at::Tensor block_v = ring->widened(kv[1]);
      at::Tensor d_k = at::zeros(block_k.sizes(), block_k.options().dtype(wide));
      at::Tensor d_v = at::zeros(block_v.sizes(), block_v.options().dtype(wide));
      for (const Piece& piece : pieces) {
        at::Tensor dq, dk, dv;
        if (piece.kind == Piece::kMasked) {
          std::tie(dq, dk, dv) = masked_backward(
              rows(d_out, piece), rows(q, piece), columns(block_k, piece), columns(block_v, piece),
              rows(out, piece), rows(lse.unsqueeze(-1), piece), ring->mask(step), ring->kept(step),
              ring->dropout_p, ring->scale);
        } else {
          std::tie(dq, dk, dv) = fused_backward(
              ring->kernel, rows(d_out, piece), rows(q, piece), columns(block_k, piece),
              columns(block_v, piece), rows(out, piece), rows(lse.unsqueeze(-1), piece).squeeze(-1),
              piece.kind == Piece::kCausal, ring->scale, ring->random);
        }
        rows(d_q, piece).add_(dq);
        columns(d_k, piece).add_(dk);
        columns(d_v, piece).add_(dv);
      }
      d_kv[0].add_(ring->narrowed(d_k));
      d_kv[1].add_(ring->narrowed(d_v));
    }
    // The block held now is the next rank's: one more pass brings each owner its gradients.
    if (size > 1) d_kv = pass_around(d_kv, ring->group, 1, kBackwardTag);
    return {d_q.to(q.scalar_type()), d_kv[0].to(k.scalar_type()), d_kv[1].to(v.scalar_type()),
            at::Tensor()};
  }

  // Folds a rectangle's partial result into the running output and log-sum-exp (in place).
  static void merge(at::Tensor out, at::Tensor lse, const AttentionPartial& partial) {
    const at::Tensor part_lse = partial.lse.to(lse.scalar_type());
    const at::Tensor merged = at::logaddexp(lse, part_lse);
    // Rows that have seen nothing yet have -inf both sides: their weights are 0, not NaN.
    const at::Tensor keep = at::nan_to_num((lse - merged).exp(), 0.0);
    const at::Tensor take = at::nan_to_num((part_lse - merged).exp(), 0.0);
    out.copy_(keep.unsqueeze(-1) * out + take.unsqueeze(-1) * partial.out.to(out.scalar_type()));
    lse.copy_(merged);
  }

  // The gradients of one rectangle under a mask, from the whole output and log-sum-exp:
  // P = exp(S - lse) where visible, dS = P (dP - rowsum(dO O)). Under dropout, with D the
  // mask over 1 - p, the output is (P D) V: dV = (P D)ᵀ dO, dP = (dO Vᵀ) D, and rowsum(dO O) is
  // still the softmax's correction.
  static std::tuple<at::Tensor, at::Tensor, at::Tensor> masked_backward(
      const at::Tensor& d_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
      const at::Tensor& out, const at::Tensor& lse, const at::Tensor& mask, const at::Tensor& kept,
      double p_drop, double scale) {
    // In the log-sum-exp's type (float for bf16 and fp16), as the fused kernel computes.
    const auto wide = lse.scalar_type();
    const at::Tensor dO = d_out.to(wide), Q = q.to(wide), K = k.to(wide), V = v.to(wide);
    const at::Tensor delta = (dO * out.to(wide)).sum(-1, /*keepdim=*/true);
    // [b, h, sq, sk] tensors worked on in place where they can be (no autograd records
    // this): the weights, their gradient and, under dropout, the dropped weights.
    at::Tensor p = at::matmul(Q, K.transpose(-2, -1));
    p.mul_(scale).sub_(lse).exp_().masked_fill_(mask.logical_not(), 0);
    at::Tensor d_p = at::matmul(dO, V.transpose(-2, -1));
    at::Tensor used = p;  // the weights that multiplied V
    if (kept.defined()) {
      const at::Tensor d = kept.to(wide);
      d_p.mul_(d).div_(1 - p_drop);
      used = (p * d).div_(1 - p_drop);
    }
    const at::Tensor d_scores = d_p.sub_(delta).mul_(p).mul_(scale);
    return {at::matmul(d_scores, K), at::matmul(d_scores.transpose(-2, -1), Q),
            at::matmul(used.transpose(-2, -1), dO)};
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
  if (options.dropout_kept) {
    if (options.dropout_kept->size(3) != q.size(2) * group.size())
      throw std::invalid_argument(
          "ring attention: the dropout mask must cover every position of the whole sequence");
    ring->dropout_kept = options.dropout_kept->to(q.device(), q.scalar_type());
    ring->dropout_p = options.dropout_p;
  }
  ring->kernel = fused_kernel_for(
      q, ring->all_positions, options.documents.has_value() || options.dropout_kept.has_value());
  ring->plan();
  return RingAttention::apply(q, k, v,
                              c10::static_intrusive_pointer_cast<torch::CustomClassHolder>(ring));
}

}  // namespace pipetrain::context_parallel
