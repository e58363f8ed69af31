// The operators of one training micro-batch of the built-in GPT as the plain loop runs it
// (bench/gpu_bench's PlainLoop; bench/gpu_eager.py's step in PyTorch): a bf16 model on the
// CPU, the logits cast to fp32 for the loss, the loss scaled and run backward.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "op_recorder.h"

namespace pipetrain::testing {

// The shapes, small: the lists depend on the layers, not on the widths.
struct GptOpsShape {
  int64_t vocab = 64, context = 16, d_model = 32, heads = 2, batch = 2;
};

// "forward" (ids to logits), "loss" (the cast and cross entropy), "backward".
std::map<std::string, std::vector<RecordedOp>> gpt_step_ops(int layers,
                                                            const GptOpsShape& shape = {});

}  // namespace pipetrain::testing
