#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

// The tokenizer and generation files transformers keeps beside a model (tokenizer.json, its
// config and template, generation_config.json): carried byte for byte from an imported
// folder to the checkpoints trained from it and to every export.
namespace pipetrain::trainer {

// The names of those files in `folder`, in a fixed order.
std::vector<std::string> model_files_in(const std::filesystem::path& folder);

// Copies them from `from` to `to` (each atomically; the ones `to` has of its own are
// replaced).
void copy_model_files(const std::filesystem::path& from, const std::filesystem::path& to);

// Where the files of checkpoint folder `checkpoint` trained with `config` are: beside it
// where it holds any, else beside the tokenizer it names (sample.tokenizer; a fine-tune of
// an import names the import's), else `checkpoint` (which then holds none).
std::filesystem::path model_files_folder(const nlohmann::json& config,
                                         const std::filesystem::path& checkpoint);

// The end-of-sequence ids generation stops at: generation_config.json's eos_token_id in
// `folder` (an id or a list), else `fallback` (the model config's). InputError naming the
// file for an eos_token_id of another kind.
std::vector<int64_t> end_of_sequence_ids(const std::filesystem::path& folder,
                                         std::vector<int64_t> fallback);

}  // namespace pipetrain::trainer
