#include "data/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "data/utf8.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::data {
namespace {

// Ids beyond this are refused rather than allocated for.
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

std::string byte_token(unsigned char byte) {
  char text[8];
  std::snprintf(text, sizeof text, "<0x%02X>", byte);
  return text;
}

// A key that must be null, absent or `empty` (a feature this reader does not have).
bool unset(const nlohmann::json& model, const std::string& key, const nlohmann::json& empty) {
  return !model.contains(key) || model[key].is_null() || model[key] == empty;
}

// A true/false key; absent or null: false.
bool flag(const nlohmann::json& model, const std::string& key, const std::string& source) {
  if (unset(model, key, false)) return false;
  if (!model[key].is_boolean())
    throw io::InputError(source + ": model." + key + " must be true or false");
  return model[key].get<bool>();
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, const std::string& source) {
  const auto fail = [&](const std::string& what) -> void {
    throw io::InputError(source + ": model." + what);
  };
  if (!model.is_object() || !model.contains("type") || model["type"] != "BPE")
    fail("type must be \"BPE\" (pipetrain reads byte-pair-encoding tokenizers)");
  if (!model.contains("vocab") || !model["vocab"].is_object())
    fail("vocab is missing or not an object");
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenId)
      fail("vocab[" + nlohmann::json(token).dump() + "] is not an id below 2^24");
    add_token(token, id.get<int64_t>());
  }
  if (!unset(model, "dropout", 0.0)) fail("dropout is not supported (use null)");
  if (!unset(model, "continuing_subword_prefix", ""))
    fail("continuing_subword_prefix is not supported (use null)");
  if (!unset(model, "end_of_word_suffix", ""))
    fail("end_of_word_suffix is not supported (use null)");
  fuse_unknown_ = flag(model, "fuse_unk", source);
  byte_fallback_ = flag(model, "byte_fallback", source);
  ignore_merges_ = flag(model, "ignore_merges", source);
  if (!unset(model, "unk_token", "")) {
    if (!model["unk_token"].is_string()) fail("unk_token must be a string");
    unknown_ = id_of(model["unk_token"].get<std::string>());
    if (!unknown_) fail("unk_token " + model["unk_token"].dump() + " is not in the vocabulary");
  }
  read_merges(model.contains("merges") ? model["merges"] : nlohmann::json::array(), source);
}

void BpeModel::read_merges(const nlohmann::json& merges, const std::string& source) {
  if (!merges.is_array()) throw io::InputError(source + ": model.merges must be a list");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const nlohmann::json& merge = merges[rank];
    std::string left, right;
    if (merge.is_string()) {  // "a b", the older spelling
      const std::string text = merge.get<std::string>();
      if (text.rfind("#version", 0) == 0) continue;  // a merges.txt header, as the library skips
      const size_t space = text.find(' ');
      if (space != std::string::npos && text.find(' ', space + 1) == std::string::npos) {
        left = text.substr(0, space);
        right = text.substr(space + 1);
      }
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    }
    const auto a = id_of(left), b = id_of(right), merged = id_of(left + right);
    if (left.empty() || right.empty() || !a || !b || !merged) {
      throw io::InputError(source + ": model.merges[" + std::to_string(rank) + "] " + merge.dump() +
                           " is not a pair of tokens whose join is a token");
    }
    // A pair listed twice takes its later rank, as in the library's map.
    merges_.insert_or_assign({*a, *b}, Merge{static_cast<int64_t>(rank), *merged});
  }
}

void BpeModel::add_token(const std::string& token, int64_t id) {
  ids_[token] = id;
  tokens_[id] = token;
  size_ = std::max(size_, id + 1);
}

std::optional<int64_t> BpeModel::id_of(const std::string& token) const {
  const auto found = ids_.find(token);
  if (found == ids_.end()) return std::nullopt;
  return found->second;
}

const std::string* BpeModel::token_of(int64_t id) const {
  const auto found = tokens_.find(id);
  return found == tokens_.end() ? nullptr : &found->second;
}

std::vector<int64_t> BpeModel::characters(const std::string& word) const {
  std::vector<int64_t> ids;
  bool unknown_pending = false;
  const auto flush_unknown = [&] {
    if (unknown_pending) ids.push_back(*unknown_);
    unknown_pending = false;
  };
  for (size_t at = 0; at < word.size();) {
    const size_t end = next_character(word, at);
    const std::string character = word.substr(at, end - at);
    at = end;
    if (const auto id = id_of(character)) {
      flush_unknown();
      ids.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int64_t> bytes;
      for (const unsigned char byte : character) {
        if (const auto id = id_of(byte_token(byte))) bytes.push_back(*id);
      }
      if (bytes.size() == character.size()) {
        ids.insert(ids.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (!unknown_) continue;  // as the tokenizers library does: the character is dropped
    if (!fuse_unknown_) flush_unknown();
    unknown_pending = true;
  }
  flush_unknown();
  return ids;
}

std::vector<int64_t> BpeModel::encode(const std::string& word) const {
  if (word.empty()) return {};
  if (ignore_merges_) {
    if (const auto id = id_of(word)) return {*id};
  }
  std::vector<int64_t> symbols = characters(word);
  // Quadratic in the word's length; words are what a pre-tokenizer leaves, short.
  while (symbols.size() > 1) {
    size_t best = symbols.size();
    Merge best_merge{std::numeric_limits<int64_t>::max(), -1};
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto found = merges_.find({symbols[i], symbols[i + 1]});
      if (found != merges_.end() && found->second.rank < best_merge.rank) {
        best = i;
        best_merge = found->second;
      }
    }
    if (best == symbols.size()) break;
    symbols[best] = best_merge.merged;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  return symbols;
}

}  // namespace pipetrain::data
