#include "data/token_stream.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "pipetrain/io/errors.h"

namespace pipetrain::data {

void MappedTokens::add(std::unique_ptr<io::MappedFile> file, int item_size, bool is_signed,
                       std::size_t skip) {
  const std::size_t bytes = file->size() > skip ? file->size() - skip : 0;
  const auto tokens = static_cast<int64_t>(bytes / static_cast<std::size_t>(item_size));
  if (tokens == 0) return;  // nothing to read, and no position of its own
  Mapped mapped;
  mapped.data = static_cast<const unsigned char*>(file->pages()) + skip;
  mapped.file = std::move(file);
  mapped.item_size = item_size;
  mapped.is_signed = is_signed;
  mapped.first = total_;
  mapped.tokens = tokens;
  total_ += tokens;
  files_.push_back(std::move(mapped));
}

int64_t MappedTokens::token_at(const Mapped& file, int64_t index) {
  const unsigned char* p = file.data + index * file.item_size;
  switch (file.item_size) {
    case 1:
      return file.is_signed ? static_cast<int8_t>(*p) : *p;
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return file.is_signed ? static_cast<int16_t>(v) : v;
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return file.is_signed ? static_cast<int32_t>(v) : static_cast<int64_t>(v);
    }
    default: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

void MappedTokens::read(int64_t start, int64_t count, int64_t vocab_size, int64_t* out) const {
  auto file =
      std::upper_bound(files_.begin(), files_.end(), start,
                       [](int64_t position, const Mapped& f) { return position < f.first; });
  --file;  // the last file starting at or before `start`
  for (int64_t i = 0; i < count; ++i) {
    while (start + i >= file->first + file->tokens) ++file;
    const int64_t index = start + i - file->first;
    const int64_t id = token_at(*file, index);
    if (id < 0 || id >= vocab_size) {
      throw io::InputError(file->file->path().string() + ": token " + std::to_string(index) +
                           " is " + std::to_string(id) + ", not in [0, model.vocab_size " +
                           std::to_string(vocab_size) + ")");
    }
    out[i] = id;
  }
}

void MappedTokens::check_vocabulary(int64_t vocab_size) const {
  constexpr int64_t kSlice = int64_t{1} << 20;
  std::vector<int64_t> ids(static_cast<std::size_t>(std::min(kSlice, total_)));
  for (int64_t start = 0; start < total_; start += kSlice)
    read(start, std::min(kSlice, total_ - start), vocab_size, ids.data());
}

}  // namespace pipetrain::data
