#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pipetrain::data {

// The byte-pair-encoding model of a Hugging Face tokenizer.json ("model": {"type": "BPE"}):
// a vocabulary and ranked merges. `encode` turns one pre-tokenized word into ids as the
// `tokenizers` library does: characters looked up one by one (unknown ones as `<0xXX>` byte
// tokens with byte_fallback, else the unk_token, else dropped), then the adjacent pair of
// lowest rank merged, leftmost first, until no pair has a merge.
class BpeModel {
 public:
  // InputError naming `source` and the field for a model it cannot read (other types,
  // dropout, subword prefixes or suffixes, merges of unknown tokens).
  BpeModel(const nlohmann::json& model, const std::string& source);

  std::vector<int64_t> encode(const std::string& word) const;

  std::optional<int64_t> id_of(const std::string& token) const;
  // Null for an id without a token.
  const std::string* token_of(int64_t id) const;
  // One more than the largest id.
  int64_t size() const { return size_; }

 private:
  struct PairHash {
    size_t operator()(const std::pair<int64_t, int64_t>& p) const {
      return std::hash<int64_t>()(p.first * 1000003 + p.second);
    }
  };
  struct Merge {
    int64_t rank;
    int64_t merged;
  };
  void add_token(const std::string& token, int64_t id);
  void read_merges(const nlohmann::json& merges, const std::string& source);
  // The ids of `word`'s characters before merging.
  std::vector<int64_t> characters(const std::string& word) const;

  std::unordered_map<std::string, int64_t> ids_;
  std::unordered_map<int64_t, std::string> tokens_;
  int64_t size_ = 0;
  std::unordered_map<std::pair<int64_t, int64_t>, Merge, PairHash> merges_;
  std::optional<int64_t> unknown_;
  bool fuse_unknown_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
};

}  // namespace pipetrain::data
