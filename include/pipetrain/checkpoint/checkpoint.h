#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pipetrain/comm/tensor_list.h"
#include "pipetrain/engine/micro_batch_source.h"
#include "pipetrain/engine/pipeline_engine.h"

// Checkpoints: one folder per tag under a checkpoint directory, holding
//   manifest.json               model, topology, files with CRC-32s, step, data, client state
//   manifest.crc32              the manifest's own CRC-32 (8 hex digits)
//   layer_NNN.safetensors       layer NNN's weights (a tied layer once, under its first index)
//   optimizer_NNN.safetensors   optimizer state of layer NNN's weights ("<tensor>/<field>")
//   rng_rank_RRRR.safetensors   each rank's random state
// and a file `latest` naming the newest complete tag. Files are written to a temporary
// name, flushed and renamed; `latest` moves only after every rank finished, so a crash
// mid-save leaves the previous checkpoint intact. State is kept per layer, so a
// checkpoint loads at another pipeline or data-parallel size.
namespace pipetrain::checkpoint {

// The seam for tests that break a save on purpose (the trainer sets it from
// PIPETRAIN_FAULT_KILL_IN_SAVE): called on each writing rank right after one layer's files
// are written. None by default.
void set_layer_written_hook(std::function<void(int global_rank)> hook);

// Collective. `data`, if given, records where its reading stands (rank 0's position;
// every replica reads the same number of samples). `weights`, if given, are saved in place
// of the engine's masters and optimizer state (whole, in the module's parameter order,
// without ZeRO): an import saves the tensors it read without copying them into the model.
void save_checkpoint(engine::PipelineEngine& engine, const std::filesystem::path& directory,
                     const std::string& tag, const nlohmann::json& client_state = nullptr,
                     const engine::MicroBatchSource* data = nullptr,
                     const std::vector<optim::ParameterState>* weights = nullptr);

// Collective. Verifies every file this job needs (checksums, tensor names, shapes and
// dtypes against the model) on every rank before changing anything; on any problem every
// rank throws the same InputError (the first problem any rank found, naming the file and
// the mismatch) and no weight has changed. Restores weights, optimizer state, the step count and,
// when the topology is the same, each rank's random state; `data`, if given, resumes its position.
// `tag` "latest" reads the tag from the `latest` file. Returns the client state.
nlohmann::json load_checkpoint(engine::PipelineEngine& engine,
                               const std::filesystem::path& directory,
                               const std::string& tag = "latest",
                               engine::MicroBatchSource* data = nullptr);

// The whole model of a checkpoint, named "layers.<index>.<tensor>", each tied tensor once
// (float32, as saved). Verifies checksums first.
comm::NamedTensors read_model_tensors(const std::filesystem::path& directory,
                                      const std::string& tag);

// The whole model of a checkpoint as one safetensors file with stable names
// "layers.<index>.<tensor>", each tied tensor once. Verifies checksums first.
void export_checkpoint(const std::filesystem::path& directory, const std::string& tag,
                       const std::filesystem::path& out);

// The client state saved with a checkpoint (its manifest read and its format version
// checked, without loading any weights); InputError if it cannot be read.
nlohmann::json read_client_state(const std::filesystem::path& directory,
                                 const std::string& tag = "latest");

// Parameters per layer as the checkpoint's manifest describes them, read without loading
// any weights (the described tensors are checked to fit in the files that hold them); -1
// for a later occurrence of a tied layer.
std::vector<int64_t> saved_parameter_counts(const std::filesystem::path& directory,
                                            const std::string& tag = "latest");

// The tag `latest` names (or `tag` itself); InputError if there is none.
std::string resolve_tag(const std::filesystem::path& directory, const std::string& tag);

}  // namespace pipetrain::checkpoint
