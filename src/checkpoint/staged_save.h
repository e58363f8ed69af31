#pragma once
// A save in three parts, so that the middle one can run while training goes on: staged at
// a step boundary (collective: shards joined, each rank's files gathered), written (this
// rank's files, no communication), published (collective: the manifest, then `latest`).
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "device/host_copies.h"
#include "pipetrain/comm/communicator.h"
#include "pipetrain/comm/tensor_list.h"
#include "pipetrain/engine/pipeline_engine.h"

namespace pipetrain::checkpoint {

struct StagedFile {
  std::string name;
  comm::NamedTensors tensors;
  bool ends_layer = false;  // the last of a layer's files (the layer-written hook's moment)
};

struct StagedSave {
  std::filesystem::path directory;
  std::filesystem::path folder;  // where the files go until published
  std::string tag;
  int global_rank = 0;
  std::vector<StagedFile> files;                      // this rank's, to write
  nlohmann::json layers = nlohmann::json::object();   // this rank's layers' manifest entries
  nlohmann::json manifest;                            // rank 0: all but files and layer files
  nlohmann::json written = nlohmann::json::object();  // the files written: size and CRC-32
  // Staging::kHostCopies: the copies in flight (from GPUs: pinned, on side streams), waited
  // for before the files are written.
  std::unique_ptr<device::HostCopies> copies;
};

// How a save's files are staged: written as each layer is joined (the tensors may be the
// engine's own, and at most one layer's whole tensors exist at a time), or kept as host
// copies of their own, to be written while training changes the originals.
enum class Staging { kWriteNow, kHostCopies };

// Collective.
StagedSave stage_save(engine::PipelineEngine& engine, const std::filesystem::path& directory,
                      const std::string& tag, const nlohmann::json& client_state,
                      const engine::MicroBatchSource* data,
                      const std::vector<optim::ParameterState>* weights, Staging staging);

// This rank's files, then the host copies freed. No communication: safe on another thread.
void write_save(StagedSave& save);

// Collective over `world`: the manifest from every rank's files, then the folder published
// and `latest` moved to it.
void publish_save(StagedSave& save, comm::Communicator& world);

}  // namespace pipetrain::checkpoint
