#include "pipetrain/config/unknown_keys.h"

#include <algorithm>
#include <numeric>

#include "pipetrain/io/errors.h"

namespace pipetrain::config {
namespace {

// Optimal string alignment distance: Levenshtein's with a swap of neighbours as one edit.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  std::iota(d[0].begin(), d[0].end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::optional<std::string> closest_name(std::string_view name,
                                        const std::vector<std::string>& known) {
  // A third of the last part's length: a long path must not make far names look close.
  const std::size_t dot = name.rfind('.');
  const std::size_t leaf = dot == std::string_view::npos ? name.size() : name.size() - dot - 1;
  const std::size_t limit = std::max<std::size_t>(1, leaf / 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const auto& candidate : known) {
    const std::size_t distance = edit_distance(name, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string describe_unknown_keys(const std::vector<std::string>& unknown,
                                  const std::vector<std::string>& known) {
  if (unknown.empty()) return {};
  std::string text = unknown.size() == 1 ? "unknown key " : "unknown keys ";
  for (std::size_t i = 0; i < unknown.size(); ++i) {
    text += (i ? ", " : "") + unknown[i];
    if (const auto close = closest_name(unknown[i], known))
      text += " (did you mean " + *close + "?)";
  }
  return text;
}

void refuse_unknown_keys(const std::vector<std::string>& unknown,
                         const std::vector<std::string>& known) {
  if (!unknown.empty()) throw io::InputError(describe_unknown_keys(unknown, known));
}

void accept_alias(nlohmann::json& json, const std::string& alias, const std::string& ours) {
  if (!json.is_object() || !json.contains(alias)) return;
  if (json.contains(ours)) {
    throw io::InputError(alias + " and " + ours + " are one section (DeepSpeed reads both " +
                         "spellings): keep one");
  }
  json[ours] = json[alias];
  json.erase(alias);
}

}  // namespace pipetrain::config
