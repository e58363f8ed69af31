#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// The protobuf wire encoding of the part of TensorFlow's Event (event.proto, summary.proto)
// that scalar curves need, by hand: Event {double wall_time = 1; int64 step = 2; string
// file_version = 3; Summary summary = 5}, Summary {repeated Value value = 1}, Value
// {string tag = 1; float simple_value = 2}. Field numbers are TensorFlow's.
namespace pipetrain::tensorboard {

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;                            // the first record only
  std::vector<std::pair<std::string, float>> scalars;  // tag, value
};

std::string encode_event(const Event& event);

// Unknown fields are skipped; nullopt for bytes that are not a well-formed Event.
std::optional<Event> decode_event(std::string_view bytes);

}  // namespace pipetrain::tensorboard
