#include "event_record.h"

#include <cstring>

namespace pipetrain::tensorboard {
namespace {

enum WireType : uint64_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

void varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7f) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

// A field's key on the wire: its number and its wire type.
constexpr uint64_t field_key(int field, WireType type) {
  return (static_cast<uint64_t>(field) << 3) | type;
}

void key(std::string& out, int field, WireType type) {
  varint(out, field_key(field, type));
}

template <typename T>
void fixed(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts, as protobuf's wire format
  out.append(bytes, sizeof(T));
}

void length_delimited(std::string& out, int field, std::string_view bytes) {
  key(out, field, kLength);
  varint(out, bytes.size());
  out.append(bytes);
}

// Reads fields one by one; every read fails (returns false) past the end.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return at_ == bytes_.size(); }

  bool varint(uint64_t& value) {
    value = 0;
    for (int shift = 0; shift < 64 && at_ < bytes_.size(); shift += 7) {
      const auto byte = static_cast<unsigned char>(bytes_[at_++]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return true;
    }
    return false;
  }
  template <typename T>
  bool fixed(T& value) {
    if (bytes_.size() - at_ < sizeof(T)) return false;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool length_delimited(std::string_view& value) {
    uint64_t size = 0;
    if (!varint(size) || size > bytes_.size() - at_) return false;
    value = bytes_.substr(at_, size);
    at_ += size;
    return true;
  }
  bool skip(uint64_t type) {
    uint64_t ignored = 0;
    std::string_view span;
    switch (type) {
      case kVarint:
        return varint(ignored);
      case kFixed64:
        return fixed(ignored);
      case kLength:
        return length_delimited(span);
      case kFixed32: {
        uint32_t word = 0;
        return fixed(word);
      }
      default:
        return false;
    }
  }

 private:
  std::string_view bytes_;
  std::size_t at_ = 0;
};

std::optional<std::pair<std::string, float>> decode_value(std::string_view bytes) {
  Reader in(bytes);
  std::pair<std::string, float> value{"", 0.0f};
  while (!in.done()) {
    uint64_t k = 0;
    std::string_view tag;
    if (!in.varint(k)) return std::nullopt;
    bool ok = true;
    switch (k) {
      case field_key(1, kLength):
        ok = in.length_delimited(tag);
        value.first = tag;
        break;
      case field_key(2, kFixed32):
        ok = in.fixed(value.second);
        break;
      default:
        ok = in.skip(k & 7);
    }
    if (!ok) return std::nullopt;
  }
  return value;
}

bool decode_summary(std::string_view bytes, Event& event) {
  Reader in(bytes);
  while (!in.done()) {
    uint64_t k = 0;
    std::string_view span;
    if (!in.varint(k)) return false;
    if (k != field_key(1, kLength)) {
      if (!in.skip(k & 7)) return false;
      continue;
    }
    if (!in.length_delimited(span)) return false;
    const auto value = decode_value(span);
    if (!value) return false;
    event.scalars.push_back(*value);
  }
  return true;
}

}  // namespace

std::string encode_event(const Event& event) {
  std::string out;
  key(out, 1, kFixed64);
  fixed(out, event.wall_time);
  if (event.step != 0) {
    key(out, 2, kVarint);
    varint(out, static_cast<uint64_t>(event.step));
  }
  if (!event.file_version.empty()) length_delimited(out, 3, event.file_version);
  if (!event.scalars.empty()) {
    std::string summary;
    for (const auto& [tag, value] : event.scalars) {
      std::string entry;
      length_delimited(entry, 1, tag);
      key(entry, 2, kFixed32);
      fixed(entry, value);
      length_delimited(summary, 1, entry);
    }
    length_delimited(out, 5, summary);
  }
  return out;
}

std::optional<Event> decode_event(std::string_view bytes) {
  Reader in(bytes);
  Event event;
  while (!in.done()) {
    uint64_t k = 0, step = 0;
    std::string_view span;
    if (!in.varint(k)) return std::nullopt;
    bool ok = true;
    switch (k) {
      case field_key(1, kFixed64):
        ok = in.fixed(event.wall_time);
        break;
      case field_key(2, kVarint):
        ok = in.varint(step);
        event.step = static_cast<int64_t>(step);
        break;
      case field_key(3, kLength):
        ok = in.length_delimited(span);
        event.file_version = span;
        break;
      case field_key(5, kLength):
        ok = in.length_delimited(span) && decode_summary(span, event);
        break;
      default:
        ok = in.skip(k & 7);
    }
    if (!ok) return std::nullopt;
  }
  return event;
}

}  // namespace pipetrain::tensorboard
