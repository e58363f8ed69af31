#include "pipetrain/checkpoint/checkpoint.h"

#include <ATen/ATen.h>
#include <fcntl.h>  // AT_FDCWD
#include <stdio.h>  // renameat2, RENAME_EXCHANGE

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>

#include "checkpoint/safetensors.h"
#include "io/atomic_file.h"
#include "io/crc32.h"
#include "io/read_file.h"
#include "module/rng_state.h"
#include "optim/optimizer_state.h"
#include "pipetrain/config/json_value.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/module/lora_config.h"
#include "pipetrain/tensor_parallel/shard.h"
#include "pipetrain/version.h"
#include "staged_save.h"

namespace pipetrain::checkpoint {
namespace fs = std::filesystem;
namespace {

constexpr int kFormatVersion = 1;
// The manifest is parsed whole: larger ones are refused before reading.
constexpr std::uintmax_t kLargestManifest = 64u << 20;

std::string numbered(const char* prefix, int number, int width) {
  char name[64];
  std::snprintf(name, sizeof name, "%s_%0*d.safetensors", prefix, width, number);
  return name;
}

// One of this stage's parameters as a checkpoint names it: "<index>.<tensor>" in the
// module, `tensor` in layer `index`'s file; `position` in the module's parameter order
// (that of PipelineEngine::whole_optimizer_state).
// A frozen parameter (a LoRA fine-tune's base) has no position: the checkpoint holds it as
// the model does, by copy.
struct StageParameter {
  std::string name;  // within the layer
  at::Tensor parameter;
  std::size_t position;
  bool frozen = false;
};

// This stage's parameters grouped by the layer index in their names, the trained ones
// first. Checkpoints hold the fp32 masters the optimizer updates, so full precision
// whatever the model computes in.
std::map<int, std::vector<StageParameter>> parameters_by_layer(
    const engine::PipelineEngine& engine) {
  std::map<int, std::vector<StageParameter>> layers;
  auto add = [&layers](const std::string& name, const at::Tensor& tensor, std::size_t position,
                       bool frozen) {
    const auto dot = name.find('.');
    layers[std::stoi(name.substr(0, dot))].push_back(
        {name.substr(dot + 1), tensor, position, frozen});
  };
  std::size_t position = 0;
  for (const auto& [name, tensor] : engine.module().named_parameters())
    add(name, tensor, position++, false);
  for (const auto& [name, tensor] : engine.module().named_frozen()) add(name, tensor, 0, true);
  return layers;
}

// Whether a checkpoint layer's tensors include LoRA adapters.
bool holds_adapters(const comm::NamedTensors& tensors) {
  return std::any_of(tensors.begin(), tensors.end(),
                     [](const auto& named) { return module::is_adapter(named.first); });
}

// Whether any layer of a checkpoint holds LoRA adapters (as its manifest describes them).
bool manifest_holds_adapters(const nlohmann::json& manifest) {
  for (const auto& layer : manifest.at("layers")) {
    if (!layer.contains("tensors")) continue;
    for (const auto& [name, tensor] : layer["tensors"].items()) {
      if (module::is_adapter(name)) return true;
    }
  }
  return false;
}

// Tensor and expert parallelism: checkpoints hold whole tensors, so they load at any
// model- and expert-parallel size. A sharded parameter, and optimizer state shaped like it,
// is joined from its group's shards on saving (collective over the group) and cut to this
// rank's shard on loading.
class ShardedState {
 public:
  explicit ShardedState(const engine::PipelineEngine& engine)
      : layouts_(engine.module().shard_layouts()),
        model_(*engine.grid().tensor_comm()),
        experts_(*engine.grid().expert_comm()) {}

  // `name` is "<layer>.<tensor>"; `shard_shape` the parameter's shape on this rank.
  at::Tensor whole(const std::string& name, const at::Tensor& value,
                   at::IntArrayRef shard_shape) const {
    const auto* layout = layout_of(name, value, shard_shape);
    return layout ? tensor_parallel::join_shards(group(*layout).all_gather(value.contiguous()),
                                                 *layout)
                  : value;
  }

  at::Tensor shard(const std::string& name, const at::Tensor& value,
                   at::IntArrayRef shard_shape) const {
    const auto* layout = layout_of(name, value, whole_shape(name, shard_shape));
    if (!layout) return value;
    const comm::Communicator& g = group(*layout);
    return tensor_parallel::take_shard(value, *layout, g.rank(), g.size());
  }

  // The shape a parameter has in a checkpoint.
  std::vector<int64_t> whole_shape(const std::string& name, at::IntArrayRef shard_shape) const {
    const auto it = layouts_.find(name);
    return it == layouts_.end()
               ? shard_shape.vec()
               : tensor_parallel::full_shape(shard_shape, it->second, group(it->second).size());
  }

  // Whether `name` is split over the expert-parallel group: joined on every replica (each
  // expert group joins its own), as the first replica's group needs its members.
  bool split_over_experts(const std::string& name) const {
    const auto it = layouts_.find(name);
    return experts_.size() > 1 && it != layouts_.end() &&
           it->second.group == tensor_parallel::ShardGroup::kExperts;
  }

 private:
  comm::Communicator& group(const tensor_parallel::ShardLayout& layout) const {
    return layout.group == tensor_parallel::ShardGroup::kExperts ? experts_ : model_;
  }

  // The layout when `value` belongs to a sharded parameter and has the shape `expected`;
  // null for one-element state (such as Adam's step count, never split) and without a
  // group to split over. Any other shape has no known split.
  const tensor_parallel::ShardLayout* layout_of(const std::string& name, const at::Tensor& value,
                                                at::IntArrayRef expected) const {
    const auto it = layouts_.find(name);
    if (it == layouts_.end() || group(it->second).size() == 1) return nullptr;
    if (value.sizes() == expected) return &it->second;
    if (value.numel() != 1) {
      throw io::InputError("state of the split parameter " + name + " is " +
                           c10::str(value.sizes()) + ", neither a scalar nor shaped " +
                           c10::str(expected));
    }
    return nullptr;
  }

  std::map<std::string, tensor_parallel::ShardLayout> layouts_;
  comm::Communicator& model_;
  comm::Communicator& experts_;
};

bool owns_layer(const module::PipelineModule& module, int index) {
  for (int chunk = 0; chunk < module.options().chunks; ++chunk) {
    const auto [first, last] = module.layer_range(chunk);
    if (index >= first && index < last) return true;
  }
  return false;
}

nlohmann::json describe(const comm::NamedTensors& tensors) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, t] : tensors) {
    out[name] = {{"dtype", at::toString(t.scalar_type())}, {"shape", t.sizes().vec()}};
  }
  return out;
}

nlohmann::json topology_of(const topology::Grid& grid) {
  nlohmann::json topology = {{"pipe", grid.pipe_parallel_size()},
                             {"data", grid.data_parallel_size()},
                             {"model", grid.tensor_parallel_size()}};
  // Only where there is one, so that checkpoints without it compare as before: each rank's
  // RNG comes back only into the same layout.
  if (grid.context_parallel_size() > 1) topology["context"] = grid.context_parallel_size();
  return topology;
}

std::function<void(int)>& layer_written_hook() {
  static std::function<void(int)> hook;
  return hook;
}

// Writes the tensors as a safetensors file and records its size and checksum in `files`.
void write_recorded(const fs::path& folder, const std::string& name,
                    const comm::NamedTensors& tensors, nlohmann::json& files) {
  io::AtomicFileWriter file(folder / name);
  write_safetensors(file, tensors);
  file.commit();
  files[name] = {{"bytes", file.size()}, {"crc32", file.crc32()}};
}

// A name from a checkpoint's own files (a tag in `latest`, a file in a manifest) must stay
// inside its folder: a plain name, and not a symbolic link.
fs::path inside(const fs::path& folder, const std::string& name, const std::string& source) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name.find('\0') != std::string::npos) {
    throw io::InputError(source + ": '" + name +
                         "' is not a plain file name inside the checkpoint folder");
  }
  const fs::path path = folder / name;
  std::error_code error;
  if (fs::is_symlink(fs::symlink_status(path, error))) {
    throw io::InputError(path.string() +
                         ": a symbolic link; checkpoint files must be the folder's own");
  }
  return path;
}

// Where a save of `tag` writes until it is complete (hidden, so never taken for a tag).
fs::path staging_folder(const fs::path& directory, const std::string& tag) {
  return directory / ("." + tag + ".saving");
}

// Puts a complete staged folder in place of `target`. A tag saved again is exchanged with
// the old folder in one atomic step (renameat2 RENAME_EXCHANGE), then the old one removed;
// where the file system cannot exchange, the old folder is moved aside first (a crash in
// between leaves it there, under a hidden name).
void publish(const fs::path& staged, const fs::path& target) {
  if (!fs::exists(target)) {
    fs::rename(staged, target);
    return;
  }
  if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(staged);  // now the old checkpoint
    return;
  }
  const fs::path aside = target.parent_path() / ("." + target.filename().string() + ".old");
  fs::remove_all(aside);
  fs::rename(target, aside);
  fs::rename(staged, target);
  fs::remove_all(aside);
}

std::string crc_text(const std::string& bytes) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x\n", io::crc32(bytes));
  return text;
}

// manifest.json with its CRC-32 beside it, in manifest.crc32.
void write_manifest(const fs::path& folder, const nlohmann::json& manifest) {
  const std::string bytes = manifest.dump(2);
  io::write_file_atomically(folder / "manifest.json", bytes);
  io::write_file_atomically(folder / "manifest.crc32", crc_text(bytes));
}

// Bytes a tensor of this dtype and shape takes in a file; nullopt if the description is not
// one (an unknown dtype, a negative or overflowing size).
std::optional<uint64_t> tensor_bytes(const nlohmann::json& tensor) {
  static const std::map<std::string, uint64_t> kSizes = {
      {"Float", 4}, {"Double", 8}, {"Half", 2}, {"BFloat16", 2}, {"Long", 8}, {"Int", 4}};
  if (!tensor.is_object() || !tensor.contains("dtype") || !tensor["dtype"].is_string() ||
      !tensor.contains("shape") || !tensor["shape"].is_array())
    return std::nullopt;
  const auto size = kSizes.find(tensor["dtype"].get<std::string>());
  if (size == kSizes.end()) return std::nullopt;
  uint64_t bytes = size->second;
  for (const auto& extent : tensor["shape"]) {
    if (!extent.is_number_unsigned()) return std::nullopt;
    const uint64_t n = extent.get<uint64_t>();
    if (n != 0 && bytes > UINT64_MAX / n) return std::nullopt;
    bytes *= n;
  }
  return bytes;
}

// A layer's described tensors (if any) must be well formed and fit in the file holding them.
void check_layer_tensors(const nlohmann::json& layer, const nlohmann::json& files,
                         const std::string& where,
                         const std::function<void(const std::string&)>& fail) {
  if (layer.contains("weight_decay_exempt") &&
      (!layer["weight_decay_exempt"].is_array() ||
       !std::all_of(layer["weight_decay_exempt"].begin(), layer["weight_decay_exempt"].end(),
                    [](const nlohmann::json& name) { return name.is_string(); })))
    fail(where + ".weight_decay_exempt must be a list of tensor names");
  if (!layer.contains("tensors")) return;
  if (!layer["tensors"].is_object()) fail(where + ".tensors must be an object");
  uint64_t total = 0;
  for (const auto& [name, tensor] : layer["tensors"].items()) {
    const auto bytes = tensor_bytes(tensor);
    if (!bytes || *bytes > UINT64_MAX - total)
      fail(where + ".tensors." + name + " must hold a known \"dtype\" and a \"shape\" of sizes");
    total += *bytes;
  }
  const std::string file = layer.value("file", std::string());
  if (file.empty()) fail(where + " describes tensors but names no \"file\"");
  const uint64_t held = files[file]["bytes"].get<uint64_t>();
  if (total > held) {
    fail(where + ".tensors take " + std::to_string(total) + " bytes, more than the " +
         std::to_string(held) + " of " + file);
  }
}

// The manifest's shape, checked before any value of it is used: what the loader reads is
// there with the right type (a manifest is untrusted input).
void check_manifest(const nlohmann::json& manifest, const fs::path& path) {
  auto fail = [&](const std::string& what) { throw io::InputError(path.string() + ": " + what); };
  const auto* files = manifest.contains("files") ? &manifest["files"] : nullptr;
  if (!files || !files->is_object()) fail("\"files\" must be an object");
  for (const auto& [name, file] : files->items()) {
    if (!file.is_object() || !file.contains("bytes") || !file["bytes"].is_number_unsigned() ||
        !file.contains("crc32") || !file["crc32"].is_number_unsigned() ||
        file["crc32"].get<uint64_t>() > 0xffffffffu) {
      fail("files." + name + " must hold an unsigned \"bytes\" and a 32-bit \"crc32\"");
    }
  }
  const auto* layers = manifest.contains("layers") ? &manifest["layers"] : nullptr;
  if (!layers || !layers->is_array()) fail("\"layers\" must be an array");
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const auto& layer = (*layers)[i];
    const std::string where = "layers[" + std::to_string(i) + "]";
    if (!layer.is_object() || !layer.contains("type") || !layer["type"].is_string())
      fail(where + " must be an object with a string \"type\"");
    if (!layer.contains("index") || !layer["index"].is_number_unsigned() ||
        layer["index"].get<uint64_t>() != i)
      fail(where + ".index must be " + std::to_string(i) + ", its place in \"layers\"");
    if (layer.contains("tied_to") &&
        (!layer["tied_to"].is_number_unsigned() || layer["tied_to"].get<uint64_t>() >= i))
      fail(where + ".tied_to must be the index of an earlier layer");
    if (layer.contains("tie_key") && !layer["tie_key"].is_string())
      fail(where + ".tie_key must be a string");
    for (const char* key : {"file", "optimizer_file"}) {
      if (!layer.contains(key)) continue;
      if (!layer[key].is_string()) fail(where + "." + key + " must be a string");
      const std::string name = layer[key].get<std::string>();
      inside(path.parent_path(), name, path.string());
      if (!files->contains(name))
        fail(where + "." + key + " '" + name + "' is not listed in \"files\"");
    }
    check_layer_tensors(layer, *files, where, fail);
  }
  const auto* steps = manifest.contains("global_steps") ? &manifest["global_steps"] : nullptr;
  if (!steps || !steps->is_number_integer() || steps->get<int64_t>() < 0)
    fail("\"global_steps\" must be a whole number >= 0");
  if (manifest.contains("loss_scaler") && !manifest["loss_scaler"].is_object())
    fail("\"loss_scaler\" must be an object");
  if (!manifest.contains("topology")) fail("\"topology\" is missing");
}

nlohmann::json read_manifest(const fs::path& folder) {
  const fs::path path = folder / "manifest.json";
  if (!fs::exists(path)) {
    throw io::InputError(path.string() +
                         " is missing (not a checkpoint, or its save was interrupted)");
  }
  const std::string bytes = io::read_file(path, kLargestManifest);
  const fs::path crc_path = folder / "manifest.crc32";
  if (!fs::exists(crc_path)) {
    throw io::InputError(crc_path.string() +
                         " is missing (a checkpoint of an earlier pipetrain, or its save was "
                         "interrupted)");
  }
  std::string said = io::read_file(crc_path, 64);
  while (!said.empty() && std::isspace(static_cast<unsigned char>(said.back()))) said.pop_back();
  char* end = nullptr;
  const unsigned long value = std::strtoul(said.c_str(), &end, 16);
  if (said.empty() || *end != '\0' || value != io::crc32(bytes)) {
    throw io::InputError(path.string() + ": checksum mismatch (manifest.crc32 says '" + said +
                         "', the file's is " + crc_text(bytes).substr(0, 8) +
                         "): damaged, or edited by hand");
  }
  const nlohmann::json manifest = config::parse_json(bytes, path.string());
  if (manifest.is_discarded() || !manifest.is_object() ||
      manifest.value("format", "") != "pipetrain-checkpoint") {
    throw io::InputError(path.string() + " is not a pipetrain checkpoint manifest");
  }
  if (manifest.value("version", 0) != kFormatVersion) {
    throw io::InputError(path.string() + ": format version " +
                         manifest.value("version", nlohmann::json()).dump() +
                         ", this pipetrain reads " + std::to_string(kFormatVersion));
  }
  check_manifest(manifest, path);
  return manifest;
}

// A checkpoint file's tensors, after checking size and checksum against the manifest.
comm::NamedTensors read_verified(const fs::path& folder, const nlohmann::json& manifest,
                                 const std::string& name) {
  const fs::path path = inside(folder, name, (folder / "manifest.json").string());
  const auto& files = manifest.at("files");
  if (!files.contains(name)) throw io::InputError(path.string() + " is not listed in the manifest");
  const auto& expected = files.at(name);
  // The size first, from the file system: nothing larger than the manifest says is read.
  std::error_code error;
  const std::uintmax_t size = fs::file_size(path, error);
  const std::string bytes =
      !error && size != expected["bytes"].get<uint64_t>() ? std::string() : io::read_file(path);
  const uint64_t found = error ? bytes.size() : size;
  if (found != expected["bytes"].get<uint64_t>()) {
    throw io::InputError(path.string() + ": " + std::to_string(found) +
                         " bytes, the manifest says " + expected["bytes"].dump() +
                         " (truncated or replaced)");
  }
  const uint32_t crc = io::crc32(bytes);
  if (crc != expected.value("crc32", uint32_t{0})) {
    char text[96];
    std::snprintf(text, sizeof text, ": checksum mismatch (manifest %08x, file %08x)",
                  expected.value("crc32", 0u), crc);
    throw io::InputError(path.string() + text);
  }
  return decode_safetensors(bytes, path.string());
}

at::Tensor tensor_named(const comm::NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  return {};
}

// ZeRO steps a stage's parameters as one tensor with one step count; a checkpoint saved
// without ZeRO where some tensors went without gradients (and so took fewer steps) cannot
// be joined into one.
void check_one_step_count(const std::vector<optim::ParameterState>& masters,
                          const fs::path& folder) {
  std::optional<int64_t> steps;
  for (const auto& whole : masters) {
    for (const auto& [key, tensor] : whole.optimizer_state) {
      if (optim::is_per_element(key)) continue;
      const int64_t count = tensor.reshape({-1})[0].item<int64_t>();
      if (steps && *steps != count) {
        throw io::InputError(folder.string() +
                             ": its tensors took different numbers of optimizer steps (" +
                             std::to_string(*steps) + " and " + std::to_string(count) +
                             "), which zero_optimization.stage > 0 cannot hold in one shard");
      }
      steps = count;
    }
  }
}

// What load_checkpoint will install, gathered and checked before anything changes.
struct PendingLoad {
  std::vector<optim::ParameterState> masters;  // in the module's parameter order
  // Tensors in another weight decay group than when saved: the first, and how many.
  std::string regrouped;
  int regrouped_count = 0;
  at::Tensor rng_state;       // CPU
  at::Tensor cuda_rng_state;  // when saved on a machine with CUDA and loaded on one
  // Frozen parameters and their values (this rank's shards), copied in as they are.
  std::vector<std::pair<at::Tensor, at::Tensor>> frozen;
  bool fresh_adapters = false;  // LoRA on a checkpoint without adapters: they start anew
};

// Weight decay groups are kept in checkpoints (weight_decay_exempt per layer; older
// checkpoints lack it); a tensor this job's config puts in the other group is noted for a warning.
void note_regrouping(const nlohmann::json& layer, const std::string& name,
                     const std::string& full_name, bool decayed_now, PendingLoad& pending) {
  if (!layer.contains("weight_decay_exempt")) return;
  const auto& exempt = layer["weight_decay_exempt"];
  const bool decayed_then = std::find(exempt.begin(), exempt.end(), name) == exempt.end();
  if (decayed_then == decayed_now) return;
  if (pending.regrouped_count++ == 0)
    pending.regrouped =
        "layer " + full_name +
        (decayed_then ? " was decayed, is exempt now" : " was exempt, is decayed now");
}

// `current`: the engine's masters now (whole_optimizer_state), where fresh LoRA adapters
// take their values from (under ZeRO-3 the parameters hold none between steps).
PendingLoad prepare_load(engine::PipelineEngine& engine, const fs::path& folder,
                         const nlohmann::json& manifest,
                         const std::vector<optim::ParameterState>& current) {
  const module::PipelineModule& module = engine.module();
  const auto& layers = manifest.at("layers");
  if (static_cast<int>(layers.size()) != module.num_layers()) {
    throw io::InputError((folder / "manifest.json").string() + ": the checkpoint holds " +
                         std::to_string(layers.size()) + " layers, this model has " +
                         std::to_string(module.num_layers()));
  }
  for (int i = 0; i < module.num_layers(); ++i) {
    const std::string saved = layers[i].value("type", "");
    if (saved != module.specs()[i].type) {
      throw io::InputError((folder / "manifest.json").string() + ": layer " + std::to_string(i) +
                           " is a " + saved + " in the checkpoint, a " + module.specs()[i].type +
                           " in this model");
    }
  }
  PendingLoad pending;
  pending.masters.resize(module.parameters().size());
  const ShardedState sharded(engine);
  // A base model under LoRA: adapters start as built, with fresh optimizer state. Only
  // where the checkpoint holds no adapter at all: one whose adapters are elsewhere was
  // saved with another lora section.
  const bool base = module.options().lora.enabled() && !manifest_holds_adapters(manifest);
  for (const auto& [index, parameters] : parameters_by_layer(engine)) {
    const auto& layer = layers[index];
    const std::string file = layer.value("file", "");
    if (file.empty())
      throw io::InputError((folder / "manifest.json").string() + ": no weights for layer " +
                           std::to_string(index));
    const comm::NamedTensors saved = read_verified(folder, manifest, file);
    const bool adapted = std::any_of(parameters.begin(), parameters.end(),
                                     [](const auto& p) { return module::is_adapter(p.name); });
    if (holds_adapters(saved) && !adapted) {
      throw io::InputError((folder / file).string() +
                           ": holds LoRA adapters this model lacks: set the lora section as when "
                           "saved (or export --format hf, which merges them)");
    }
    comm::NamedTensors optimizer_saved;
    if (layer.contains("optimizer_file"))
      optimizer_saved = read_verified(folder, manifest, layer["optimizer_file"]);
    for (const auto& [name, parameter, position, frozen] : parameters) {
      const std::string full_name = std::to_string(index) + "." + name;
      const at::Tensor value = tensor_named(saved, name);
      if (!value.defined() && module::is_adapter(name) && base) {
        pending.fresh_adapters = true;
        pending.masters[position].master =
            current.at(position).master.to(at::kCPU, at::kFloat, false, true);
        continue;
      }
      if (!value.defined()) {
        throw io::InputError((folder / file).string() + ": no tensor '" + name + "'" +
                             (module::is_adapter(name)
                                  ? " (its adapters are on other linears: set the lora section "
                                    "as when saved)"
                                  : ""));
      }
      const auto expected = sharded.whole_shape(full_name, parameter.sizes());
      if (value.sizes() != at::IntArrayRef(expected) || value.scalar_type() != at::kFloat) {
        throw io::InputError((folder / file).string() + ": tensor '" + name + "' is " +
                             at::toString(value.scalar_type()) + " " + c10::str(value.sizes()) +
                             ", the model expects Float " + c10::str(at::IntArrayRef(expected)));
      }
      if (frozen) {
        pending.frozen.emplace_back(parameter, sharded.shard(full_name, value, parameter.sizes()));
        continue;
      }
      note_regrouping(layer, name, full_name, engine.weight_decayed().at(position), pending);
      optim::ParameterState& whole = pending.masters[position];
      whole.master = sharded.shard(full_name, value, parameter.sizes());
      for (const auto& [key, tensor] : optimizer_saved) {
        if (key.rfind(name + "/", 0) != 0) continue;
        const std::string entry = key.substr(name.size() + 1);
        // Per-element state is shaped like the whole tensor; a step count is one number.
        const bool fits = optim::is_per_element(entry) ? tensor.sizes() == at::IntArrayRef(expected)
                                                       : tensor.numel() == 1;
        if (!fits) {
          throw io::InputError((folder / layer["optimizer_file"].get<std::string>()).string() +
                               ": tensor '" + key + "' is " + c10::str(tensor.sizes()) +
                               ", which does not fit parameter '" + name + "' " +
                               c10::str(at::IntArrayRef(expected)));
        }
        whole.optimizer_state.emplace_back(entry,
                                           sharded.shard(full_name, tensor, parameter.sizes()));
      }
    }
  }
  if (engine.shards_optimizer()) check_one_step_count(pending.masters, folder);
  if (manifest.at("topology") == topology_of(engine.grid())) {
    const comm::NamedTensors rng =
        read_verified(folder, manifest, numbered("rng_rank", engine.grid().global_rank(), 4));
    pending.rng_state = tensor_named(rng, "cpu");
    if (engine.device().is_cuda()) pending.cuda_rng_state = tensor_named(rng, "cuda");
  }
  return pending;
}

// One layer's tensors as a checkpoint holds them: weights and optimizer state, whole.
struct WholeLayer {
  comm::NamedTensors weights, state;
  std::vector<std::string> decay_exempt;  // the layer's tensors weight decay leaves alone
};

// Layer `index`'s tensors, joined from this stage's shards (collective over the
// tensor-parallel group and, under ZeRO, the data-parallel group). `weights`, if given,
// stand in for the engine's state; only a rank that `keeps` gets the tensors back.
WholeLayer whole_layer(engine::PipelineEngine& engine, const ShardedState& sharded, int index,
                       const std::vector<StageParameter>& parameters,
                       const std::vector<optim::ParameterState>* weights, bool keeps) {
  WholeLayer layer;
  for (const auto& [name, parameter, position, frozen] : parameters) {
    const optim::ParameterState whole =
        frozen    ? optim::ParameterState{parameter.detach().to(at::kFloat), {}}
        : weights ? weights->at(position)
                  : engine.gathered_optimizer_state(position);
    const std::string full_name = std::to_string(index) + "." + name;
    if (!keeps) {
      // Experts sharded over the ranks holding them come whole to the first of those (and,
      // in fp32, every holder has the whole master): a rank without it skips, and so does
      // every rank of its expert group (all are first holders, or none is).
      if (!sharded.split_over_experts(full_name) || !whole.master.defined()) continue;
      sharded.whole(full_name, whole.master, parameter.sizes());  // this rank's experts sent
      for (const auto& [key, tensor] : whole.optimizer_state)
        sharded.whole(full_name, tensor, parameter.sizes());
      continue;
    }
    if (!frozen && !engine.weight_decayed().at(position)) layer.decay_exempt.push_back(name);
    layer.weights.emplace_back(name, sharded.whole(full_name, whole.master, parameter.sizes()));
    for (const auto& [key, tensor] : whole.optimizer_state)
      layer.state.emplace_back(name + "/" + key,
                               sharded.whole(full_name, tensor, parameter.sizes()));
  }
  return layer;
}

}  // namespace

nlohmann::json read_client_state(const fs::path& directory, const std::string& tag) {
  return read_manifest(directory / resolve_tag(directory, tag))
      .value("client_state", nlohmann::json());
}

std::vector<int64_t> saved_parameter_counts(const fs::path& directory, const std::string& tag) {
  const fs::path folder = directory / resolve_tag(directory, tag);
  const nlohmann::json manifest = read_manifest(folder);  // tensors checked to fit their files
  std::vector<int64_t> counts;
  for (const auto& layer : manifest.at("layers")) {
    int64_t count = layer.contains("tied_to") ? -1 : 0;
    if (count == 0 && layer.contains("tensors")) {
      // The manifest's sizes were checked against each other; this one against the disk.
      const std::string file = layer["file"].get<std::string>();
      std::error_code error;
      const std::uintmax_t on_disk = fs::file_size(inside(folder, file, "manifest"), error);
      if (error || on_disk != manifest["files"][file]["bytes"].get<uint64_t>()) {
        throw io::InputError(
            (folder / file).string() + ": " +
            (error ? std::string("cannot be read") : std::to_string(on_disk) + " bytes") +
            ", the manifest says " + manifest["files"][file]["bytes"].dump());
      }
      for (const auto& [name, tensor] : layer["tensors"].items()) {
        if (module::is_adapter(name)) continue;  // LoRA's, beside the model's own
        int64_t elements = 1;                    // below the file's bytes (checked): no overflow
        for (const auto& extent : tensor["shape"]) elements *= extent.get<int64_t>();
        count += elements;
      }
    }
    counts.push_back(count);
  }
  return counts;
}

std::string resolve_tag(const fs::path& directory, const std::string& tag) {
  if (tag != "latest") return tag;
  const fs::path latest = directory / "latest";
  if (!fs::exists(latest))
    throw io::InputError("no checkpoint to load in " + directory.string() + ": " + latest.string() +
                         " is missing");
  std::string name = io::read_file(latest, 4096);
  // Written by hand or by another tool: surrounding white space (CRLF) is not the name.
  const auto blank = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!name.empty() && blank(name.back())) name.pop_back();
  name.erase(name.begin(), std::find_if_not(name.begin(), name.end(), blank));
  if (name.empty() ||
      std::any_of(name.begin(), name.end(), [](unsigned char c) { return std::iscntrl(c) != 0; })) {
    throw io::InputError(latest.string() +
                         ": must hold one checkpoint tag on one line (no control characters)");
  }
  inside(directory, name, latest.string());
  return name;
}

void set_layer_written_hook(std::function<void(int global_rank)> hook) {
  layer_written_hook() = std::move(hook);
}

namespace {

// Host copies of `tensors` that training cannot change under a background write.
comm::NamedTensors owned(const comm::NamedTensors& tensors, device::HostCopies& host) {
  comm::NamedTensors copies;
  for (const auto& [name, tensor] : tensors) copies.emplace_back(name, host.add(tensor));
  return copies;
}

}  // namespace

StagedSave stage_save(engine::PipelineEngine& engine, const fs::path& directory,
                      const std::string& tag, const nlohmann::json& client_state,
                      const engine::MicroBatchSource* data,
                      const std::vector<optim::ParameterState>* weights, Staging staging) {
  const bool copy = staging == Staging::kHostCopies;
  if (tag.empty() || tag == "latest" || tag.find('/') != std::string::npos) {
    throw io::InputError("checkpoint tag '" + tag +
                         "' must be a plain, non-empty name other than 'latest'");
  }
  const topology::Grid& grid = engine.grid();
  auto& world = *grid.world_comm();
  // Written beside the tag and swapped in when complete: a save never touches a folder that
  // `latest` may name, so a crash mid-save leaves the last good checkpoint as it was.
  StagedSave save;
  save.directory = directory;
  save.folder = staging_folder(directory, tag);
  save.tag = tag;
  save.global_rank = grid.global_rank();
  if (copy) save.copies = std::make_unique<device::HostCopies>();
  if (world.rank() == 0) {
    fs::remove_all(save.folder);  // left by an interrupted save
    fs::create_directories(save.folder);
  }
  world.barrier();

  // The first replica of each stage saves the layers it owns, one at a time: its
  // tensor-parallel group joins a layer's shards, then model-parallel rank 0 keeps the
  // layer's files before the next is joined. Under ZeRO every replica first sends that
  // replica its parts of each tensor's optimizer shards. Every rank writes its RNG.
  const bool writes = grid.replica_id() == 0;
  if (writes || (engine.shards_optimizer() && !weights) || grid.expert_parallel_size() > 1) {
    const ShardedState sharded(engine);
    for (const auto& [index, parameters] : parameters_by_layer(engine)) {
      if (!owns_layer(engine.module(), index)) continue;  // a tied tensor saved by its first owner
      const WholeLayer layer = whole_layer(engine, sharded, index, parameters, weights, writes);
      if (!writes || grid.tensor_parallel_id() != 0) continue;
      nlohmann::json& entry = save.layers[std::to_string(index)];
      entry["file"] = numbered("layer", index, 3);
      entry["tensors"] = describe(layer.weights);
      entry["weight_decay_exempt"] = layer.decay_exempt;
      const bool state = !layer.state.empty();
      save.files.push_back(
          {entry["file"], copy ? owned(layer.weights, *save.copies) : layer.weights, !state});
      if (state) {
        entry["optimizer_file"] = numbered("optimizer", index, 3);
        save.files.push_back(
            {entry["optimizer_file"], copy ? owned(layer.state, *save.copies) : layer.state, true});
      }
      // Written now, a layer's whole tensors are gone before the next layer's are joined.
      if (!copy) write_save(save);
    }
  }
  comm::NamedTensors rng{{"cpu", module::rng_state(at::kCPU)}};
  if (engine.device().is_cuda()) rng.emplace_back("cuda", module::rng_state(engine.device()));
  // The generators' states are copies of their own already.
  save.files.push_back({numbered("rng_rank", grid.global_rank(), 4), rng, false});
  if (copy)
    save.copies->close();
  else
    write_save(save);

  if (world.rank() == 0) {
    const module::PipelineModule& module = engine.module();
    save.manifest = {{"format", "pipetrain-checkpoint"},
                     {"version", kFormatVersion},
                     {"pipetrain_version", kVersion},
                     {"tag", tag},
                     {"global_steps", engine.global_steps()},
                     {"loss_scaler", engine.loss_scaler().state()},
                     {"topology", topology_of(grid)},
                     {"partition", module.parts()},
                     {"optimizer", engine.config().optimizer.type},
                     {"data", data ? data->state() : nlohmann::json(nullptr)},
                     {"data_global", true},
                     {"client_state", client_state},
                     {"files", nlohmann::json::object()}};
    nlohmann::json described = nlohmann::json::array();
    for (int i = 0; i < module.num_layers(); ++i) {
      const module::LayerSpec& spec = module.specs()[i];
      nlohmann::json entry = {{"index", i}, {"type", spec.type}};
      if (spec.tied()) entry["tie_key"] = spec.tie_key;
      described.push_back(entry);
    }
    save.manifest["layers"] = described;
  }
  return save;
}

void write_save(StagedSave& save) {
  if (save.copies) save.copies->wait();
  for (const StagedFile& file : save.files) {
    write_recorded(save.folder, file.name, file.tensors, save.written);
    if (file.ends_layer && layer_written_hook()) layer_written_hook()(save.global_rank);
  }
  save.files.clear();  // the host copies
  save.copies.reset();
}

void publish_save(StagedSave& save, comm::Communicator& world) {
  const auto parts = comm::all_gather_text(
      world, nlohmann::json{{"files", save.written}, {"layers", save.layers}}.dump());
  if (world.rank() == 0) {
    nlohmann::json& manifest = save.manifest;
    nlohmann::json& described = manifest["layers"];
    for (const auto& part : parts) {
      const nlohmann::json got = nlohmann::json::parse(part);
      manifest["files"].update(got["files"]);
      for (const auto& [index, layer] : got["layers"].items())
        described[std::stoi(index)].update(layer);
    }
    // Later occurrences of a tied layer point at the file of its first occurrence.
    for (auto& entry : described) {
      if (entry.contains("tie_key") && !entry.contains("file")) {
        for (const auto& first : described) {
          if (first.value("tie_key", std::string()) == entry["tie_key"].get<std::string>() &&
              first.contains("file")) {
            entry["file"] = first["file"];
            if (first.contains("optimizer_file")) entry["optimizer_file"] = first["optimizer_file"];
            entry["tied_to"] = first["index"];
            break;
          }
        }
      }
    }
    write_manifest(save.folder, manifest);
  }
  world.barrier();  // every file of this tag is in place
  if (world.rank() == 0) {
    publish(save.folder, save.directory / save.tag);
    io::write_file_atomically(save.directory / "latest", save.tag + "\n");
  }
  world.barrier();
}

void save_checkpoint(engine::PipelineEngine& engine, const fs::path& directory,
                     const std::string& tag, const nlohmann::json& client_state,
                     const engine::MicroBatchSource* data,
                     const std::vector<optim::ParameterState>* weights) {
  StagedSave save =
      stage_save(engine, directory, tag, client_state, data, weights, Staging::kWriteNow);
  publish_save(save, *engine.grid().world_comm());
}

namespace {

// Whether checkpoint `tag` in `directory` holds LoRA adapters; false where it cannot be read
// (the load itself then names the problem).
bool holds_adapters(const fs::path& directory, const std::string& tag) {
  try {
    return manifest_holds_adapters(read_manifest(directory / resolve_tag(directory, tag)));
  } catch (const std::exception&) {
    return false;
  }
}

// The data position of `manifest` in global samples consumed. Checkpoints before the
// position was global (no "data_global" in the manifest) kept micro-batches drawn per
// replica ({"drawn": N}, pipetrain's own sources): converted with the micro-batch size and
// data-parallel size they were trained at, which they record. Another source's state
// passes through as saved.
nlohmann::json global_data_position(const nlohmann::json& manifest, const fs::path& folder) {
  const nlohmann::json& data = manifest["data"];
  if (manifest.contains("data_global") || !data.is_object() || data.size() != 1 ||
      !data.contains("drawn"))
    return data;
  const auto object_at = [](const nlohmann::json& j, const char* key) {
    return j.is_object() && j.contains(key) ? j[key] : nlohmann::json();
  };
  const nlohmann::json config = object_at(object_at(manifest, "client_state"), "config");
  const nlohmann::json& drawn = data["drawn"];
  const nlohmann::json micro = object_at(config, "train_micro_batch_size_per_gpu");
  const nlohmann::json replicas = object_at(object_at(manifest, "topology"), "data");
  if (!drawn.is_number_integer() || !micro.is_number_integer() || !replicas.is_number_integer() ||
      drawn.get<int64_t>() < 0 || micro.get<int64_t>() < 1 || replicas.get<int64_t>() < 1) {
    throw io::InputError((folder / "manifest.json").string() +
                         ": its data position is per replica ({\"drawn\": N}) and it does not "
                         "record the micro-batch and data-parallel size to make it global; "
                         "resume it with the pipetrain that wrote it");
  }
  return {{"samples", drawn.get<int64_t>() * micro.get<int64_t>() * replicas.get<int64_t>()}};
}

}  // namespace

nlohmann::json load_checkpoint(engine::PipelineEngine& engine, const fs::path& directory,
                               const std::string& tag, engine::MicroBatchSource* data) {
  auto& world = *engine.grid().world_comm();
  // Every rank checks everything it needs; only when all agree does anything change.
  std::string problem;
  nlohmann::json manifest;
  PendingLoad pending;
  fs::path folder;
  // Collective: what fresh adapters start from, when the checkpoint has none (every rank
  // agrees whether to gather it, whatever it could read).
  std::vector<optim::ParameterState> current;
  if (engine.module().options().lora.enabled()) {
    at::Tensor fresh = at::tensor({holds_adapters(directory, tag) ? int64_t{0} : int64_t{1}});
    world.all_reduce(fresh, comm::ReduceOp::kMax);
    if (fresh.item<int64_t>() == 1) current = engine.whole_optimizer_state();
  }
  try {
    folder = directory / resolve_tag(directory, tag);
    manifest = read_manifest(folder);
    pending = prepare_load(engine, folder, manifest, current);
    if (data && manifest.contains("data") && !manifest["data"].is_null())
      data->restore(global_data_position(manifest, folder));
  } catch (const std::exception& e) {
    problem = io::error_message(e);
  }
  // Every rank learns the first problem found, so whichever rank reports it names the file.
  for (const auto& found : comm::all_gather_text(world, problem)) {
    if (!found.empty()) throw io::InputError(found);
  }

  const topology::Grid& grid = engine.grid();
  if (pending.regrouped_count > 0 && grid.replica_id() == 0 && grid.tensor_parallel_id() == 0) {
    std::fprintf(stderr,
                 "pipetrain: warning: %s: %d tensor(s) of stage %d in another weight decay group "
                 "than when saved (%s); training goes on with this config's "
                 "weight_decay_exempt\n",
                 folder.c_str(), pending.regrouped_count, grid.stage_id(),
                 pending.regrouped.c_str());
  }
  if (pending.fresh_adapters && grid.global_rank() == 0)
    std::printf("lora: %s holds no adapters: they start as built, on its weights\n",
                folder.c_str());
  {
    const at::NoGradGuard no_grad;
    for (auto& [parameter, value] : pending.frozen) parameter.copy_(value);
  }
  engine.restore_optimizer_state(pending.masters);
  engine.restore_global_steps(manifest.at("global_steps").get<int64_t>());
  if (manifest.contains("loss_scaler")) engine.loss_scaler().restore(manifest["loss_scaler"]);
  if (pending.rng_state.defined()) module::set_rng_state(at::kCPU, pending.rng_state);
  if (pending.cuda_rng_state.defined())
    module::set_rng_state(engine.device(), pending.cuda_rng_state);
  return manifest.value("client_state", nlohmann::json());
}

comm::NamedTensors read_model_tensors(const fs::path& directory, const std::string& tag) {
  const fs::path folder = directory / resolve_tag(directory, tag);
  const nlohmann::json manifest = read_manifest(folder);
  comm::NamedTensors all;
  for (const auto& layer : manifest.at("layers")) {
    if (!layer.contains("file") || layer.contains("tied_to")) continue;
    const comm::NamedTensors tensors = read_verified(folder, manifest, layer["file"]);
    for (const auto& [name, tensor] : tensors) {
      all.emplace_back("layers." + std::to_string(layer["index"].get<int>()) + "." + name, tensor);
    }
  }
  return all;
}

void export_checkpoint(const fs::path& directory, const std::string& tag, const fs::path& out) {
  io::check_output_directory(out, "--out");
  io::AtomicFileWriter file(out);
  write_safetensors(file, read_model_tensors(directory, tag),
                    {{"format", "pt"}, {"source", "pipetrain " + std::string(kVersion)}});
  file.commit();
}

}  // namespace pipetrain::checkpoint
