#include "data/token_data.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>

#include "data/indexed_dataset.h"
#include "module/layer_seed.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::data {
namespace fs = std::filesystem;
namespace {

std::vector<fs::path> regular_files(const std::vector<std::string>& paths) {
  if (paths.empty()) throw io::InputError("data.paths: no files or folders given");
  std::vector<fs::path> files;
  for (const auto& path : paths) {
    if (!fs::exists(path)) throw io::InputError("data.paths: " + path + " does not exist");
    if (fs::is_regular_file(path)) {
      files.emplace_back(path);
      continue;
    }
    std::vector<fs::path> found;
    std::error_code error;
    const auto unreadable = [&] {
      return io::InputError("data.paths: " + path + " cannot be read: " + error.message());
    };
    fs::recursive_directory_iterator entries(path, error), end;
    if (error) throw unreadable();
    for (; entries != end; entries.increment(error)) {  // an error ends the walk
      const fs::directory_entry& entry = *entries;
      if (entry.is_regular_file(error) && !entry.is_symlink(error)) found.push_back(entry.path());
    }
    if (error) throw unreadable();
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  if (files.empty()) throw io::InputError("data.paths: no files found in " + paths.front());
  return files;
}

// The last `validation_fraction` of the stream is the validation part.
TokenCorpus split(std::shared_ptr<const TokenStream> tokens, int64_t vocab_size,
                  double validation_fraction, const std::string& source) {
  if (!(validation_fraction > 0 && validation_fraction < 1)) {
    throw io::InputError("data.validation_fraction must be between 0 and 1");
  }
  const int64_t n = tokens->size();
  const auto validation = static_cast<int64_t>(static_cast<double>(n) * validation_fraction);
  if (validation < 2 || n - validation < 2) {
    throw io::InputError(source + " holds " + std::to_string(n) +
                         " tokens, too few to split for training and validation");
  }
  return {{tokens, 0, n - validation}, {tokens, n - validation, validation}, vocab_size};
}

// The generator of sample `sample` of `stream`: counter-based, so any sample can be
// reproduced without drawing the ones before it.
// Samples past 2^31 mix in their high bits too, so no two samples share a generator.
at::Generator sample_generator(uint64_t seed, uint64_t stream, int64_t sample) {
  uint64_t state = module::layer_seed(module::layer_seed(seed, static_cast<int>(stream)),
                                      static_cast<int>(sample & 0x7fffffff));
  if (const int64_t high = sample >> 31; high > 0)
    state = module::layer_seed(state, static_cast<int>(high));
  return at::make_generator<at::CPUGeneratorImpl>(state);
}

}  // namespace

TokenCorpus text_corpus(const std::vector<std::string>& paths, double validation_fraction) {
  auto tokens = std::make_shared<MappedTokens>();  // a byte is a token
  for (const auto& file : regular_files(paths)) {
    tokens->add(std::make_unique<io::MappedFile>(file, io::MappedFile::Access::kRandom), 1,
                /*is_signed=*/false);
  }
  return split(tokens, 256, validation_fraction, "the text in " + paths.front());
}

TokenCorpus token_files(const std::vector<std::string>& paths, int bytes_per_token,
                        int64_t vocab_size, double validation_fraction) {
  if (bytes_per_token != 2 && bytes_per_token != 4)
    throw io::InputError("data.token_bytes must be 2 or 4");
  auto tokens = std::make_shared<MappedTokens>();
  for (const auto& file : regular_files(paths)) {
    auto mapped = std::make_unique<io::MappedFile>(file, io::MappedFile::Access::kRandom);
    const std::size_t bytes = mapped->size();
    if (bytes == 0 || bytes % static_cast<std::size_t>(bytes_per_token) != 0) {
      throw io::InputError(file.string() + ": " + std::to_string(bytes) +
                           " bytes is not a whole, non-zero number of " +
                           std::to_string(bytes_per_token) + "-byte tokens");
    }
    tokens->add(std::move(mapped), bytes_per_token, /*is_signed=*/false);  // unsigned on disk
  }
  tokens->check_vocabulary(vocab_size);
  return split(tokens, vocab_size, validation_fraction, "the token files in " + paths.front());
}

TokenCorpus indexed_corpus(const std::vector<std::string>& prefixes, int64_t vocab_size,
                           double validation_fraction, bool record_documents) {
  return split(std::make_shared<IndexedTokens>(prefixes, record_documents), vocab_size,
               validation_fraction,
               "the indexed dataset " + (prefixes.empty() ? std::string() : prefixes.front()));
}

SequenceSource::SequenceSource(TokenSpan tokens, int64_t vocab_size, int64_t context, int64_t batch,
                               uint64_t seed, uint64_t stream, SampleShare share,
                               DocumentSplit documents)
    : tokens_(std::move(tokens)),
      vocab_size_(vocab_size),
      context_(context),
      batch_(batch),
      seed_(seed),
      stream_(stream),
      documents_(documents),
      position_(batch, share) {
  if (documents_.by_index && !tokens_.stream->document_starts()) {
    throw std::invalid_argument(
        "SequenceSource: documents by index need a stream that records its documents");
  }
  if (tokens_.length < context_ + 2) {
    throw io::InputError("a sequence of " + std::to_string(context_ + 1) +
                         " tokens does not fit in " + std::to_string(tokens_.length) +
                         " tokens of data (lower model.context or add data)");
  }
}

engine::MicroBatch SequenceSource::next() {
  const int64_t high = tokens_.length - context_;
  at::Tensor starts = at::empty({batch_}, at::kLong);
  for (int64_t i = 0; i < batch_; ++i) {
    starts.data_ptr<int64_t>()[i] =
        at::randint(high, {1}, sample_generator(seed_, stream_, position_.sample(i)), at::kLong)
            .item<int64_t>();
  }
  position_.advance();
  at::Tensor windows = at::empty({batch_, context_ + 1}, at::kLong);
  for (int64_t b = 0; b < batch_; ++b) {
    tokens_.stream->read(tokens_.begin + starts.data_ptr<int64_t>()[b], context_ + 1, vocab_size_,
                         windows.data_ptr<int64_t>() + b * (context_ + 1));
  }
  const at::Tensor inputs = windows.narrow(1, 0, context_).contiguous();
  const at::Tensor labels = windows.narrow(1, 1, context_).contiguous();
  if (documents_.end_id) return {{inputs, documents_of(inputs, *documents_.end_id)}, {labels}};
  if (documents_.by_index) {
    const at::Tensor positions = starts + tokens_.begin;  // in the stream
    return {
        {inputs, documents_from_starts(positions, context_, *tokens_.stream->document_starts())},
        {labels}};
  }
  return {{inputs}, {labels}};
}

at::Tensor documents_of(const at::Tensor& ids, int64_t document_end) {
  const at::Tensor ends = (ids == document_end).to(at::kLong);
  return ends.cumsum(1) - ends;
}

at::Tensor documents_from_starts(const at::Tensor& starts, int64_t length,
                                 const std::vector<int64_t>& document_starts) {
  const int64_t batch = starts.size(0);
  at::Tensor documents = at::zeros({batch, length}, at::kLong);
  const at::Tensor first = starts.to(at::kLong).contiguous();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = first.data_ptr<int64_t>()[b];
    int64_t* row = documents.data_ptr<int64_t>() + b * length;
    // The first document start after the window's first position, and each one after it.
    auto next = std::upper_bound(document_starts.begin(), document_starts.end(), start);
    int64_t document = 0;
    for (int64_t i = 0; i < length; ++i) {
      while (next != document_starts.end() && *next <= start + i) {
        ++document;
        ++next;
      }
      row[i] = document;
    }
  }
  return documents;
}

RegressionSource::RegressionSource(int64_t inputs, int64_t outputs, int64_t batch, uint64_t seed,
                                   uint64_t stream, SampleShare share)
    : inputs_(inputs), batch_(batch), seed_(seed), stream_(stream), position_(batch, share) {
  auto teacher = at::make_generator<at::CPUGeneratorImpl>(seed);
  hidden_weight_ = at::randn({inputs, 32}, teacher) / std::sqrt(static_cast<double>(inputs));
  output_weight_ = at::randn({32, outputs}, teacher) / std::sqrt(32.0);
}

engine::MicroBatch RegressionSource::next() {
  // Row by row, so that a sample's target does not depend on the rows beside it.
  std::vector<at::Tensor> xs, ys;
  for (int64_t i = 0; i < batch_; ++i) {
    xs.push_back(at::rand({1, inputs_}, sample_generator(seed_, stream_, position_.sample(i))) * 2 -
                 1);
    ys.push_back(at::tanh(xs.back().matmul(hidden_weight_)).matmul(output_weight_));
  }
  position_.advance();
  return {{at::cat(xs)}, {at::cat(ys)}};
}

}  // namespace pipetrain::data
