#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

// Keys a config holds that no table knows: one message for all of them, each with the
// known key it most likely misspells.
namespace pipetrain::config {

// The name of `known` closest to `name` by edit distance (insertions, deletions,
// substitutions and swaps of neighbours), if at most a third of the length of `name`'s last
// dotted part away (at least 1): nullopt when nothing is that close.
std::optional<std::string> closest_name(std::string_view name,
                                        const std::vector<std::string>& known);

// "unknown keys a (did you mean b?), c": every key of `unknown`, each with its
// closest_name among `known` where there is one. Empty when `unknown` is.
std::string describe_unknown_keys(const std::vector<std::string>& unknown,
                                  const std::vector<std::string>& known);

// Throws InputError with describe_unknown_keys' message unless `unknown` is empty.
void refuse_unknown_keys(const std::vector<std::string>& unknown,
                         const std::vector<std::string>& known);

// DeepSpeed's other spelling of a section (e.g. `bfloat16` for `bf16`) read as ours:
// moved to `ours` in `json`; InputError when both are there.
void accept_alias(nlohmann::json& json, const std::string& alias, const std::string& ours);

}  // namespace pipetrain::config
