// Writes the built-in GPT's operators for one training micro-batch as JSON, for
// tests/models/gpt_op_lists.py to set beside PyTorch eager's:
//   gpt_ops LAYERS > ops.json
// {"forward": [["aten::embedding", ["float", "long int"], false], ...], "loss": [...], ...}
// (name, tensor inputs' types, whether it copies data)
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "gpt_ops.h"

int main(int argc, char** argv) {
  if (argc != 2 || std::atoi(argv[1]) < 1) {
    std::fprintf(stderr, "usage: gpt_ops LAYERS\n");
    return 2;
  }
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [phase, ops] : pipetrain::testing::gpt_step_ops(std::atoi(argv[1]))) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& op : ops) list.push_back({op.name, op.dtypes, op.copies});
    out[phase] = list;
  }
  std::cout << out.dump() << "\n";
  return 0;
}
