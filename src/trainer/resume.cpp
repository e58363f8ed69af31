#include "resume.h"

#include <cctype>
#include <filesystem>
#include <system_error>

#include "io/read_file.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/topology/parallel_layout.h"
#include "trainer/job_config.h"

namespace pipetrain::trainer {
namespace {

namespace fs = std::filesystem;

// Key `name` of a job's config as given ("" where unset or not text), read before the
// config is, to choose what it loads; the resolved values are written through the same table.
std::string text_of(const nlohmann::json& config, const std::string& name) {
  const nlohmann::json* value = job_keys().get(config, name);
  return value && value->is_string() ? value->get<std::string>() : "";
}

bool given(const nlohmann::json& config, const std::string& name) {
  return job_keys().get(config, name) != nullptr;
}

// The checkpoint `latest` names in `folder` (its tag, e.g. "step_12"), or empty.
// The tag `latest` names in `folder`, or "" where there is none yet.
std::string latest_in(const std::string& folder) {
  std::error_code error;
  if (!fs::is_regular_file(fs::path(folder) / "latest", error)) return "";
  return checkpoint::resolve_tag(folder, "latest");
}

// The newest step_N folder with a manifest in `folder` (a checkpoint), or "" where none.
std::string newest_step_folder(const std::string& folder) {
  std::error_code error;
  std::string newest;
  long long newest_step = -1;
  for (fs::directory_iterator entry(folder, error), end; !error && entry != end;
       entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.size() == 5 || name.size() > 20 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    std::error_code missing;
    if (!fs::is_regular_file(entry->path() / "manifest.json", missing)) continue;
    const long long step = std::stoll(name.substr(5));
    if (step > newest_step) newest_step = step, newest = name;
  }
  return newest;
}

bool same_folder(const std::string& a, const std::string& b) {
  std::error_code error;
  return fs::equivalent(a, b, error) ||
         fs::path(a).lexically_normal() == fs::path(b).lexically_normal();
}

}  // namespace

std::string resolve_resume(nlohmann::json& config) {
  if (!config.is_object()) return "";
  const std::string save = text_of(config, "save"), load = text_of(config, "load");
  if (save.empty()) return "";
  const nlohmann::json* overwrite_given = job_keys().get(config, "overwrite");
  const bool overwrite =
      overwrite_given && overwrite_given->is_boolean() && overwrite_given->get<bool>();
  const std::string tag = latest_in(save);
  if (tag.empty() && !overwrite) {
    // Checkpoints without `latest` (deleted, or copied without it): never taken as empty.
    const std::string orphan = newest_step_folder(save);
    if (!orphan.empty()) {
      throw io::InputError("save: " + save + " holds checkpoints (the newest " + orphan +
                           ") but no latest file naming the one to resume: write its tag into " +
                           save + "/latest to resume it, or start over there with --overwrite");
    }
  }
  if (!load.empty() && !same_folder(load, save)) {
    // A fine-tune starts from `load` (its base); once its own folder holds a checkpoint of
    // a run that started there, the same command goes on from it. Another run's
    // checkpoints are left to the trainer's refusal.
    if (tag.empty() || overwrite) return "";
    const nlohmann::json saved = checkpoint::read_client_state(save, tag);
    const std::string origin = saved.is_object() ? saved.value("started_from", "") : "";
    if (origin.empty() || !same_folder(origin, load)) return "";
    job_keys().set(config, "load", save);
    return "resuming from the newest checkpoint in " + save + " (" + tag + "), not " + load +
           " (where the run started)";
  }
  if (!load.empty() && tag.empty()) {
    job_keys().set(config, "load", "");
    return "no checkpoint in " + save + " yet: starting fresh";
  }
  if (!load.empty()) return "";  // --load SAVE: the loader says where it resumed
  if (tag.empty()) return "starting fresh: no checkpoint in " + save + " yet";
  if (overwrite) return "starting over in " + save + " (overwrite): its " + tag + " is left behind";
  job_keys().set(config, "load", save);
  return "resuming from the newest checkpoint in " + save + " (" + tag + ")";
}

std::string keep_global_batch(nlohmann::json& config, int world_size) {
  const std::string load = text_of(config, "load");
  if (load.empty() || given(config, "train_batch_size")) return "";
  if (checkpoint::resolve_tag(load, "latest") == "step_0") return "";  // an import: no batch
  const nlohmann::json saved =
      checkpoint::read_client_state(load).value("config", nlohmann::json());
  if (!saved.is_object() || !saved.contains("train_batch_size") ||
      !saved["train_batch_size"].is_number_integer())
    return "";
  const int64_t batch = saved["train_batch_size"].get<int64_t>();
  const int64_t saved_micro = saved.value("train_micro_batch_size_per_gpu", int64_t{0});
  const int64_t saved_steps = saved.value("gradient_accumulation_steps", int64_t{0});
  if (saved_micro < 1 || saved_steps < 1 || batch % (saved_micro * saved_steps) != 0) return "";
  const int64_t saved_data = batch / (saved_micro * saved_steps);
  const JobConfig job = parse_job_config(config, nullptr);
  const int64_t data = topology::resolve_layout(job.layout, world_size).data;
  if (data == saved_data) return "";
  // The micro-batch stays as the file (or the checkpoint) sets it; the steps follow.
  const auto& keys = job_keys();
  keys.set(config, "train_batch_size", batch);
  const bool micro_given = given(config, "train_micro_batch_size_per_gpu");
  if (micro_given || !given(config, "gradient_accumulation_steps")) {
    if (!micro_given) keys.set(config, "train_micro_batch_size_per_gpu", saved_micro);
    keys.erase(config, "gradient_accumulation_steps");
  }
  return "global batch " + std::to_string(batch) +
         " kept from the checkpoint at data-parallel size " + std::to_string(data) +
         " (it was trained at " + std::to_string(saved_data) + "): the accumulation steps follow";
}

std::string started_from(const std::string& load, const std::string& save) {
  if (load.empty()) return "";
  if (save.empty() || !same_folder(load, save)) return load;
  const nlohmann::json saved = checkpoint::read_client_state(load);
  return saved.is_object() ? saved.value("started_from", "") : "";
}

}  // namespace pipetrain::trainer
