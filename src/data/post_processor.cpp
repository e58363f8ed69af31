#include "data/post_processor.h"

#include <algorithm>
#include <set>

#include "pipetrain/io/errors.h"

namespace pipetrain::data {
namespace {

[[noreturn]] void refuse(const std::string& source, const std::string& field,
                         const std::string& what) {
  throw io::InputError(source + ": " + field + " " + what);
}

// Every key of `stage` is one of `known` (what a processor of its type holds).
void check_keys(const nlohmann::json& stage, const std::string& field, const std::string& source,
                const std::set<std::string>& known) {
  for (const auto& [key, value] : stage.items()) {
    if (!known.count(key)) refuse(source, field + "." + key, "is not supported");
  }
}

// A [token, id] pair of Bert's and Roberta's processors: the id.
int64_t token_id(const nlohmann::json& stage, const std::string& field, const std::string& source,
                 const std::string& key) {
  const nlohmann::json& pair = stage.contains(key) ? stage[key] : nlohmann::json();
  if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() ||
      !pair[1].is_number_integer() || pair[1].get<int64_t>() < 0)
    refuse(source, field + "." + key, "must be [token, id]");
  return pair[1].get<int64_t>();
}

}  // namespace

PostProcessor::PostProcessor(const nlohmann::json& stage, const std::string& source) {
  if (!stage.is_null()) read(stage, "post_processor", source);
}

void PostProcessor::read(const nlohmann::json& stage, const std::string& field,
                         const std::string& source) {
  if (!stage.is_object() || !stage.contains("type") || !stage["type"].is_string())
    refuse(source, field, "has no type");
  const std::string type = stage["type"].get<std::string>();
  const auto adds_tokens = [&] {
    if (templated_) refuse(source, field, "adds tokens a second time (not supported)");
    templated_ = true;
  };
  if (type == "ByteLevel") {  // offsets only: the ids pass through
    check_keys(stage, field, source, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
  } else if (type == "Sequence") {
    check_keys(stage, field, source, {"type", "processors"});
    const nlohmann::json list = stage.value("processors", nlohmann::json());
    if (!list.is_array()) refuse(source, field + ".processors", "must be a list");
    for (size_t i = 0; i < list.size(); ++i)
      read(list[i], field + ".processors[" + std::to_string(i) + "]", source);
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    check_keys(stage, field, source, {"type", "sep", "cls", "trim_offsets", "add_prefix_space"});
    adds_tokens();
    const int64_t sep = token_id(stage, field, source, "sep");
    const int64_t cls = token_id(stage, field, source, "cls");
    single_ = {{-1, {cls}}, {0, {}}, {-1, {sep}}};
    pair_ = type == "BertProcessing"
                ? Template{{-1, {cls}}, {0, {}}, {-1, {sep}}, {1, {}}, {-1, {sep}}}
                : Template{{-1, {cls}}, {0, {}}, {-1, {sep, sep}}, {1, {}}, {-1, {sep}}};
  } else if (type == "TemplateProcessing") {
    check_keys(stage, field, source, {"type", "single", "pair", "special_tokens"});
    adds_tokens();
    const nlohmann::json specials = stage.value("special_tokens", nlohmann::json::object());
    if (!specials.is_object()) refuse(source, field + ".special_tokens", "must be an object");
    const auto read_template = [&](const std::string& key) {
      const nlohmann::json list = stage.value(key, nlohmann::json());
      if (!list.is_array()) refuse(source, field + "." + key, "must be a list of pieces");
      Template pieces;
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string at = field + "." + key + "[" + std::to_string(i) + "]";
        const nlohmann::json& piece = list[i];
        // A piece's id: text, else "" (refused below).
        const auto id_of = [](const nlohmann::json& inner) {
          return inner.contains("id") && inner["id"].is_string() ? inner["id"].get<std::string>()
                                                                 : std::string();
        };
        if (piece.is_object() && piece.contains("Sequence") && piece["Sequence"].is_object()) {
          const std::string id = id_of(piece["Sequence"]);
          if (id != "A" && id != "B") refuse(source, at + ".Sequence.id", "must be A or B");
          pieces.push_back({id == "A" ? 0 : 1, {}});
        } else if (piece.is_object() && piece.contains("SpecialToken") &&
                   piece["SpecialToken"].is_object()) {
          const std::string id = id_of(piece["SpecialToken"]);
          const nlohmann::json ids = specials.contains(id) && specials[id].is_object()
                                         ? specials[id].value("ids", nlohmann::json())
                                         : nlohmann::json();
          if (!ids.is_array() || ids.empty() ||
              std::any_of(ids.begin(), ids.end(), [](const nlohmann::json& v) {
                return !v.is_number_integer() || v.get<int64_t>() < 0;
              }))
            refuse(source, at, "names special token '" + id + "', which special_tokens lacks");
          pieces.push_back({-1, ids.get<std::vector<int64_t>>()});
        } else {
          refuse(source, at, "must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
        }
      }
      return pieces;
    };
    single_ = read_template("single");
    pair_ = read_template("pair");
  } else {
    refuse(source, field, "of type " + type + " is not supported");
  }
}

std::vector<int64_t> PostProcessor::apply(const std::vector<int64_t>& a,
                                          const std::vector<int64_t>* b,
                                          SpecialTokens special) const {
  if (!templated_) {  // the sequences one after the other
    std::vector<int64_t> ids = a;
    if (b) ids.insert(ids.end(), b->begin(), b->end());
    return ids;
  }
  std::vector<int64_t> ids;
  for (const Piece& piece : b ? pair_ : single_) {
    const std::vector<int64_t>* part = piece.sequence == 0 ? &a : piece.sequence == 1 ? b : nullptr;
    if (piece.sequence >= 0 && part) ids.insert(ids.end(), part->begin(), part->end());
    if (piece.sequence < 0 && special == SpecialTokens::kAdd)
      ids.insert(ids.end(), piece.ids.begin(), piece.ids.end());
  }
  return ids;
}

int64_t PostProcessor::ids_end() const {
  int64_t end = 0;
  for (const Template* pieces : {&single_, &pair_}) {
    for (const Piece& piece : *pieces) {
      for (const int64_t id : piece.ids) end = std::max(end, id + 1);
    }
  }
  return end;
}

}  // namespace pipetrain::data
