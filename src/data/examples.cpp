#include "data/examples.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "data/indexed_dataset.h"
#include "io/crc32.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/tensor_parallel/token_reduction.h"

namespace pipetrain::data {
namespace fs = std::filesystem;
namespace {

std::string mask_of(const std::string& prefix) {
  return indexed_prefix(prefix) + ".mask";
}

// A mask file's header, as scripts/prepare_data.py writes it: magic, then the size (uint64)
// and CRC-32 (uint32) of the .bin it was made with, and 4 bytes kept. Files without one
// (written before it) are read whole, unchecked.
constexpr std::string_view kMaskMagic{"PTMASK01", 8};
constexpr std::size_t kMaskHeader = 24;

// The header's length in `mask`'s file (0 without one), checked against PREFIX.bin.
std::size_t mask_header(const std::string& prefix, std::string_view mask) {
  if (mask.substr(0, kMaskMagic.size()) != kMaskMagic) return 0;
  const std::string bin = indexed_prefix(prefix) + ".bin";
  if (mask.size() < kMaskHeader)
    throw io::InputError(mask_of(prefix) + ": its header is cut short");
  uint64_t size = 0;
  uint32_t crc = 0;
  std::memcpy(&size, mask.data() + 8, sizeof size);  // little-endian, as every host here
  std::memcpy(&crc, mask.data() + 16, sizeof crc);
  const io::MappedFile tokens(bin, io::MappedFile::Access::kSequential);
  if (tokens.size() != size || io::crc32(tokens.bytes()) != crc) {
    throw io::InputError(mask_of(prefix) + " was made with another " + bin +
                         " (another prepare-data run): prepare them again together");
  }
  return kMaskHeader;
}

// The masks, one byte per token, checked to match the tokens (file by file once they
// differ, to name the file).
std::shared_ptr<MappedTokens> mapped_masks(const std::vector<std::string>& prefixes,
                                           const IndexedTokens& tokens) {
  auto masks = std::make_shared<MappedTokens>();
  std::vector<int64_t> sizes;  // each file's masks
  for (const auto& prefix : prefixes) {
    auto file = std::make_unique<io::MappedFile>(mask_of(prefix), io::MappedFile::Access::kRandom);
    const std::size_t header = mask_header(prefix, file->bytes());
    const std::string_view bytes = file->bytes().substr(header);
    const auto bad =
        std::find_if(bytes.begin(), bytes.end(), [](char b) { return b != 0 && b != 1; });
    if (bad != bytes.end()) {
      throw io::InputError(mask_of(prefix) + ": byte " +
                           std::to_string(bad - bytes.begin() + static_cast<long>(header)) +
                           " is " + std::to_string(static_cast<unsigned char>(*bad)) +
                           ", not a loss mask (0 or 1)");
    }
    sizes.push_back(static_cast<int64_t>(bytes.size()));
    masks->add(std::move(file), 1, /*is_signed=*/false, header);
  }
  if (masks->size() == tokens.size()) return masks;
  for (std::size_t i = 0; i < prefixes.size(); ++i) {
    const int64_t own_tokens = IndexedTokens({prefixes[i]}).size();
    if (sizes[i] != own_tokens) {
      throw io::InputError(mask_of(prefixes[i]) + " holds " + std::to_string(sizes[i]) +
                           " masks for the " + std::to_string(own_tokens) + " tokens of " +
                           indexed_prefix(prefixes[i]) + ".bin (prepare them again together)");
    }
  }
  throw std::logic_error("masks and tokens differ in size, but no file's do");
}

// Each example's tokens in the stream: the indexed datasets' documents.
std::vector<ExampleSpan> example_spans(const IndexedTokens& tokens) {
  std::vector<ExampleSpan> spans;
  int64_t begin = 0;
  for (const int64_t start : *tokens.document_starts()) {
    if (start > begin) spans.push_back({begin, start});
    begin = start;
  }
  if (tokens.size() > begin) spans.push_back({begin, tokens.size()});
  return spans;
}

// One example per row, or with `pack` as many consecutive ones as fit in `length` tokens;
// an example longer than `length` is cut to it.
std::vector<Row> rows_of(const std::vector<ExampleSpan>& spans, int64_t length, bool pack) {
  std::vector<Row> rows;
  int64_t used = 0;
  for (ExampleSpan span : spans) {
    span.end = std::min(span.end, span.begin + length);
    const int64_t tokens = span.end - span.begin;
    if (pack && !rows.empty() && used + tokens <= length) {
      rows.back().push_back(span);
      used += tokens;
    } else {
      rows.push_back({span});
      used = tokens;
    }
  }
  return rows;
}

// Tokens the loss counts in `spans` (mask 1), an example's first excepted (nothing before
// it predicts it).
int64_t trained_tokens(const TokenStream& masks, const std::vector<ExampleSpan>& spans,
                       int64_t length) {
  int64_t trained = 0;
  std::vector<int64_t> bits;
  for (const ExampleSpan& span : spans) {
    const int64_t tokens = std::min(span.end - span.begin, length);
    bits.resize(static_cast<std::size_t>(tokens));
    masks.read(span.begin, tokens, 2, bits.data());
    for (std::size_t i = 1; i < bits.size(); ++i) trained += bits[i];
  }
  return trained;
}

}  // namespace

bool has_loss_masks(const std::vector<std::string>& prefixes) {
  std::optional<std::string> with, without;
  for (const auto& prefix : prefixes) {
    (fs::exists(mask_of(prefix)) ? with : without) = prefix;
    if (with && without) {
      throw io::InputError("data.paths: " + indexed_prefix(*without) + " has no loss masks (" +
                           mask_of(*without) + ") but " + indexed_prefix(*with) +
                           " has: mix fine-tuning examples only with examples");
    }
  }
  return with.has_value();
}

ExampleList read_examples(const std::vector<std::string>& prefixes, int64_t vocab_size) {
  auto tokens = std::make_shared<IndexedTokens>(prefixes, /*record_documents=*/true);
  ExampleList list;
  list.masks = mapped_masks(prefixes, *tokens);
  tokens->check_vocabulary(vocab_size);
  list.spans = example_spans(*tokens);
  list.tokens = std::move(tokens);
  return list;
}

ExampleCorpus example_corpus(const std::vector<std::string>& prefixes, int64_t vocab_size,
                             int64_t context, bool pack, double validation_fraction) {
  if (!(validation_fraction > 0 && validation_fraction < 1))
    throw io::InputError("data.validation_fraction must be between 0 and 1");
  ExampleList list = read_examples(prefixes, vocab_size);
  ExampleCorpus corpus;
  corpus.masks = std::move(list.masks);
  const std::vector<ExampleSpan>& spans = list.spans;
  const int64_t length = context + 1;
  corpus.examples = static_cast<int64_t>(spans.size());
  const auto held_out = std::max<int64_t>(
      1,
      static_cast<int64_t>(std::ceil(static_cast<double>(corpus.examples) * validation_fraction)));
  if (corpus.examples - held_out < 1) {
    throw io::InputError("the examples in " + indexed_prefix(prefixes.front()) + " number " +
                         std::to_string(corpus.examples) +
                         ", too few to hold some out for validation and train on the rest");
  }
  const auto split = spans.end() - held_out;
  corpus.train = rows_of({spans.begin(), split}, length, pack);
  corpus.validation = rows_of({split, spans.end()}, length, pack);
  for (const ExampleSpan& span : spans) {
    corpus.truncated += span.end - span.begin > length;
    corpus.token_count += std::min(span.end - span.begin, length);
  }
  const int64_t trained = trained_tokens(*corpus.masks, {spans.begin(), split}, length);
  const int64_t validated = trained_tokens(*corpus.masks, {split, spans.end()}, length);
  for (const bool validation : {false, true}) {
    if ((validation ? validated : trained) > 0) continue;
    throw io::InputError(std::string("the ") + (validation ? "validation" : "training") +
                         " examples in " + indexed_prefix(prefixes.front()) +
                         " have no token the loss counts (their loss masks are all 0 past each "
                         "example's first token): nothing to " +
                         (validation ? "validate on" : "train on"));
  }
  corpus.trained_count = trained + validated;
  corpus.tokens = std::move(list.tokens);
  return corpus;
}

ExampleSource::ExampleSource(std::shared_ptr<const ExampleCorpus> corpus, bool validation,
                             int64_t vocab_size, int64_t context, int64_t batch, uint64_t seed,
                             uint64_t stream, SampleShare share, bool pack)
    : corpus_(std::move(corpus)),
      rows_(validation ? corpus_->validation : corpus_->train),
      vocab_size_(vocab_size),
      context_(context),
      batch_(batch),
      pack_(pack),
      position_(batch, share),
      order_(seed, stream, static_cast<int64_t>(rows_.size())) {}

const Row& ExampleSource::row_of_sample(int64_t sample) {
  return rows_[static_cast<std::size_t>(order_.item_of(sample))];
}

void fill_row(const TokenStream& token_stream, const TokenStream& mask_stream, const Row& row,
              int64_t vocab_size, int64_t context, int64_t* ids, int64_t* labels,
              int64_t* documents) {
  const int64_t length = context + 1;
  std::vector<int64_t> tokens(static_cast<std::size_t>(length), 0), masks(tokens.size(), 0);
  std::vector<bool> ends(tokens.size(), false);  // an example's last token
  int64_t used = 0, document = 0;
  for (const ExampleSpan& span : row) {
    const int64_t count = std::min(span.end - span.begin, length - used);
    token_stream.read(span.begin, count, vocab_size, tokens.data() + used);
    mask_stream.read(span.begin, count, 2, masks.data() + used);
    for (int64_t i = used; i < used + count && i < context; ++i) documents[i] = document;
    used += count;
    ends[static_cast<std::size_t>(used - 1)] = true;
    ++document;
  }
  for (int64_t i = used; i < context; ++i) documents[i] = document;  // the padding's own
  for (int64_t i = 0; i < context; ++i) {
    const auto at = static_cast<std::size_t>(i);
    ids[i] = tokens[at];
    // Position i predicts token i + 1: counted where that token is trained, in its example.
    labels[i] = i + 1 < used && !ends[at] && masks[at + 1] == 1 ? tokens[at + 1]
                                                                : tensor_parallel::kIgnoreIndex;
  }
}

engine::MicroBatch ExampleSource::next() {
  at::Tensor ids = at::empty({batch_, context_}, at::kLong);
  at::Tensor labels = at::empty({batch_, context_}, at::kLong);
  at::Tensor documents = at::empty({batch_, context_}, at::kLong);
  for (int64_t i = 0; i < batch_; ++i) {
    fill_row(*corpus_->tokens, *corpus_->masks, row_of_sample(position_.sample(i)), vocab_size_,
             context_, ids.data_ptr<int64_t>() + i * context_,
             labels.data_ptr<int64_t>() + i * context_,
             documents.data_ptr<int64_t>() + i * context_);
  }
  position_.advance();
  if (pack_) return {{ids, documents}, {labels}};
  return {{ids}, {labels}};
}

}  // namespace pipetrain::data
