#include "trainer/objectives/reference.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>

#include "checkpoint/safetensors.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/models/model_config.h"
#include "pipetrain/tensor_parallel/token_reduction.h"
#include "trainer/job.h"
#include "trainer/objectives/dpo.h"

namespace pipetrain::trainer {
namespace {

// Each example's summed completion log-probability under `job`'s model, computed as the
// policy's loss computes its own (dpo_loss): rows of `rows` examples padded to the context
// (data::fill_row, as data::PairSource fills them), row_logprobs over the model's per-token
// losses.
// So a reference equal to the policy (its first weights; the base under adapters whose B
// is 0) gives the policy's numbers to the last bit. On every rank of the job.
std::vector<double> score_as_trained(Job& job, const data::ExampleList& examples, int64_t rows) {
  const models::TokenInput& input = *job.model.tokens();
  const int64_t context = input.context;  // the policy's (reference_logprobs sets it)
  const auto count = static_cast<int64_t>(examples.spans.size());
  at::Tensor sums = at::zeros({count}, at::kDouble);
  const topology::Grid& grid = *job.grid;
  const bool holds = job.engine->holds_output();
  const bool keeps = holds && grid.tensor_parallel_id() == 0;
  // Each data-parallel replica scores every replicas-th batch of rows.
  const int64_t replicas = grid.data_parallel_size();
  for (int64_t first = grid.data_parallel_id() * rows; first < count; first += replicas * rows) {
    at::Tensor ids = at::zeros({rows, context}, at::kLong);
    at::Tensor labels = at::full({rows, context}, tensor_parallel::kIgnoreIndex, at::kLong);
    at::Tensor documents = at::empty({rows, context}, at::kLong);
    const int64_t used = std::min(rows, count - first);
    for (int64_t i = 0; i < used; ++i) {
      data::fill_row(*examples.tokens, *examples.masks,
                     {examples.spans[static_cast<std::size_t>(first + i)]}, input.vocab_size,
                     context, ids[i].data_ptr<int64_t>(), labels[i].data_ptr<int64_t>(),
                     documents[i].data_ptr<int64_t>());
    }
    const comm::TensorList outputs = job.engine->infer({ids});
    if (!holds) continue;
    // The loss in float32, as the engine computes the policy's (its forward casts the outputs).
    const at::Tensor logits = outputs.at(0).to(job.engine->device()).to(at::kFloat);
    const at::Tensor targets = labels.to(job.engine->device());
    const at::Tensor scores =
        row_logprobs(job.model.token_losses, logits, targets).to(at::kCPU, at::kDouble);
    if (keeps) sums.slice(0, first, first + used).copy_(scores.slice(0, 0, used));
  }
  grid.world_comm()->all_reduce(sums, comm::ReduceOp::kSum);  // from the ranks that kept them
  const double* values = sums.data_ptr<double>();
  return {values, values + count};
}

// The reference must read the same tokens as the policy and score them with the same
// layers: its model keys equal the policy's, dropout (and a rotary model's context, which
// only bounds the positions it reads) aside.
void check_architecture(const JobConfig& policy, const nlohmann::json& saved,
                        const std::string& checkpoint) {
  const auto& keys = models::model_keys();
  nlohmann::json theirs = keys.write(models::parse_model_config(saved));
  nlohmann::json mine = keys.write(policy.model);
  const bool rotary = models::llama_family(policy.model);
  for (auto* model : {&theirs, &mine}) {
    (*model)["model"].erase("dropout");
    if (rotary) (*model)["model"].erase("context");
  }
  for (const auto& change : nlohmann::json::diff(theirs, mine)) {
    const nlohmann::json::json_pointer at(change["path"].get<std::string>());
    auto shown = [&](const nlohmann::json& j) {
      return j.contains(at) ? j[at].dump() : std::string("nothing");
    };
    std::string key = at.to_string().substr(1);
    std::replace(key.begin(), key.end(), '/', '.');
    throw io::InputError("objective.reference_checkpoint " + checkpoint + ": its " + key + " is " +
                         shown(theirs) + ", the policy's " + shown(mine) +
                         ": the reference must be the policy's architecture");
  }
}

std::vector<double> read_precomputed(const std::string& file, const data::ExampleList& examples) {
  const std::string key = "objective.reference_logprobs " + file;
  std::error_code error;
  if (!std::filesystem::is_regular_file(file, error))
    throw io::InputError(key + ": no such file (write it with pipetrain logprobs)");
  at::Tensor sums, offsets;
  for (const auto& [name, tensor] : checkpoint::map_safetensors(file)) {
    if (name == "sequence_logprobs") sums = tensor;
    if (name == "offsets") offsets = tensor;
  }
  if (!sums.defined() || !offsets.defined() || sums.scalar_type() != at::kDouble ||
      offsets.scalar_type() != at::kLong)
    throw io::InputError(key +
                         ": no float64 sequence_logprobs and int64 offsets (not written by "
                         "pipetrain logprobs?)");
  const auto count = static_cast<int64_t>(examples.spans.size());
  if (sums.numel() != count || offsets.numel() != count + 1) {
    throw io::InputError(key + ": it scores " + std::to_string(sums.numel()) +
                         " examples, the training data holds " + std::to_string(count));
  }
  for (int64_t i = 0; i < count; ++i) {
    const auto& span = examples.spans[static_cast<std::size_t>(i)];
    const int64_t length = offsets[i + 1].item<int64_t>() - offsets[i].item<int64_t>();
    if (length != span.end - span.begin) {
      throw io::InputError(key + ": its example " + std::to_string(i) + " has " +
                           std::to_string(length) + " tokens, the training data's " +
                           std::to_string(span.end - span.begin) +
                           " (log-probabilities of other data)");
    }
  }
  const double* values = sums.contiguous().data_ptr<double>();
  return {values, values + count};
}

}  // namespace

std::string reference_checkpoint(const JobConfig& policy) {
  const ObjectiveConfig& o = policy.objective;
  const std::string& load = policy.trainer.load;
  if (o.reference == ReferenceKind::kAdaptersOff && !policy.lora.enabled()) {
    throw io::InputError(
        "objective.reference \"adapters_off\" needs LoRA adapters (lora.rank): without them "
        "there is no base to score");
  }
  std::string checkpoint = o.reference_checkpoint;
  if (checkpoint.empty()) {
    if (load.empty()) {
      throw io::InputError(
          "objective.reference_checkpoint: name the reference model, or load the policy "
          "(its first weights are then the reference)");
    }
    checkpoint = load;
    // Resuming a DPO run (`load` is its own save folder): the reference that run named.
    // Another DPO run's checkpoint starts a new round, against that checkpoint.
    const nlohmann::json saved = saved_config(load);
    const nlohmann::json::json_pointer type("/objective/type"),
        named("/objective/reference_checkpoint");
    std::error_code error;
    const bool own = !policy.trainer.save.empty() &&
                     std::filesystem::equivalent(load, policy.trainer.save, error);
    if (own && saved.contains(type) && saved[type] == "dpo" && saved.contains(named))
      checkpoint = saved[named].get<std::string>();
  }
  nlohmann::json saved;
  try {
    saved = saved_config(checkpoint);
  } catch (const io::InputError& e) {
    throw io::InputError("objective.reference_checkpoint: " + std::string(e.what()));
  }
  check_architecture(policy, saved, checkpoint);
  const nlohmann::json::json_pointer rank("/lora/rank");
  if (o.reference == ReferenceKind::kAdaptersOff && saved.contains(rank) && saved[rank] != 0) {
    throw io::InputError("objective.reference \"adapters_off\": " + checkpoint +
                         " carries LoRA adapters; name the base they adapt with "
                         "objective.reference_checkpoint");
  }
  return checkpoint;
}

std::vector<double> reference_logprobs(const JobConfig& policy, const data::ExampleList& examples,
                                       int64_t context,
                                       const std::shared_ptr<comm::MpiCommunicator>& ranks,
                                       std::string* summary) {
  const ObjectiveConfig& o = policy.objective;
  if (o.reference == ReferenceKind::kPrecomputed) {
    *summary = "reference: precomputed in " + o.reference_logprobs;
    return read_precomputed(o.reference_logprobs, examples);
  }
  const std::string& checkpoint = o.reference_checkpoint;
  const int64_t rows = policy.engine.train_micro_batch_size_per_gpu;
  // The policy's rows, padded alike, its stages (data-parallel replicas sharing the examples),
  // tensor groups, precision and device: the reference's numbers are computed as the
  // policy's are.
  const int64_t stages = policy.layout.pipe, tensor = policy.layout.tensor;
  nlohmann::json config = config_of_checkpoint(
      checkpoint, rows,
      {.pipe = stages, .data = ranks->size() / (stages * tensor), .tensor = tensor});
  const auto& keys = job_keys();
  keys.set(config, "model.context", context);
  const nlohmann::json mine = keys.write(policy);
  for (const char* section : {"bf16", "fp16", "device"}) {
    config.erase(section);
    if (mine.contains(section)) config[section] = mine[section];
  }
  Job reference = build_job(config, checkpoint, DataUse::kNone, ranks);
  checkpoint::load_checkpoint(*reference.engine, checkpoint, "latest");
  const std::vector<double> sums = score_as_trained(reference, examples, rows);
  *summary =
      std::string("reference: ") +
      (o.reference == ReferenceKind::kAdaptersOff ? "the base under the adapters, " : "frozen, ") +
      checkpoint + "/" + checkpoint::resolve_tag(checkpoint, "latest") + ", scored over " +
      std::to_string(sums.size()) + " examples before the first step";
  return sums;
}

}  // namespace pipetrain::trainer
