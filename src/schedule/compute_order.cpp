#include "builtin_orders.h"

#include <algorithm>

namespace pipetrain::schedule {
namespace {

// Micro-batches go in groups of P; within a group all of chunk 0 first, then chunk 1, ...
// (backward: the last chunk first). A last, smaller group takes the remainder.
std::vector<ComputeOp> chunked_sequence(const PipeShape& shape, OpKind kind, bool reverse_chunks) {
  std::vector<ComputeOp> sequence;
  for (int group = 0; group < shape.micro_batches; group += shape.stages) {
    const int group_end = std::min(group + shape.stages, shape.micro_batches);
    for (int i = 0; i < shape.chunks; ++i) {
      const int chunk = reverse_chunks ? shape.chunks - 1 - i : i;
      for (int mb = group; mb < group_end; ++mb) sequence.push_back({kind, mb, chunk});
    }
  }
  return sequence;
}

}  // namespace

std::vector<ComputeOrder> forward_order(const PipeShape& shape) {
  return std::vector<ComputeOrder>(shape.stages,
                                   chunked_sequence(shape, OpKind::kForwardPass, false));
}

std::vector<ComputeOrder> gpipe_order(const PipeShape& shape) {
  ComputeOrder order;
  for (int mb = 0; mb < shape.micro_batches; ++mb) order.push_back({OpKind::kForwardPass, mb, 0});
  for (int mb = 0; mb < shape.micro_batches; ++mb) order.push_back({OpKind::kBackwardPass, mb, 0});
  return std::vector<ComputeOrder>(shape.stages, order);
}

std::vector<ComputeOrder> interleaved_1f1b_order(const PipeShape& shape) {
  const auto forwards = chunked_sequence(shape, OpKind::kForwardPass, false);
  const auto backwards = chunked_sequence(shape, OpKind::kBackwardPass, true);
  const int total = static_cast<int>(forwards.size());
  std::vector<ComputeOrder> orders(shape.stages);
  for (int s = 0; s < shape.stages; ++s) {
    // Forwards in flight before the first backward: enough to fill the pipeline once.
    int warmup = shape.stages - s - 1;
    if (shape.chunks > 1) warmup = 2 * warmup + (shape.chunks - 1) * shape.stages;
    warmup = std::min(warmup, total);
    ComputeOrder& order = orders[s];
    order.assign(forwards.begin(), forwards.begin() + warmup);
    for (int i = 0; i + warmup < total; ++i) {
      order.push_back(forwards[i + warmup]);
      order.push_back(backwards[i]);
    }
    order.insert(order.end(), backwards.begin() + (total - warmup), backwards.end());
  }
  return orders;
}

std::vector<ComputeOrder> zb_h1_order(const PipeShape& shape) {
  const int m = shape.micro_batches;
  const int p = shape.stages;
  std::vector<ComputeOrder> orders(p);
  for (int s = 0; s < p; ++s) {
    // Slot x runs F(x), B(x - (p-1-s)) and W(x - (p-1)): backwards trail forwards as in
    // 1F1B, weight gradients trail by P-1 on every stage.
    for (int x = 0; x < m + p - 1; ++x) {
      if (x < m) orders[s].push_back({OpKind::kForwardPass, x, 0});
      const int backward = x - (p - 1 - s);
      if (backward >= 0 && backward < m) orders[s].push_back({OpKind::kBackwardInput, backward, 0});
      const int weight = x - (p - 1);
      if (weight >= 0 && weight < m) orders[s].push_back({OpKind::kBackwardWeight, weight, 0});
    }
  }
  return orders;
}

std::vector<ComputeOrder> zb_h2_order(const PipeShape& shape) {
  const int m = shape.micro_batches;
  const int p = shape.stages;
  // Unit passes in synchronous ticks; each stage takes, in this order of preference, the
  // next input gradient whose output gradient is in, the next forward whose input is in
  // while fewer than 2P-1 micro-batches are live, or its oldest pending weight gradient.
  struct Stage {
    int forwards = 0, inputs = 0, weights = 0;
    ComputeOrder order;
  };
  std::vector<Stage> stages(p);
  // Tick at which stage s finished the forward / input gradient of each micro-batch.
  std::vector<std::vector<int>> forward_done(p, std::vector<int>(m, -1));
  std::vector<std::vector<int>> input_done(p, std::vector<int>(m, -1));
  auto before = [](int done, int tick) { return done >= 0 && done < tick; };
  for (int tick = 0;; ++tick) {
    bool remaining = false;
    for (int s = 0; s < p; ++s) {
      Stage& st = stages[s];
      remaining = remaining || st.weights < m;
      const int live = st.forwards - st.weights;
      const int k = st.inputs;
      const bool gradient_in = k < st.forwards && (s == p - 1 ? before(forward_done[s][k], tick)
                                                              : before(input_done[s + 1][k], tick));
      const int f = st.forwards;
      const bool input_in = f < m && (s == 0 || before(forward_done[s - 1][f], tick));
      if (gradient_in) {
        st.order.push_back({OpKind::kBackwardInput, k, 0});
        input_done[s][st.inputs++] = tick;
      } else if (input_in && live < 2 * p - 1) {
        st.order.push_back({OpKind::kForwardPass, f, 0});
        forward_done[s][st.forwards++] = tick;
      } else if (st.weights < st.inputs) {
        st.order.push_back({OpKind::kBackwardWeight, st.weights++, 0});
      }
    }
    if (!remaining) break;
  }
  std::vector<ComputeOrder> orders;
  for (Stage& st : stages) orders.push_back(std::move(st.order));
  return orders;
}

}  // namespace pipetrain::schedule
