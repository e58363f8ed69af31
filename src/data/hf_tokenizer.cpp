// Hugging Face tokenizer.json files with a BPE model: GPT-2's byte-level tokenizers, the
// LLaMA-3 kind (a split regex before the byte level) and the SentencePiece conversions of
// LLaMA-2 and Mistral (metaspace, byte fallback). Each stage is read as the `tokenizers`
// library runs it (its Rust sources are the reference), the post-processor too
// (post_processor.h); a stage of another kind, or a field it does not apply, is refused with
// its field named.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/bpe_model.h"
#include "data/byte_level.h"
#include "data/post_processor.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "pipetrain/config/config_section.h"
#include "pipetrain/io/errors.h"
#include "unicode_normalization.h"
#include "unicode_regex.h"

namespace pipetrain::data {
namespace {

const std::string kReplacementCharacter = "\xEF\xBF\xBD";

// A stretch of text on its way to the model; `at_start`: it begins the input (the
// "first" prepend scheme marks only that one).
struct Piece {
  std::string text;
  bool at_start = false;
};
using Pieces = std::vector<Piece>;

using Normalizer = std::function<std::string(std::string)>;
using PreTokenizer = std::function<Pieces(const Piece&)>;
using Decoder = std::function<std::vector<std::string>(std::vector<std::string>)>;

// Reads one stage of a tokenizer.json, naming `field` in its errors.
class StageReader {
 public:
  explicit StageReader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw io::InputError(source_ + ": " + field + " " + what);
  }
  std::string type(const nlohmann::json& stage, const std::string& field) const {
    if (!stage.is_object() || !stage.contains("type") || !stage["type"].is_string())
      fail(field, "has no type");
    return stage["type"].get<std::string>();
  }
  std::string text(const nlohmann::json& stage, const std::string& field,
                   const std::string& key) const {
    if (!stage.contains(key) || !stage[key].is_string()) fail(field + "." + key, "must be text");
    return stage[key].get<std::string>();
  }
  // A true/false key; absent or null: `fallback`.
  bool flag(const nlohmann::json& stage, const std::string& field, const std::string& key,
            bool fallback) const {
    if (!stage.contains(key) || stage[key].is_null()) return fallback;
    if (!stage[key].is_boolean()) fail(field + "." + key, "must be true or false");
    return stage[key].get<bool>();
  }
  // A count: an integer of at least 0; absent: 0.
  size_t count(const nlohmann::json& stage, const std::string& field,
               const std::string& key) const {
    if (!stage.contains(key)) return 0;
    if (!stage[key].is_number_integer() || stage[key].get<int64_t>() < 0)
      fail(field + "." + key, "must be an integer of at least 0");
    return stage[key].get<size_t>();
  }
  // Text of exactly one character (the library's `char`).
  std::string character(const nlohmann::json& stage, const std::string& field,
                        const std::string& key) const {
    const std::string value = text(stage, field, key);
    if (value.empty() || next_character(value, 0) != value.size())
      fail(field + "." + key, "must be one character");
    return value;
  }
  // A literal pattern, {"String": s}.
  std::string literal(const nlohmann::json& stage, const std::string& field) const {
    const nlohmann::json pattern = stage.value("pattern", nlohmann::json());
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string())
      fail(field + ".pattern", "must be {\"String\": ...} (regex replacements are not supported)");
    return pattern["String"].get<std::string>();
  }
  const std::string& source() const { return source_; }

  // The stages a Sequence lists under `key`, each read by `read(stage, field, reader)`.
  template <typename Step, typename Read>
  std::vector<Step> sequence(const nlohmann::json& stage, const std::string& field,
                             const std::string& key, Read read) const {
    const nlohmann::json list = stage.value(key, nlohmann::json::array());
    if (!list.is_array()) fail(field + "." + key, "must be a list");
    std::vector<Step> steps;
    for (size_t i = 0; i < list.size(); ++i)
      steps.push_back(read(list[i], field + "." + key + "[" + std::to_string(i) + "]", *this));
    return steps;
  }

 private:
  std::string source_;
};

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

Normalizer read_normalizer(const nlohmann::json& stage, const std::string& field,
                           const StageReader& reader) {
  if (stage.is_null()) return [](std::string text) { return text; };
  const std::string type = reader.type(stage, field);
  if (type == "Sequence") {
    const auto steps = reader.sequence<Normalizer>(stage, field, "normalizers", read_normalizer);
    return [steps](std::string text) {
      for (const auto& step : steps) text = step(std::move(text));
      return text;
    };
  }
  if (type == "Prepend") {
    const std::string prefix = reader.text(stage, field, "prepend");
    return [prefix](std::string text) { return text.empty() ? text : prefix + text; };
  }
  if (type == "Replace") {
    const std::string from = reader.literal(stage, field);
    const std::string to = reader.text(stage, field, "content");
    return [from, to](std::string text) { return replace_all(std::move(text), from, to); };
  }
  // Unicode normal forms (Qwen's tokenizers: NFC).
  for (const auto& [name, form] :
       {std::pair{"NFC", NormalForm::kNfc}, std::pair{"NFD", NormalForm::kNfd},
        std::pair{"NFKC", NormalForm::kNfkc}, std::pair{"NFKD", NormalForm::kNfkd}}) {
    if (type == name) return [form](std::string text) { return normalize_unicode(text, form); };
  }
  reader.fail(field + ".type", "\"" + type +
                                   "\" is not supported (Sequence, Prepend, Replace, NFC, NFD, "
                                   "NFKC, NFKD)");
}

// Byte ranges [begin, end) of `text` cut by `separators`: kept as pieces of their own
// (`isolated`), dropped, or each starting the piece after it (`merged_with_next`).
enum class Delimiter { kIsolated, kRemoved, kMergedWithNext };
Pieces split_at(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& separators,
                Delimiter delimiter) {
  Pieces pieces;
  const auto add = [&](size_t begin, size_t end) {
    if (end > begin)
      pieces.push_back(
          {piece.text.substr(begin, end - begin), piece.at_start && pieces.empty() && begin == 0});
  };
  size_t done = 0;
  for (const auto& [begin, end] : separators) {
    if (delimiter == Delimiter::kMergedWithNext) {
      add(done, begin);
      done = begin;
      continue;
    }
    add(done, begin);
    if (delimiter == Delimiter::kIsolated) add(begin, end);
    done = end;
  }
  add(done, piece.text.size());
  return pieces;
}

std::vector<std::pair<size_t, size_t>> literal_matches(const std::string& text,
                                                       const std::string& literal) {
  std::vector<std::pair<size_t, size_t>> found;
  if (literal.empty()) return found;
  for (size_t at = text.find(literal); at != std::string::npos;
       at = text.find(literal, at + literal.size()))
    found.emplace_back(at, at + literal.size());
  return found;
}

PreTokenizer read_split(const nlohmann::json& stage, const std::string& field,
                        const StageReader& reader) {
  const std::string behavior = reader.text(stage, field, "behavior");
  if (behavior != "Isolated" && behavior != "Removed")
    reader.fail(field + ".behavior", "\"" + behavior + "\" is not supported (Isolated, Removed)");
  if (reader.flag(stage, field, "invert", false))
    reader.fail(field + ".invert", "true is not supported");
  const Delimiter delimiter = behavior == "Isolated" ? Delimiter::kIsolated : Delimiter::kRemoved;
  const nlohmann::json pattern = stage.value("pattern", nlohmann::json());
  if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
    auto regex = std::make_shared<UnicodeRegex>(pattern["Regex"].get<std::string>(),
                                                reader.source() + ": " + field + ".pattern");
    return [regex, delimiter](const Piece& piece) {
      return split_at(piece, regex->matches(piece.text), delimiter);
    };
  }
  const std::string literal = reader.literal(stage, field);
  return [literal, delimiter](const Piece& piece) {
    return split_at(piece, literal_matches(piece.text, literal), delimiter);
  };
}

PreTokenizer read_byte_level(const nlohmann::json& stage, const std::string& field,
                             const StageReader& reader) {
  const bool prefix_space = reader.flag(stage, field, "add_prefix_space", true);
  std::shared_ptr<UnicodeRegex> regex;
  if (reader.flag(stage, field, "use_regex", true))
    regex = std::make_shared<UnicodeRegex>(kGpt2Pattern, "GPT-2's pre-tokenizer");
  return [prefix_space, regex](const Piece& original) {
    if (original.text.empty()) return Pieces{};
    Piece piece = original;
    if (prefix_space && piece.text[0] != ' ') piece.text = ' ' + piece.text;
    Pieces pieces =
        regex ? split_at(piece, regex->matches(piece.text), Delimiter::kIsolated) : Pieces{piece};
    for (Piece& p : pieces) p.text = bytes_to_unicode(p.text);
    return pieces;
  };
}

enum class Prepend { kAlways, kFirst, kNever };

Prepend read_prepend_scheme(const nlohmann::json& stage, const std::string& field,
                            const StageReader& reader) {
  const std::string scheme =
      stage.contains("prepend_scheme") ? reader.text(stage, field, "prepend_scheme") : "always";
  const Prepend prepend = scheme == "always"  ? Prepend::kAlways
                          : scheme == "first" ? Prepend::kFirst
                          : scheme == "never"
                              ? Prepend::kNever
                              : throw io::InputError(reader.source() + ": " + field +
                                                     ".prepend_scheme must be \"always\", "
                                                     "\"first\" or \"never\"");
  // The older spelling; the library refuses it where it contradicts the scheme.
  if (!reader.flag(stage, field, "add_prefix_space", true) && prepend != Prepend::kNever)
    reader.fail(field + ".add_prefix_space", "false contradicts prepend_scheme \"" + scheme + "\"");
  return prepend;
}

PreTokenizer read_metaspace(const nlohmann::json& stage, const std::string& field,
                            const StageReader& reader) {
  const std::string replacement = reader.character(stage, field, "replacement");
  const Prepend prepend = read_prepend_scheme(stage, field, reader);
  const bool split = reader.flag(stage, field, "split", true);
  return [replacement, prepend, split](const Piece& original) {
    Piece piece{replace_all(original.text, " ", replacement), original.at_start};
    const bool starts = piece.text.compare(0, replacement.size(), replacement) == 0;
    if (!starts && (prepend == Prepend::kAlways || (prepend == Prepend::kFirst && piece.at_start)))
      piece.text.insert(0, replacement);
    if (!split) return Pieces{piece};
    return split_at(piece, literal_matches(piece.text, replacement), Delimiter::kMergedWithNext);
  };
}

PreTokenizer read_pre_tokenizer(const nlohmann::json& stage, const std::string& field,
                                const StageReader& reader) {
  if (stage.is_null()) return [](const Piece& piece) { return Pieces{piece}; };
  const std::string type = reader.type(stage, field);
  if (type == "Sequence") {
    const auto steps =
        reader.sequence<PreTokenizer>(stage, field, "pretokenizers", read_pre_tokenizer);
    return [steps](const Piece& piece) {
      Pieces pieces{piece};
      for (const auto& step : steps) {
        Pieces next;
        for (const Piece& p : pieces) {
          for (Piece& q : step(p)) next.push_back(std::move(q));
        }
        pieces = std::move(next);
      }
      return pieces;
    };
  }
  if (type == "Split") return read_split(stage, field, reader);
  if (type == "ByteLevel") return read_byte_level(stage, field, reader);
  if (type == "Metaspace") return read_metaspace(stage, field, reader);
  reader.fail(field + ".type",
              "\"" + type + "\" is not supported (Sequence, Split, ByteLevel, Metaspace)");
}

// Byte tokens (<0x41>) joined into text; bytes that are not UTF-8 become one U+FFFD each.
std::vector<std::string> fall_back_to_bytes(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string bytes;
  const auto flush = [&] {
    if (bytes.empty()) return;
    if (is_utf8(bytes)) {
      out.push_back(bytes);
    } else {
      for (size_t i = 0; i < bytes.size(); ++i) out.push_back(kReplacementCharacter);
    }
    bytes.clear();
  };
  for (std::string& token : tokens) {
    if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
        std::isxdigit(static_cast<unsigned char>(token[3])) &&
        std::isxdigit(static_cast<unsigned char>(token[4]))) {
      bytes += static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16));
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  return out;
}

// Up to `start` leading and `stop` trailing `content` characters cut from every token.
std::vector<std::string> strip(std::vector<std::string> tokens, const std::string& content,
                               size_t start, size_t stop) {
  for (std::string& token : tokens) {
    for (size_t i = 0; i < start && token.compare(0, content.size(), content) == 0; ++i)
      token.erase(0, content.size());
    for (size_t i = 0; i < stop && token.size() >= content.size() &&
                       token.compare(token.size() - content.size(), content.size(), content) == 0;
         ++i)
      token.erase(token.size() - content.size());
  }
  return tokens;
}

Decoder read_decoder(const nlohmann::json& stage, const std::string& field,
                     const StageReader& reader) {
  if (stage.is_null()) {  // the library's default: tokens joined by spaces
    return [](std::vector<std::string> tokens) {
      std::string text;
      for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
      return std::vector<std::string>{text};
    };
  }
  const std::string type = reader.type(stage, field);
  if (type == "Sequence") {
    const auto steps = reader.sequence<Decoder>(stage, field, "decoders", read_decoder);
    return [steps](std::vector<std::string> tokens) {
      for (const auto& step : steps) tokens = step(std::move(tokens));
      return tokens;
    };
  }
  if (type == "ByteLevel") {
    return [](std::vector<std::string> tokens) {
      std::string bytes;
      for (const std::string& token : tokens) bytes += unicode_to_bytes(token);
      return std::vector<std::string>{lossy_utf8(bytes)};
    };
  }
  if (type == "Replace") {
    const std::string from = reader.literal(stage, field);
    const std::string to = reader.text(stage, field, "content");
    return [from, to](std::vector<std::string> tokens) {
      for (std::string& token : tokens) token = replace_all(std::move(token), from, to);
      return tokens;
    };
  }
  if (type == "ByteFallback") return fall_back_to_bytes;
  if (type == "Fuse") {
    return [](std::vector<std::string> tokens) {
      std::string text;
      for (const std::string& token : tokens) text += token;
      return std::vector<std::string>{text};
    };
  }
  if (type == "Strip") {
    const std::string content = reader.character(stage, field, "content");
    const size_t start = reader.count(stage, field, "start");
    const size_t stop = reader.count(stage, field, "stop");
    return [content, start, stop](std::vector<std::string> tokens) {
      return strip(std::move(tokens), content, start, stop);
    };
  }
  if (type == "Metaspace") {
    const std::string replacement = reader.character(stage, field, "replacement");
    const bool drop_first = read_prepend_scheme(stage, field, reader) != Prepend::kNever;
    return [replacement, drop_first](std::vector<std::string> tokens) {
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = replace_all(std::move(tokens[i]), replacement, i == 0 && drop_first ? "" : " ");
      return tokens;
    };
  }
  reader.fail(field + ".type", "\"" + type +
                                   "\" is not supported (Sequence, ByteLevel, Replace, "
                                   "ByteFallback, Fuse, Strip, Metaspace)");
}

// Unicode's White_Space characters (what the library's lstrip and rstrip take, Rust's
// char::is_whitespace).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Whether bytes [begin, end) of `text` are one white space character.
bool white_space_at(const std::string& text, size_t begin, size_t end) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const size_t length = end - begin;
  char32_t c = 0;
  if (length == 1) {
    c = byte(begin);
  } else if (length == 2) {
    c = ((byte(begin) & 0x1Fu) << 6) | (byte(begin + 1) & 0x3Fu);
  } else if (length == 3) {
    c = ((byte(begin) & 0x0Fu) << 12) | ((byte(begin + 1) & 0x3Fu) << 6) |
        (byte(begin + 2) & 0x3Fu);
  } else {
    return false;  // four bytes: no white space there
  }
  return is_white_space(c);
}

// Where the white space characters just before `end` begin, not before `floor`.
size_t white_space_before(const std::string& text, size_t end, size_t floor) {
  while (end > floor) {
    size_t begin = end - 1;
    while (begin > floor && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
    if (next_character(text, begin) != end || !white_space_at(text, begin, end)) break;
    end = begin;
  }
  return end;
}

// Where the white space characters from `begin` on end.
size_t white_space_after(const std::string& text, size_t begin) {
  while (begin < text.size()) {
    const size_t end = next_character(text, begin);
    if (!white_space_at(text, begin, end)) break;
    begin = end;
  }
  return begin;
}

class HfTokenizer : public Tokenizer {
 public:
  HfTokenizer(const nlohmann::json& json, const std::string& path)
      : path_(path),
        model_(json.value("model", nlohmann::json()), path),
        post_process_(json.value("post_processor", nlohmann::json()), path) {
    const StageReader reader(path);
    for (const auto& [key, value] : json.items()) {
      if (!kFields.count(key)) reader.fail(key, "is not supported (pipetrain would not apply it)");
    }
    for (const char* unused : {"truncation", "padding"}) {
      if (json.contains(unused) && !json[unused].is_null())
        reader.fail(unused, "is not supported (use null)");
    }
    const nlohmann::json normalizer = json.value("normalizer", nlohmann::json());
    normalize_ = read_normalizer(normalizer, "normalizer", reader);
    pre_tokenize_ =
        read_pre_tokenizer(json.value("pre_tokenizer", nlohmann::json()), "pre_tokenizer", reader);
    decode_ = read_decoder(json.value("decoder", nlohmann::json()), "decoder", reader);
    read_added_tokens(json.value("added_tokens", nlohmann::json::array()), reader);
  }

  // As the library encodes: added tokens that are matched as written are cut out of the text
  // first; each stretch between them is normalized, then the added tokens matched in
  // normalized text are cut out of it; what remains is pre-tokenized and goes to the model.
  std::vector<int64_t> encode_text(const std::string& text) const override {
    if (!is_utf8(text)) throw io::InputError(path_ + ": the text to encode is not UTF-8");
    std::vector<int64_t> ids;
    const auto add = [&](int64_t id) { ids.push_back(id); };
    split(text, as_written_, add, [&](size_t begin, size_t end) {
      const std::string normalized = normalize_(text.substr(begin, end - begin));
      split(normalized, normalized_, add, [&](size_t from, size_t to) {
        const Piece stretch{normalized.substr(from, to - from), begin == 0 && from == 0};
        for (const Piece& piece : pre_tokenize_(stretch)) {
          if (piece.text.empty()) continue;
          for (const int64_t id : model_.encode(piece.text)) ids.push_back(id);
        }
      });
    });
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    std::vector<std::string> tokens;
    for (const int64_t id : ids) {
      const auto added = added_by_id_.find(id);
      const std::string* token = added != added_by_id_.end() ? &added->second : model_.token_of(id);
      tokens.push_back(token ? *token : "?");
    }
    std::string text;
    for (const std::string& part : decode_(std::move(tokens))) text += part;
    return text;
  }

  int64_t vocab_size() const override {
    return std::max({model_.size(), next_added_id_, post_process_.ids_end()});
  }

 protected:
  std::vector<int64_t> with_special_tokens(std::vector<int64_t> a, const std::vector<int64_t>* b,
                                           SpecialTokens special) const override {
    return post_process_.apply(a, b, special);
  }

 private:
  // The fields of a tokenizer.json this reader applies (or refuses when set).
  inline static const std::set<std::string> kFields{
      "version",       "truncation", "padding",        "added_tokens", "normalizer",
      "pre_tokenizer", "model",      "post_processor", "decoder"};

  struct AddedToken {
    std::string content;
    int64_t id;
    bool lstrip, rstrip;
  };

  // Added tokens of one kind in a byte trie, so that the longest one starting at a place is
  // found in as many steps as it has bytes, however many tokens there are (the library
  // builds an Aho-Corasick automaton, leftmost-longest, which matches the same ones).
  class AddedTokens {
   public:
    void add(AddedToken token) {
      int32_t node = 0;
      for (const char c : token.content) {
        const auto [edge, added] =
            edges_.try_emplace(edge_key(node, c), static_cast<int32_t>(token_at_node_.size()));
        if (added) token_at_node_.push_back(-1);
        node = edge->second;
      }
      if (token_at_node_[node] >= 0) return;  // the same content twice: the first counts
      token_at_node_[node] = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(std::move(token));
    }

    const AddedToken* longest_at(const std::string& text, size_t at) const {
      const AddedToken* longest = nullptr;
      int32_t node = 0;
      for (size_t i = at; i < text.size(); ++i) {
        const auto edge = edges_.find(edge_key(node, text[i]));
        if (edge == edges_.end()) break;
        node = edge->second;
        if (token_at_node_[node] >= 0) longest = &tokens_[token_at_node_[node]];
      }
      return longest;
    }

   private:
    static uint64_t edge_key(int32_t node, char c) {
      return (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
    }

    std::vector<AddedToken> tokens_;
    std::unordered_map<uint64_t, int32_t> edges_;  // (node, byte) -> node; node 0 the root
    std::vector<int32_t> token_at_node_{-1};       // the token ending at each node, or -1
  };

  // Each added token takes its id in the model's vocabulary, or the next one after it (the
  // library assigns ids so, whatever the file says). `normalized` ones are matched in
  // normalized text as the normalizer writes them, the others in the text as written.
  void read_added_tokens(const nlohmann::json& list, const StageReader& reader) {
    if (!list.is_array()) reader.fail("added_tokens", "must be a list");
    next_added_id_ = model_.size();
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string field = "added_tokens[" + std::to_string(i) + "]";
      const nlohmann::json& token = list[i];
      const std::string content = reader.text(token, field, "content");
      if (content.empty()) continue;  // as the library skips it
      if (reader.flag(token, field, "single_word", false))
        reader.fail(field + ".single_word", "true is not supported");
      // The same content again keeps the id it got first.
      const auto in_vocabulary = model_.id_of(content);
      const auto known = added_ids_.find(content);
      const int64_t id = known != added_ids_.end() ? known->second
                         : in_vocabulary           ? *in_vocabulary
                                                   : next_added_id_++;
      added_ids_.emplace(content, id);
      const bool lstrip = reader.flag(token, field, "lstrip", false);
      const bool rstrip = reader.flag(token, field, "rstrip", false);
      if (reader.flag(token, field, "normalized", false)) {
        // Matched, and decoded, as the normalizer writes it, as the library does.
        const std::string normalized = normalize_(content);
        if (!normalized.empty()) normalized_.add({normalized, id, lstrip, rstrip});
        added_by_id_[id] = normalized;
      } else {
        as_written_.add({content, id, lstrip, rstrip});
        added_by_id_[id] = content;
      }
    }
  }

  // Cuts `text` at the leftmost-longest matches of `tokens` (lstrip / rstrip: the white space
  // beside a token is part of its match): `token(id)` for each match, `rest(begin, end)` for
  // each non-empty stretch between them, in order.
  template <typename Token, typename Rest>
  static void split(const std::string& text, const AddedTokens& tokens, const Token& token,
                    const Rest& rest) {
    size_t done = 0;
    for (size_t at = 0; at < text.size();) {
      const AddedToken* added = tokens.longest_at(text, at);
      if (!added) {
        at = next_character(text, at);
        continue;
      }
      size_t begin = at, end = at + added->content.size();
      if (added->lstrip) begin = white_space_before(text, begin, done);
      if (added->rstrip) end = white_space_after(text, end);
      if (begin > done) rest(done, begin);
      token(added->id);
      at = done = end;
    }
    if (done < text.size()) rest(done, text.size());
  }

  std::string path_;
  BpeModel model_;
  PostProcessor post_process_;
  Normalizer normalize_;
  PreTokenizer pre_tokenize_;
  Decoder decode_;
  AddedTokens as_written_;
  AddedTokens normalized_;
  std::unordered_map<int64_t, std::string> added_by_id_;
  std::unordered_map<std::string, int64_t> added_ids_;  // each added content's id
  int64_t next_added_id_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> load_hugging_face_tokenizer(const std::string& path) {
  // Real tokenizer.json files reach tens of MiB (a vocabulary of 256k and its merges).
  const nlohmann::json json = config::read_json_file(
      path, {.what = "tokenizer file", .max_bytes = std::uintmax_t{1} << 30, .comments = false});
  try {
    return std::make_unique<HfTokenizer>(json, path);
  } catch (const nlohmann::json::exception& e) {  // a field of an unexpected type
    throw io::InputError(path + ": not a tokenizer.json pipetrain reads (" + e.what() + ")");
  }
}

}  // namespace pipetrain::data
