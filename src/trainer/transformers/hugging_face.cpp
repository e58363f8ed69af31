#include "trainer/transformers/hugging_face.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "checkpoint/safetensors.h"
#include "io/atomic_file.h"
#include "io/folder_lock.h"
#include "io/read_file.h"
#include "models/hugging_face.h"
#include "module/lora.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/io/errors.h"
#include "tensor_parallel/initialization.h"
#include "trainer/job.h"
#include "trainer/job_config.h"
#include "trainer/model_files.h"
#include "trainer/output_paths.h"

namespace pipetrain::trainer {
namespace fs = std::filesystem;
namespace {

constexpr std::uintmax_t kMaxJsonBytes = 64 << 20;
constexpr const char* kWeights = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

nlohmann::json read_json(const fs::path& path) {
  if (!fs::is_regular_file(path)) throw io::InputError(path.string() + ": no such file");
  try {
    return nlohmann::json::parse(io::read_file(path, kMaxJsonBytes));
  } catch (const nlohmann::json::exception& e) {
    throw io::InputError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

// The safetensors files of a model folder: one, or the shards its index names.
std::vector<fs::path> weight_files(const fs::path& folder) {
  if (fs::exists(folder / kIndex)) {
    const nlohmann::json index = read_json(folder / kIndex);
    if (!index.contains("weight_map") || !index["weight_map"].is_object())
      throw io::InputError((folder / kIndex).string() + ": weight_map is missing");
    std::set<std::string> files;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      const std::string name = file.is_string() ? file.get<std::string>() : "";
      if (name.empty() || fs::path(name).filename() != name || name == "..")
        throw io::InputError((folder / kIndex).string() + ": weight_map[\"" + tensor +
                             "\"] is not a file name in the folder");
      files.insert(name);
    }
    std::vector<fs::path> paths;
    for (const auto& name : files) paths.push_back(folder / name);
    return paths;
  }
  if (fs::exists(folder / kWeights)) return {folder / kWeights};
  throw io::InputError(folder.string() + ": no " + kWeights + " or " + kIndex +
                       " (save the model with safe_serialization=True)");
}

std::map<std::string, at::Tensor> read_weights(const fs::path& folder) {
  std::map<std::string, at::Tensor> weights;
  for (const fs::path& file : weight_files(folder)) {
    if (!fs::is_regular_file(file)) throw io::InputError(file.string() + ": no such file");
    for (auto& [name, tensor] : checkpoint::map_safetensors(file)) {
      if (!weights.emplace(name, tensor).second)
        throw io::InputError(file.string() + ": tensor " + name + " is also in another file");
    }
  }
  return weights;
}

// The file's tensor for `wanted` as pipetrain holds it: float32, [out, in] for linears.
// GPT-2 files written without the "transformer." prefix (the original release) are read too.
at::Tensor take(std::map<std::string, at::Tensor>& weights, const models::HfTensor& wanted,
                at::IntArrayRef shape, const fs::path& folder) {
  auto found = weights.find(wanted.hf_name);
  const std::string prefix = "transformer.";
  if (found == weights.end() && wanted.hf_name.rfind(prefix, 0) == 0)
    found = weights.find(wanted.hf_name.substr(prefix.size()));
  if (found == weights.end())
    throw io::InputError(folder.string() + ": tensor " + wanted.hf_name + " is missing");
  at::Tensor tensor = wanted.transposed ? found->second.t() : found->second;
  if (!at::isFloatingType(tensor.scalar_type())) {
    throw io::InputError(folder.string() + ": tensor " + found->first + " is " +
                         std::string(c10::toString(tensor.scalar_type())) +
                         ", not a floating-point type");
  }
  if (tensor.sizes() != shape) {
    std::vector<int64_t> needed = shape.vec();
    if (wanted.transposed) std::reverse(needed.begin(), needed.end());
    throw io::InputError(folder.string() + ": tensor " + found->first + " has shape " +
                         c10::str(found->second.sizes()) + ", the model config.json describes " +
                         "needs " + c10::str(at::IntArrayRef(needed)));
  }
  weights.erase(found);
  return tensor.to(at::kFloat);  // a transposed view is written in slices, never copied whole
}

// A parameter from its one tensor in the file, or stacked from each expert's.
at::Tensor take_parameter(std::map<std::string, at::Tensor>& weights,
                          const std::vector<models::HfTensor>& parts, at::IntArrayRef shape,
                          const fs::path& folder) {
  if (parts.size() == 1 && parts[0].expert < 0) return take(weights, parts[0], shape, folder);
  std::vector<at::Tensor> experts;
  for (const auto& part : parts) experts.push_back(take(weights, part, shape.slice(1), folder));
  return at::stack(experts);
}

// Refuses tensors the model does not have (a tied head's copy and buffers such as
// GPT-2's masks excepted, see models::hf_buffer).
void check_all_used(const std::map<std::string, at::Tensor>& left, bool tied,
                    const fs::path& folder) {
  for (const auto& [name, tensor] : left) {
    if (models::hf_buffer(name) || (tied && name == "lm_head.weight")) continue;
    throw io::InputError(folder.string() + ": tensor " + name +
                         " is not part of the model config.json describes");
  }
}

bool tied(const models::ModelConfig& m) {
  return models::ties_embeddings(m);
}

// Of a folder's tokenizer files, the one pipetrain reads: tokenizer.json, else
// tokenizer.model; empty if there is neither.
std::string readable_tokenizer(const std::vector<std::string>& files) {
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    if (std::find(files.begin(), files.end(), name) != files.end()) return name;
  }
  return {};
}

void check_empty_output(const fs::path& out) {
  if (out.empty()) throw io::InputError("--out: empty; name the folder to write");
  if (fs::exists(out) && (!fs::is_directory(out) || !fs::is_empty(out)))
    throw io::InputError("--out " + out.string() + ": exists and is not an empty folder");
  check_output_folder("--out", out.string());
}

// The output folder of an import or export, empty or missing when the command starts: left
// as it was found (emptied, or removed when this command made it) unless kept, so that a
// failed command leaves nothing a retry would refuse. Claimed while the command runs
// (io::FolderLock): a second command writing there is refused before it touches anything,
// and so cannot clean up the first one's files. The claim's file goes once kept.
class NewOutput {
 public:
  // Made at once (before any work, so that one that cannot be made is said first).
  explicit NewOutput(fs::path out) : out_(std::move(out)), existed_(fs::exists(out_)) {
    make_folder("--out", out_.string());
    claim_ = std::make_unique<io::FolderLock>(out_);  // throws, cleaning nothing, when held
  }
  NewOutput(const NewOutput&) = delete;
  NewOutput& operator=(const NewOutput&) = delete;
  ~NewOutput() {
    if (kept_) return;
    std::error_code error;
    if (!existed_) {
      fs::remove_all(out_, error);
      return;
    }
    for (fs::directory_iterator entry(out_, error), end; !error && entry != end;
         entry.increment(error))
      fs::remove_all(entry->path(), error);
  }
  void keep() {
    kept_ = true;
    std::error_code error;
    fs::remove(out_ / ".pipetrain.lock", error);
  }

 private:
  fs::path out_;
  bool existed_;
  bool kept_ = false;
  std::unique_ptr<io::FolderLock> claim_;
};

}  // namespace

int import_hugging_face(const std::string& folder_name, const std::string& out,
                        std::shared_ptr<comm::MpiCommunicator> ranks) {
  const fs::path folder = folder_name;
  if (!ranks) ranks = comm::MpiCommunicator::world();
  if (ranks->size() != 1)
    throw io::InputError("import runs as one process, not under a launch of several ranks");
  check_empty_output(out);
  NewOutput written(out);
  const fs::path config_json = folder / "config.json";
  const models::ModelConfig model =
      models::model_config_from_hf(read_json(config_json), config_json);
  try {  // the sizes' own rules (divisibility, positive counts), before any weight is read
    models::make_builtin_model(model);
  } catch (const io::InputError& e) {
    throw io::InputError(config_json.string() + ": " + e.what());
  }
  std::map<std::string, at::Tensor> weights = read_weights(folder);

  nlohmann::json config = models::model_keys().write(model);
  // Copied beside the checkpoint, where generate finds it also when the folder has moved
  // (config_of_checkpoint).
  const std::string tokenizer = readable_tokenizer(model_files_in(folder));
  if (!tokenizer.empty()) {  // where it will be, once the checkpoint is written
    job_keys().set(config, "sample.tokenizer", (fs::absolute(out) / tokenizer).string());
    job_keys().set(config, "data.type", "indexed");  // a tokenizer goes with token data
  }
  job_keys().set(config, "pipeline.stages", 1);
  job_keys().set(config, "train_micro_batch_size_per_gpu", 1);
  // The checkpoint takes the file's tensors, not the model's: no initialisation to pay for.
  Job job = [&] {
    const tensor_parallel::SkippedInitialization uninitialised;
    return build_job(config, {}, DataUse::kNone, ranks);
  }();
  std::map<std::string, std::vector<models::HfTensor>> by_name;  // several: each expert's
  for (const auto& t : models::hf_tensors(model)) by_name[t.name].push_back(t);
  std::vector<optim::ParameterState> masters;
  for (const auto& [name, parameter] : job.module->named_parameters()) {
    const auto found = by_name.find("layers." + name);
    if (found == by_name.end())
      throw std::logic_error("no transformers name for parameter " + name);
    masters.push_back({take_parameter(weights, found->second, parameter.sizes(), folder), {}});
  }
  check_all_used(weights, tied(model), folder);
  // The tokenizer and generation files first, so that `latest` names a checkpoint whose
  // files are there; both or neither: a failed save takes the copies and the save's partial
  // files with it.
  copy_model_files(folder, out);
  checkpoint::save_checkpoint(*job.engine, out, "step_0", {{"config", job.effective}}, nullptr,
                              &masters);
  written.keep();
  std::printf("imported %s (%s, %zu tensors%s) into %s/step_0\n", folder.c_str(),
              models::type_name(model).c_str(), masters.size(),
              tokenizer.empty() ? "" : (", " + tokenizer).c_str(), out.c_str());
  return 0;
}

namespace {

// The config a checkpoint was trained with.
nlohmann::json config_of(const std::string& checkpoint, const std::string& tag) {
  const nlohmann::json client = checkpoint::read_client_state(checkpoint, tag);
  if (!client.is_object() || !client.contains("config"))
    throw io::InputError(checkpoint + ": the checkpoint holds no model config");
  return client["config"];
}

module::LoraConfig lora_of(const nlohmann::json& config) {
  module::LoraConfig lora;
  module::lora_keys().read(config, lora);  // the other sections' keys are not its to judge
  return lora;
}

std::map<std::string, at::Tensor> model_tensors(const std::string& checkpoint,
                                                const std::string& tag) {
  std::map<std::string, at::Tensor> tensors;
  for (auto& [name, tensor] : checkpoint::read_model_tensors(checkpoint, tag))
    tensors.emplace(name, tensor);
  return tensors;
}

// The adapted weight's name of an adapter factor: "layers.3.q_proj.lora_A" ->
// "layers.3.q_proj.weight".
std::string adapted_weight(const std::string& factor) {
  return factor.substr(0, factor.rfind('.') + 1) + "weight";
}

// The checks train --load makes of a LoRA checkpoint's adapters: each lora_A [rank, in] and
// lora_B [out, rank] beside the weight [out, in] it adapts, in pairs. InputError naming the
// tensor otherwise.
void check_adapters(const std::map<std::string, at::Tensor>& tensors,
                    const module::LoraConfig& lora, const std::string& checkpoint) {
  auto shape = [](const at::Tensor& t) {
    std::string text;
    for (const int64_t size : t.sizes()) text += (text.empty() ? "" : ", ") + std::to_string(size);
    return "[" + text + "]";
  };
  for (const auto& [name, factor] : tensors) {
    if (!module::is_adapter(name)) continue;
    const auto weight = tensors.find(adapted_weight(name));
    const bool is_a = name.back() == 'A';
    const auto partner = tensors.find(name.substr(0, name.size() - 1) + (is_a ? "B" : "A"));
    if (weight == tensors.end() || partner == tensors.end() || weight->second.dim() != 2) {
      throw io::InputError(checkpoint + ": adapter " + name +
                           " has no weight or no partner factor beside it");
    }
    const int64_t in = weight->second.size(1), out = weight->second.size(0);
    const std::vector<int64_t> want =
        is_a ? std::vector<int64_t>{lora.rank, in} : std::vector<int64_t>{out, lora.rank};
    if (factor.sizes().vec() != want) {
      throw io::InputError(
          checkpoint + ": adapter " + name + " is " + shape(factor) + ", not " +
          (is_a ? "[rank " + std::to_string(lora.rank) + ", " + std::to_string(in) + "]"
                : "[" + std::to_string(out) + ", rank " + std::to_string(lora.rank) + "]") +
          " for its weight " + shape(weight->second));
    }
  }
}

// Folds each adapter into the weight it adapts, W + scale · B A, and drops the factors.
void merge_adapters(std::map<std::string, at::Tensor>& tensors, double scale) {
  for (auto it = tensors.begin(); it != tensors.end();) {
    if (!module::is_adapter(it->first)) {
      ++it;
      continue;
    }
    if (it->first.back() == 'A') {
      const std::string stem = it->first.substr(0, it->first.size() - 1);
      at::Tensor& weight = tensors.at(adapted_weight(it->first));
      weight = weight + scale * at::matmul(tensors.at(stem + "B"), it->second);
    }
    it = tensors.erase(it);
  }
}

}  // namespace

void export_hugging_face(const std::string& checkpoint, const std::string& tag,
                         const std::string& out) {
  const nlohmann::json config = config_of(checkpoint, tag);
  const models::ModelConfig model = models::parse_model_config(config);
  const std::vector<models::HfTensor> names = models::hf_tensors(model);
  const nlohmann::json hf_config = models::hf_config_of(model);
  // An earlier export's shards or index would outlive this one and be read instead.
  check_empty_output(out);
  NewOutput written(out);

  std::map<std::string, at::Tensor> tensors = model_tensors(checkpoint, tag);
  const module::LoraConfig lora = lora_of(config);
  if (lora.enabled()) {
    check_adapters(tensors, lora, checkpoint);
    merge_adapters(tensors, module::lora_options(lora).scale());
  }
  comm::NamedTensors hf;
  for (const auto& t : names) {
    const auto found = tensors.find(t.name);
    if (found == tensors.end())
      throw io::InputError(checkpoint + ": no tensor " + t.name + " in the checkpoint");
    at::Tensor tensor = t.expert >= 0 ? found->second.select(0, t.expert) : found->second;
    hf.emplace_back(t.hf_name, t.transposed ? tensor.t() : tensor);
  }
  io::AtomicFileWriter weights(fs::path(out) / kWeights);
  checkpoint::write_safetensors(weights, hf, {{"format", "pt"}});
  weights.commit();
  io::write_file_atomically(fs::path(out) / "config.json", hf_config.dump(2) + "\n");
  copy_model_files(model_files_folder(config, checkpoint), out);
  written.keep();
}

void export_peft(const std::string& checkpoint, const std::string& tag, const std::string& out) {
  const nlohmann::json config = config_of(checkpoint, tag);
  const module::LoraConfig lora = lora_of(config);
  if (!lora.enabled()) {
    throw io::InputError(checkpoint +
                         ": holds no LoRA adapters (trained without lora.rank): export --format "
                         "hf writes the whole model");
  }
  const models::ModelConfig model = models::parse_model_config(config);
  check_empty_output(out);
  NewOutput written(out);

  const std::map<std::string, at::Tensor> tensors = model_tensors(checkpoint, tag);
  check_adapters(tensors, lora, checkpoint);
  comm::NamedTensors adapters;
  std::vector<std::string> modules;  // the adapted modules' paths in the transformers model
  for (const auto& t : models::hf_tensors(model)) {
    const std::string stem = t.name.substr(0, t.name.rfind('.') + 1);  // "layers.3.q_proj."
    const auto a = tensors.find(stem + "lora_A");
    if (a == tensors.end() || t.expert >= 0) continue;
    // peft's names: the transformers module's path under base_model.model.
    const std::string module = t.hf_name.substr(0, t.hf_name.rfind('.'));
    modules.push_back(module);
    adapters.emplace_back("base_model.model." + module + ".lora_A.weight", a->second);
    adapters.emplace_back("base_model.model." + module + ".lora_B.weight",
                          tensors.at(stem + "lora_B"));
  }
  if (adapters.empty())
    throw io::InputError(checkpoint + ": lora.rank is set, but its files hold no adapters");
  io::AtomicFileWriter weights(fs::path(out) / "adapter_model.safetensors");
  checkpoint::write_safetensors(weights, adapters, {{"format", "pt"}});
  weights.commit();
  // A mixture of experts' experts have linears of the same names, which pipetrain does not
  // adapt: peft is given the adapted modules' whole paths there, names elsewhere.
  const bool exact = models::routes_experts(model);
  const nlohmann::json adapter_config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", nullptr},
      {"r", lora.rank},
      {"lora_alpha", lora.alpha},
      {"lora_dropout", lora.dropout},
      {"target_modules", exact ? nlohmann::json(modules) : nlohmann::json(lora.target_modules)},
      {"layers_to_transform",
       lora.layers.empty() || exact ? nlohmann::json(nullptr) : nlohmann::json(lora.layers)},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"use_rslora", false},
      {"use_dora", false},
      {"init_lora_weights", true},
      {"modules_to_save", nullptr},
      {"inference_mode", true}};
  io::write_file_atomically(fs::path(out) / "adapter_config.json", adapter_config.dump(2) + "\n");
  copy_model_files(model_files_folder(config, checkpoint), out);
  written.keep();
}

}  // namespace pipetrain::trainer
