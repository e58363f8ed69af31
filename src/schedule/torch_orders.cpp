// Compute orders of the schedules torch.distributed.pipelining offers beyond 1F1B, GPipe
// and interleaved 1F1B: each rank's passes in the order PyTorch's schedule class puts them
// (its `pipeline_order` with the idle slots dropped), re-derived from the algorithms
// PyTorch documents. tests/schedule/torch_orders_test.py compares them with PyTorch's own.
#include <algorithm>
#include <deque>
#include <map>
#include <utility>

#include "builtin_orders.h"

namespace pipetrain::schedule {
namespace {

// Counts each (chunk, kind)'s next micro-batch, so orders name only the kind and chunk.
class Counters {
 public:
  int take(int chunk, OpKind kind) { return next_[{chunk, kind}]++; }
  int peek(int chunk, OpKind kind) { return next_[{chunk, kind}]; }

 private:
  std::map<std::pair<int, OpKind>, int> next_;
};

// PyTorch's _get_1f1b_rank_ops for the zero-bubble case (ScheduleInterleavedZeroBubble):
// warm-up forwards, then a forward and an input gradient per slot, each weight gradient
// trailing its input gradient by `rank` slots, the rest of them at the end.
ComputeOrder interleaved_zero_bubble_rank(const PipeShape& shape, int rank) {
  const int p = shape.stages;
  const int chunks = shape.chunks;
  const int m = shape.micro_batches;
  const int rounds = std::max(1, m / p);
  const int per_round = m / rounds;
  const int warmup = std::min((chunks - 1) * per_round + (p - 1 - rank), m * chunks);
  const int total = m * chunks + warmup;  // warm-up, steady 1F1B, cool-down
  auto forward_chunk = [&](int op) { return (op / per_round) % chunks; };
  auto backward_chunk = [&](int op) { return chunks - 1 - ((op - warmup) / per_round) % chunks; };
  Counters count;
  ComputeOrder order;
  std::vector<int> backward_chunks;  // in the order the input gradients ran
  std::size_t weights = 0;
  auto weight = [&] {
    const int chunk = backward_chunks[weights++];
    order.push_back({OpKind::kBackwardWeight, count.take(chunk, OpKind::kBackwardWeight), chunk});
  };
  for (int op = 0; op < total; ++op) {
    if (op < m * chunks) {
      const int chunk = forward_chunk(op);
      order.push_back({OpKind::kForwardPass, count.take(chunk, OpKind::kForwardPass), chunk});
    }
    if (op < warmup) continue;
    const int chunk = backward_chunk(op);
    order.push_back({OpKind::kBackwardInput, count.take(chunk, OpKind::kBackwardInput), chunk});
    backward_chunks.push_back(chunk);
    if (op - warmup >= rank) weight();
  }
  while (weights < backward_chunks.size()) weight();
  return order;
}

// PyTorch's ScheduleZBVZeroBubble for one rank (chunk 0 is virtual stage `rank`, chunk 1 is
// 2P-1-rank). Orders are made for at least 2P-1 micro-batches; passes of the ones past
// `m` are dropped, as PyTorch drops them.
ComputeOrder zbv_rank(const PipeShape& shape, int rank) {
  const int p = shape.stages;
  const int n = std::max(2 * p - 1, shape.micro_batches);
  ComputeOrder order;
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  auto add = [&](OpKind kind, int chunk, int mb) { order.push_back({kind, mb, chunk}); };
  for (int i = 0; i < 2 * (p - rank) - 1; ++i) add(OpKind::kForwardPass, 0, f0++);
  for (int i = 0; i < rank; ++i) {
    add(OpKind::kForwardPass, 1, f1++);
    add(OpKind::kForwardPass, 0, f0++);
  }
  for (int i = 0; i < p - rank; ++i) {
    add(OpKind::kForwardPass, 1, f1++);
    add(OpKind::kBackwardInput, 1, b1);
    add(OpKind::kBackwardWeight, 1, b1++);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) add(OpKind::kForwardPass, 0, f0++);
    add(OpKind::kBackwardInput, 0, b0);
    add(OpKind::kBackwardWeight, 0, b0++);
    add(OpKind::kForwardPass, 1, f1++);
    add(OpKind::kBackwardInput, 1, b1);
    add(OpKind::kBackwardWeight, 1, b1++);
  }
  int w0 = b0, w1 = b1;
  for (int i = 0; i < rank; ++i) {
    add(OpKind::kBackwardInput, 0, b0++);
    add(OpKind::kBackwardInput, 1, b1++);
  }
  for (int i = 0; i < p - rank; ++i) {
    add(OpKind::kBackwardInput, 0, b0++);
    add(OpKind::kBackwardWeight, 0, w0++);
  }
  while (w1 < b1) add(OpKind::kBackwardWeight, 1, w1++);
  while (w0 < b0) add(OpKind::kBackwardWeight, 0, w0++);
  std::erase_if(order, [&](const ComputeOp& op) { return op.micro_batch >= shape.micro_batches; });
  return order;
}

// PyTorch's ScheduleDualPipeV for one rank, after DeepSeek's dualpipev.py. A full backward
// of chunk c takes the next input-gradient index of c; an input gradient queues its
// weight gradient, which later slots run oldest first. PyTorch's overlapped F&B pairs are
// the pair's forward, then its backward (`paired` marks the backward).
ComputeOrder dualpipev_rank(const PipeShape& shape, int rank) {
  const int p = shape.stages;
  const int m = shape.micro_batches;
  Counters count;
  std::deque<std::pair<int, int>> weight_queue;  // (chunk, micro-batch)
  ComputeOrder order;
  auto forward = [&](int chunk) {
    order.push_back({OpKind::kForwardPass, count.take(chunk, OpKind::kForwardPass), chunk});
  };
  auto full_backward = [&](int chunk) {
    const int mb = count.take(chunk, OpKind::kBackwardInput);
    count.take(chunk, OpKind::kBackwardWeight);
    order.push_back({OpKind::kBackwardPass, mb, chunk});
  };
  auto input_backward = [&](int chunk) {
    const int mb = count.take(chunk, OpKind::kBackwardInput);
    order.push_back({OpKind::kBackwardInput, mb, chunk});
    weight_queue.emplace_back(chunk, mb);
  };
  auto pending_weight = [&] {
    if (weight_queue.empty()) return;
    const auto [chunk, mb] = weight_queue.front();
    weight_queue.pop_front();
    count.take(chunk, OpKind::kBackwardWeight);
    order.push_back({OpKind::kBackwardWeight, mb, chunk});
  };
  auto pair = [&](int forward_chunk, int backward_chunk) {
    forward(forward_chunk);
    full_backward(backward_chunk);
    order.back().paired = true;
  };
  auto backward = [&](int chunk, bool zero_bubble) {
    zero_bubble ? input_backward(chunk) : full_backward(chunk);
  };
  for (int i = 0; i < (p - rank - 1) * 2; ++i) forward(0);
  for (int i = 0; i < rank + 1; ++i) {
    forward(0);
    forward(1);
  }
  for (int i = 0; i < p - rank - 1; ++i) {
    input_backward(1);
    pending_weight();
    forward(1);
  }
  for (int i = 0; i < m - 2 * p + rank + 1; ++i) {
    if (i == 0 && rank == p - 1) {
      forward(0);  // not overlapped, to shorten the bubble (DeepSeek's choice)
      full_backward(1);
    } else {
      pair(0, 1);
    }
    pair(1, 0);
  }
  for (int i = 0; i < p - rank - 1; ++i) {
    full_backward(1);
    pair(1, 0);
  }
  bool zero_bubble = false;
  const int tail = rank + 1;
  for (int i = 0; i < tail; ++i) {
    if (i == tail / 2 && rank % 2 == 1) zero_bubble = true;
    backward(1, zero_bubble);
    if (i == tail / 2 && rank % 2 == 0) zero_bubble = true;
    backward(0, zero_bubble);
  }
  for (int i = 0; i < p - rank - 1; ++i) {
    pending_weight();
    backward(0, zero_bubble);
  }
  for (int i = 0; i < rank + 1; ++i) pending_weight();
  return order;
}

}  // namespace

std::vector<ComputeOrder> looped_bfs_order(const PipeShape& shape) {
  std::vector<ComputeOrder> orders(shape.stages);
  for (ComputeOrder& order : orders) {
    for (int chunk = 0; chunk < shape.chunks; ++chunk) {
      for (int mb = 0; mb < shape.micro_batches; ++mb)
        order.push_back({OpKind::kForwardPass, mb, chunk});
    }
    for (int chunk = shape.chunks - 1; chunk >= 0; --chunk) {
      for (int mb = shape.micro_batches - 1; mb >= 0; --mb)
        order.push_back({OpKind::kBackwardPass, mb, chunk});
    }
  }
  return orders;
}

std::vector<ComputeOrder> interleaved_zero_bubble_order(const PipeShape& shape) {
  std::vector<ComputeOrder> orders;
  for (int rank = 0; rank < shape.stages; ++rank)
    orders.push_back(interleaved_zero_bubble_rank(shape, rank));
  return orders;
}

std::vector<ComputeOrder> zbv_order(const PipeShape& shape) {
  std::vector<ComputeOrder> orders;
  for (int rank = 0; rank < shape.stages; ++rank) orders.push_back(zbv_rank(shape, rank));
  return orders;
}

std::vector<ComputeOrder> dualpipev_order(const PipeShape& shape) {
  std::vector<ComputeOrder> orders;
  for (int rank = 0; rank < shape.stages; ++rank) orders.push_back(dualpipev_rank(shape, rank));
  return orders;
}

}  // namespace pipetrain::schedule
