#include "checkpoint/background_save.h"

#include <ATen/ATen.h>

#include "pipetrain/io/errors.h"
#include "staged_save.h"

namespace pipetrain::checkpoint {

BackgroundSave::BackgroundSave(engine::PipelineEngine& engine, std::filesystem::path directory)
    : engine_(engine), directory_(std::move(directory)) {}

BackgroundSave::~BackgroundSave() {
  if (writer_.joinable()) writer_.join();
}

double BackgroundSave::start(const std::string& tag, const nlohmann::json& client_state,
                             const engine::MicroBatchSource* data) {
  const auto begin = std::chrono::steady_clock::now();
  finish();
  staged_ = std::make_unique<StagedSave>(
      stage_save(engine_, directory_, tag, client_state, data, nullptr, Staging::kHostCopies));
  written_ = false;
  failure_ = nullptr;
  writer_ = std::thread([this] {
    try {
      write_save(*staged_);
    } catch (...) {
      failure_ = std::current_exception();
    }
    written_ = true;
  });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

std::string BackgroundSave::poll() {
  if (!staged_) return "";
  at::Tensor writing = at::tensor({written_ ? int64_t{0} : int64_t{1}});
  engine_.grid().world_comm()->all_reduce(writing, comm::ReduceOp::kMax);
  return writing.item<int64_t>() == 0 ? publish() : "";
}

std::string BackgroundSave::finish() {
  return staged_ ? publish() : "";
}

std::string BackgroundSave::publish() {
  if (writer_.joinable()) writer_.join();
  auto& world = *engine_.grid().world_comm();
  const std::unique_ptr<StagedSave> save = std::move(staged_);
  std::string problem;
  if (failure_) {
    try {
      std::rethrow_exception(failure_);
    } catch (const std::exception& e) {
      problem = io::error_message(e);
    } catch (...) {
      problem = "an unknown error";
    }
  }
  for (const auto& found : comm::all_gather_text(world, problem)) {
    if (!found.empty())
      throw std::runtime_error("writing checkpoint " + save->tag + " failed: " + found);
  }
  publish_save(*save, world);
  return save->tag;
}

}  // namespace pipetrain::checkpoint
