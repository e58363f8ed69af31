#include "trainer/generation/logprobs.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "checkpoint/safetensors.h"
#include "data/examples.h"
#include "data/indexed_dataset.h"
#include "io/atomic_file.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/models/model_config.h"
#include "tensor_parallel/collectives.h"
#include "trainer/job.h"

namespace pipetrain::trainer {
namespace {

// The examples' tokens, padded with 0 to the longest: [examples, longest].
at::Tensor batch_tokens(const data::ExampleList& examples, const std::vector<data::ExampleSpan>& s,
                        int64_t vocab_size) {
  int64_t longest = 0;
  for (const auto& span : s) longest = std::max(longest, span.end - span.begin);
  at::Tensor tokens = at::zeros({static_cast<int64_t>(s.size()), longest}, at::kLong);
  for (std::size_t i = 0; i < s.size(); ++i)
    examples.tokens->read(s[i].begin, s[i].end - s[i].begin, vocab_size,
                          tokens[static_cast<int64_t>(i)].data_ptr<int64_t>());
  return tokens;
}

// log p(token t + 1 | tokens up to t) at every position of the padded batch, [examples,
// positions] on the CPU: the logit picked less the log-sum-exp over the vocabulary, in float32
// where the logits are, a row at a time (a whole batch's vocabulary in float32 is the largest
// tensor of all).
at::Tensor picked_logprobs(const at::Tensor& logits, const at::Tensor& tokens) {
  const at::Tensor next = tokens.slice(1, 1).to(logits.device());
  std::vector<at::Tensor> rows;
  for (int64_t i = 0; i < logits.size(0); ++i) {
    const at::Tensor row = logits[i].to(at::kFloat);
    rows.push_back(row.gather(1, next[i].unsqueeze(1)).squeeze(1) - row.logsumexp(-1));
  }
  return at::stack(rows).to(at::kCPU).contiguous();
}

void append(ExampleScores& out, const data::ExampleList& examples,
            const std::vector<data::ExampleSpan>& spans, const at::Tensor& picked) {
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const int64_t length = spans[i].end - spans[i].begin;
    std::vector<int64_t> mask(static_cast<std::size_t>(length));
    examples.masks->read(spans[i].begin, length, 2, mask.data());
    const float* row = length > 1 ? picked[static_cast<int64_t>(i)].data_ptr<float>() : nullptr;
    double sum = 0;
    out.logprobs.push_back(0.0f);  // the first token: nothing before it
    out.mask.push_back(0);
    for (int64_t t = 1; t < length; ++t) {
      out.logprobs.push_back(row[t - 1]);
      out.mask.push_back(static_cast<uint8_t>(mask[t]));
      if (mask[t]) sum += row[t - 1];
    }
    out.offsets.push_back(out.offsets.back() + length);
    out.sums.push_back(sum);
  }
}

std::string encode(ExampleScores& w) {
  auto vector_tensor = [](auto& values, at::ScalarType type) {
    return at::from_blob(values.data(), {static_cast<int64_t>(values.size())}, type).clone();
  };
  return checkpoint::encode_safetensors(
      {{"logprobs", vector_tensor(w.logprobs, at::kFloat)},
       {"mask", vector_tensor(w.mask, at::kByte)},
       {"offsets", vector_tensor(w.offsets, at::kLong)},
       {"sequence_logprobs", vector_tensor(w.sums, at::kDouble)}});
}

// The model's token input: InputError for a model that reads none.
const models::TokenInput* language_input(const Job& job) {
  const models::TokenInput* input = job.model.tokens();
  if (!input)
    throw io::InputError("logprobs needs a language model checkpoint (model.type " +
                         models::builtin_types_reading(true) + ")");
  return input;
}

void check_lengths(const data::ExampleList& examples, const models::TokenInput& input) {
  const std::vector<data::ExampleSpan>& spans = examples.spans;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const int64_t length = spans[i].end - spans[i].begin;
    if (length <= input.context + 1) continue;
    throw io::InputError("--data: example " + std::to_string(i) + " has " + std::to_string(length) +
                         " tokens, more than the model's context + 1 (" +
                         std::to_string(input.context + 1) +
                         "); prepare the examples with --context " + std::to_string(input.context));
  }
}

}  // namespace

bool scores_here(const Job& job) {
  // Every replica ran the same examples (their experts' rows meet in the all-to-all); the
  // first holds the scores.
  const topology::Grid& grid = *job.grid;
  return job.engine->holds_output() && grid.tensor_comm()->rank() == 0 &&
         grid.data_parallel_id() == 0;
}

ExampleScores score_examples(Job& job, const data::ExampleList& examples, int64_t micro_batch) {
  const models::TokenInput* input = language_input(job);
  check_lengths(examples, *input);
  const topology::Grid& grid = *job.grid;
  const bool writes = scores_here(job);
  // A mixture of experts routes the padding too, and its experts' capacity follows the
  // padded length: its examples go through one at a time, unpadded.
  const auto per_pass = static_cast<std::size_t>(
      models::capabilities(job.config.model).routed_experts > 0 ? 1 : micro_batch);
  const std::vector<data::ExampleSpan>& spans = examples.spans;
  ExampleScores written;
  for (std::size_t first = 0; first < spans.size(); first += per_pass) {
    const std::vector<data::ExampleSpan> batch(
        spans.begin() + static_cast<std::ptrdiff_t>(first),
        spans.begin() + static_cast<std::ptrdiff_t>(std::min(spans.size(), first + per_pass)));
    const at::Tensor tokens = batch_tokens(examples, batch, input->vocab_size);
    if (tokens.size(1) < 2) {  // examples of one token: nothing to predict
      if (writes) append(written, examples, batch, at::Tensor());
      continue;
    }
    const at::Tensor inputs = tokens.slice(1, 0, tokens.size(1) - 1).contiguous();
    const comm::TensorList outputs = job.engine->infer({inputs});
    if (!job.engine->holds_output()) continue;
    // Whole again from the tensor-parallel vocabulary slices (every model rank joins).
    const at::Tensor logits = tensor_parallel::gather_from_group(
        outputs.at(0), tensor_parallel::Group{grid.tensor_comm()});
    if (writes) append(written, examples, batch, picked_logprobs(logits, tokens));
  }
  return written;
}

int write_logprobs(const LogprobsOptions& options) {
  io::check_output_directory(options.out, "--out");
  if (options.data.empty()) throw io::InputError("--data: name at least one prepared dataset");
  if (options.micro_batch < 1) throw io::InputError("--micro-batch must be at least 1");
  if (!data::has_loss_masks(options.data)) {
    throw io::InputError("--data " + data::indexed_prefix(options.data.front()) +
                         ": no loss masks (PREFIX.mask): logprobs reads prepared examples, "
                         "whose masks say which tokens are completions (prepare-data --chat)");
  }
  const int ranks = comm::MpiCommunicator::world()->size();
  const nlohmann::json config =
      config_of_checkpoint(options.checkpoint, options.micro_batch,
                           forward_layout(ranks, options.tensor_parallel, options.expert_parallel));
  Job job = build_job(config, options.checkpoint, DataUse::kNone);
  const models::TokenInput* input = language_input(job);
  const data::ExampleList examples = data::read_examples(options.data, input->vocab_size);
  check_lengths(examples, *input);
  checkpoint::load_checkpoint(*job.engine, options.checkpoint, "latest");
  ExampleScores written = score_examples(job, examples, options.micro_batch);
  if (!scores_here(job)) return 0;
  io::write_file_atomically(options.out, encode(written));
  int64_t counted = 0;
  for (const uint8_t m : written.mask) counted += m;
  std::printf("wrote %s: %zu examples, %lld tokens, %lld of them completions\n",
              options.out.c_str(), written.sums.size(),
              static_cast<long long>(written.logprobs.size()), static_cast<long long>(counted));
  return 0;
}

}  // namespace pipetrain::trainer
