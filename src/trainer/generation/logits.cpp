#include "trainer/generation/logits.h"

#include <ATen/ATen.h>

#include <cstdio>

#include "checkpoint/safetensors.h"
#include "io/atomic_file.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/models/model_config.h"
#include "tensor_parallel/collectives.h"
#include "trainer/job.h"

namespace pipetrain::trainer {
namespace {

void check_tokens(const std::vector<int64_t>& tokens, const models::TokenInput& input) {
  if (tokens.empty()) throw io::InputError("--tokens: give at least one token id");
  if (static_cast<int64_t>(tokens.size()) > input.context) {
    throw io::InputError("--tokens: " + std::to_string(tokens.size()) +
                         " tokens, the model's context is " + std::to_string(input.context));
  }
  for (const int64_t t : tokens) {
    if (t < 0 || t >= input.vocab_size) {
      throw io::InputError("--tokens: id " + std::to_string(t) + " is outside the vocabulary [0, " +
                           std::to_string(input.vocab_size) + ")");
    }
  }
}

}  // namespace

int write_logits(const LogitsOptions& options) {
  io::check_output_directory(options.out, "--out");
  const int ranks = comm::MpiCommunicator::world()->size();
  nlohmann::json config =
      config_of_checkpoint(options.checkpoint, /*micro_batch=*/1,
                           forward_layout(ranks, options.tensor_parallel, options.expert_parallel));
  // A rotary model has no learned positions: it runs the tokens at their own length, as
  // far as its rotation allows (model.context's check).
  const auto tokens = static_cast<int64_t>(options.tokens.size());
  const models::ModelConfig model = models::parse_model_config(config);
  if (models::llama_family(model) && tokens > model.llama.context)
    job_keys().set(config, "model.context", tokens);
  Job job = build_job(config, options.checkpoint, DataUse::kNone);
  const models::TokenInput* input = job.model.tokens();
  if (!input)
    throw io::InputError("logits needs a language model checkpoint (model.type " +
                         models::builtin_types_reading(true) + ")");
  check_tokens(options.tokens, *input);
  checkpoint::load_checkpoint(*job.engine, options.checkpoint, "latest");
  const at::Tensor ids = at::tensor(options.tokens, at::kLong).unsqueeze(0);
  const comm::TensorList outputs = job.engine->infer({ids});
  const topology::Grid& grid = *job.grid;
  // Every replica ran the same tokens (their experts' rows meet in the all-to-all); the
  // first writes.
  if (!job.engine->holds_output() || grid.data_parallel_id() != 0) return 0;
  // Whole again from the tensor-parallel vocabulary slices.
  const at::Tensor logits = tensor_parallel::gather_from_group(
      outputs.at(0)[0], tensor_parallel::Group{grid.tensor_comm()});
  if (grid.tensor_comm()->rank() == 0) {
    io::write_file_atomically(
        options.out,
        checkpoint::encode_safetensors({{"logits", logits.to(at::kCPU, at::kFloat).contiguous()}}));
    std::printf("wrote %s: logits [%lld, %lld]\n", options.out.c_str(),
                static_cast<long long>(logits.size(0)), static_cast<long long>(logits.size(1)));
  }
  return 0;
}

}  // namespace pipetrain::trainer
