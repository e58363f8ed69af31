#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>

#include "pipetrain/comm/tensor_list.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::engine {

struct MicroBatch {
  comm::TensorList inputs;  // what the first stage feeds in
  comm::TensorList labels;  // what the last stage's loss compares with
};

class DataExhausted : public std::runtime_error {
 public:
  DataExhausted() : std::runtime_error("the data ran out") {}
};

// Where the engine takes micro-batches from; next() throws DataExhausted at the end.
class MicroBatchSource {
 public:
  virtual ~MicroBatchSource() = default;
  virtual MicroBatch next() = 0;
  // Where the source stands, for checkpoints (null: it cannot resume), and going back
  // there; restore() throws InputError for a state it cannot take.
  virtual nlohmann::json state() const { return nullptr; }
  virtual void restore(const nlohmann::json& /*state*/) {
    throw io::InputError("this data source cannot resume from a checkpoint");
  }
};

}  // namespace pipetrain::engine
