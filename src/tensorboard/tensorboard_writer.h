#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace pipetrain::tensorboard {

// Scalars as TensorBoard event files (`tensorboard --logdir DIR` shows them): protobuf
// Event records, each framed by its length and masked CRC-32C as TFRecord requires.
class TensorBoardWriter {
 public:
  // Creates DIR and a new events.out.tfevents.<time>.<host> file in it.
  explicit TensorBoardWriter(const std::filesystem::path& directory);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalars(int64_t step, const std::map<std::string, double>& values);
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

struct ScalarEvent {
  int64_t step = 0;
  std::string tag;
  float value = 0;
};

// Reads an event file back, checking every record's CRCs; throws std::runtime_error for a
// damaged file. (Used by tests; also handy to inspect runs without TensorBoard.)
std::vector<ScalarEvent> read_tensorboard_scalars(const std::filesystem::path& file);

}  // namespace pipetrain::tensorboard
