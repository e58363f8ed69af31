#include "data/indexed_dataset.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "pipetrain/io/errors.h"

namespace pipetrain::data {
namespace {

constexpr char kMagic[] = "MMIDIDX\0\0";  // the first 9 bytes of an .idx
constexpr std::size_t kMagicBytes = 9;
constexpr std::size_t kHeaderBytes = kMagicBytes + 8 + 1 + 8 + 8;

struct TokenType {
  int item_size = 0;
  bool is_signed = false;
};

// Megatron's DType codes; floats are no token ids.
TokenType token_type(int code, const std::string& idx) {
  switch (code) {
    case 1:
      return {1, false};  // uint8
    case 2:
      return {1, true};  // int8
    case 3:
      return {2, true};  // int16
    case 4:
      return {4, true};  // int32
    case 5:
      return {8, true};  // int64
    case 8:
      return {2, false};  // uint16
    case 6:
    case 7:
      throw io::InputError(idx + ": dtype code " + std::to_string(code) +
                           " is a floating-point type, not token ids");
    default:
      throw io::InputError(idx + ": unknown dtype code " + std::to_string(code));
  }
}

// Little-endian reads from the .idx (this machine is little-endian, as Megatron assumes).
template <typename T>
T at(std::string_view bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

// What one .idx says of its .bin (checked against the .bin's size): the ids' type and the
// documents.
struct Index {
  TokenType type;
  int64_t documents = 0;
  std::vector<int64_t> document_starts;  // in tokens from the file's start, 0 included
};

Index read_index(const std::string& idx, uint64_t bin_bytes, bool record_documents) {
  const io::MappedFile mapped(idx, io::MappedFile::Access::kSequential);
  const std::string_view bytes = mapped.bytes();
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0)
    throw io::InputError(idx + ": not a Megatron indexed dataset index (no MMIDIDX header)");
  if (const auto version = at<uint64_t>(bytes, kMagicBytes); version != 1)
    throw io::InputError(idx + ": index version " + std::to_string(version) + ", only 1 is read");
  Index index;
  index.type = token_type(static_cast<unsigned char>(bytes[kMagicBytes + 8]), idx);
  const auto sequences = at<uint64_t>(bytes, kMagicBytes + 9);
  const auto document_entries = at<uint64_t>(bytes, kMagicBytes + 17);
  const uint64_t room = bytes.size() - kHeaderBytes;
  if (sequences > room / 12 || document_entries > room / 8 ||
      (room - sequences * 12) / 8 < document_entries) {
    throw io::InputError(idx + ": " + std::to_string(sequences) + " sequences and " +
                         std::to_string(document_entries) + " document entries do not fit in its " +
                         std::to_string(bytes.size()) + " bytes");
  }
  const uint64_t expected = kHeaderBytes + sequences * 12 + document_entries * 8;
  if (bytes.size() != expected && bytes.size() != expected + sequences) {  // + multimodal modes
    throw io::InputError(idx + ": " + std::to_string(bytes.size()) +
                         " bytes, its counts call for " + std::to_string(expected));
  }
  const std::size_t lengths = kHeaderBytes;
  const std::size_t pointers = lengths + sequences * 4;
  const std::size_t documents = pointers + sequences * 8;
  const auto item = static_cast<uint64_t>(index.type.item_size);
  uint64_t next = 0;  // where the next sequence must start in the .bin
  for (uint64_t i = 0; i < sequences; ++i) {
    const auto length = at<int32_t>(bytes, lengths + i * 4);
    const auto pointer = at<int64_t>(bytes, pointers + i * 8);
    const std::string sequence = "sequence " + std::to_string(i) + " (offset " +
                                 std::to_string(pointer) + ", " + std::to_string(length) +
                                 " tokens)";
    if (length < 0 || pointer < 0 || static_cast<uint64_t>(pointer) != next)
      throw io::InputError(idx + ": " + sequence + " does not follow the one before it");
    if (static_cast<uint64_t>(length) * item > bin_bytes - next) {
      throw io::InputError(idx + ": " + sequence + " ends beyond the " + std::to_string(bin_bytes) +
                           "-byte .bin (truncated or mismatched)");
    }
    next += static_cast<uint64_t>(length) * item;
  }
  if (next != bin_bytes) {
    throw io::InputError(idx + ": its sequences hold " + std::to_string(next) +
                         " bytes, the .bin " + std::to_string(bin_bytes) +
                         " (truncated or mismatched)");
  }
  int64_t previous = 0;
  for (uint64_t d = 0; d < document_entries; ++d) {
    const auto boundary = at<int64_t>(bytes, documents + d * 8);
    if ((d == 0 && boundary != 0) || boundary < previous ||
        static_cast<uint64_t>(boundary) > sequences) {
      throw io::InputError(idx + ": document index entry " + std::to_string(d) + " is " +
                           std::to_string(boundary) + ", not a sequence boundary in order");
    }
    previous = boundary;
    // A document starts where its first sequence does (the last entry ends the last one).
    if (record_documents && d + 1 < document_entries) {
      const auto b = static_cast<uint64_t>(boundary);
      const uint64_t offset =
          b < sequences ? static_cast<uint64_t>(at<int64_t>(bytes, pointers + b * 8)) : next;
      index.document_starts.push_back(static_cast<int64_t>(offset / item));
    }
  }
  index.documents = document_entries > 0 ? static_cast<int64_t>(document_entries) - 1 : 0;
  return index;
}

}  // namespace

std::string indexed_prefix(std::string path) {
  for (const char* suffix : {".bin", ".idx"}) {
    const std::size_t n = std::strlen(suffix);
    if (path.size() > n && path.compare(path.size() - n, n, suffix) == 0)
      path.resize(path.size() - n);
  }
  return path;
}

IndexedTokens::IndexedTokens(const std::vector<std::string>& prefixes, bool record_documents)
    : record_documents_(record_documents) {
  if (prefixes.empty()) throw io::InputError("data.paths: no indexed dataset prefixes given");
  for (const auto& given : prefixes) {
    const std::string prefix = indexed_prefix(given);
    auto bin = std::make_unique<io::MappedFile>(prefix + ".bin", io::MappedFile::Access::kRandom);
    const Index index = read_index(prefix + ".idx", bin->size(), record_documents);
    const int64_t first = size();  // this file's first token in the stream
    add(std::move(bin), index.type.item_size, index.type.is_signed);
    documents_ += index.documents;
    for (const int64_t start : index.document_starts) {
      if (first + start > 0) document_starts_.push_back(first + start);  // the stream's start
    }
  }
}

}  // namespace pipetrain::data
