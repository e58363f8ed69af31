#include <unistd.h>

#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "event_record.h"
#include "pipetrain/io/errors.h"
#include "tensorboard/tensorboard_writer.h"

namespace pipetrain::tensorboard {
namespace {

using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

// TFRecord stores CRC-32C rotated and offset ("masked").
uint32_t masked_crc(const char* data, std::size_t size) {
  Crc32c crc;
  crc.process_bytes(data, size);
  const uint32_t value = crc.checksum();
  return ((value >> 15) | (value << 17)) + 0xa282ead8u;
}

template <typename T>
std::string little_endian(T value) {
  std::string bytes(sizeof(T), '\0');
  for (std::size_t i = 0; i < sizeof(T); ++i)
    bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

template <typename T>
T from_little_endian(const std::string& bytes, std::size_t at) {
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<T>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return value;
}

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = directory /
          ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now())) + "." + host);
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_)
    throw io::InputError("log.tensorboard: cannot write " + path_.string() + ": " +
                         std::strerror(errno));
  write_record(encode_event({.wall_time = now(), .file_version = "brain.Event:2"}));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::map<std::string, double>& values) {
  Event event{.wall_time = now(), .step = step};
  for (const auto& [tag, value] : values)
    event.scalars.emplace_back(tag, static_cast<float>(value));
  write_record(encode_event(event));
  std::fflush(file_);
}

void TensorBoardWriter::write_record(const std::string& data) {
  const std::string length = little_endian<uint64_t>(data.size());
  const std::string record = length +
                             little_endian<uint32_t>(masked_crc(length.data(), length.size())) +
                             data + little_endian<uint32_t>(masked_crc(data.data(), data.size()));
  std::fwrite(record.data(), 1, record.size(), file_);
}

std::vector<ScalarEvent> read_tensorboard_scalars(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  const std::string bytes = contents.str();
  std::vector<ScalarEvent> scalars;
  for (std::size_t at = 0; at < bytes.size();) {
    if (at + 12 > bytes.size())
      throw std::runtime_error(file.string() + ": truncated record header");
    const uint64_t length = from_little_endian<uint64_t>(bytes, at);
    if (from_little_endian<uint32_t>(bytes, at + 8) != masked_crc(bytes.data() + at, 8)) {
      throw std::runtime_error(file.string() + ": bad length checksum");
    }
    if (at + 12 + length + 4 > bytes.size())
      throw std::runtime_error(file.string() + ": truncated record");
    const std::string data = bytes.substr(at + 12, length);
    if (from_little_endian<uint32_t>(bytes, at + 12 + length) !=
        masked_crc(data.data(), data.size())) {
      throw std::runtime_error(file.string() + ": bad data checksum");
    }
    const std::optional<Event> event = decode_event(data);
    if (!event) throw std::runtime_error(file.string() + ": a record is not an Event");
    for (const auto& [tag, value] : event->scalars) scalars.push_back({event->step, tag, value});
    at += 12 + length + 4;
  }
  return scalars;
}

}  // namespace pipetrain::tensorboard
