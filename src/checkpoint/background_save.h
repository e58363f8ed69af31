#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "pipetrain/engine/micro_batch_source.h"
#include "pipetrain/engine/pipeline_engine.h"

namespace pipetrain::checkpoint {

struct StagedSave;

// Checkpoints written while training goes on (torchtitan's async_save, Megatron's
// asynchronous saving): at the step boundary each rank copies its part of the state (whole
// layers, optimizer state, random state; the data position and step in the manifest) to
// host memory, then a thread of its own writes the files while the next steps run.
// `latest` moves only once every rank's files are complete: a rank that dies mid-write
// leaves the previous checkpoint loadable. At most one save is in flight.
class BackgroundSave {
 public:
  BackgroundSave(engine::PipelineEngine& engine, std::filesystem::path directory);
  // Waits for this rank's write in flight, without publishing it (an exception ends the
  // job: the folder stays unpublished, the previous `latest` stands).
  ~BackgroundSave();
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  // Collective. Finishes a save in flight (waiting for it), then stages `tag` and starts
  // writing it. Returns the seconds the caller was held: the wait and the copies.
  double start(const std::string& tag, const nlohmann::json& client_state,
               const engine::MicroBatchSource* data);
  // Collective, once per step: publishes the save in flight when every rank has written
  // its files; returns its tag then, else "". One small all-reduce while a save is in flight.
  std::string poll();
  // Collective: waits for the save in flight, publishes it, returns its tag ("" if none).
  std::string finish();
  bool in_flight() const { return static_cast<bool>(staged_); }

 private:
  // Collective: this rank's write waited for, every rank's failure learnt, then published.
  std::string publish();

  engine::PipelineEngine& engine_;
  std::filesystem::path directory_;
  std::unique_ptr<StagedSave> staged_;
  std::thread writer_;
  std::atomic<bool> written_{false};
  std::exception_ptr failure_;
};

}  // namespace pipetrain::checkpoint
