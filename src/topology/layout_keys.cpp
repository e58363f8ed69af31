#include <string>

#include "pipetrain/io/errors.h"
#include "pipetrain/topology/parallel_layout.h"

namespace pipetrain::topology {

const config::KeyTable<ParallelLayout>& layout_keys() {
  static const config::KeyTable<ParallelLayout> table = [] {
    config::KeyTable<ParallelLayout> t;
    t.integer("pipeline.stages", PIPETRAIN_FIELD(pipe),
              "pipeline stages (`--pipe`; data-parallel size = ranks / (stages × "
              "context_parallel × model_parallel))",
              config::at_least(1))
        .integer("pipeline.chunks", PIPETRAIN_FIELD(chunks),
                 "model chunks per stage: at least 2 for `interleaved`, 1 or more for "
                 "`interleaved-zb` and `looped-bfs` (layers split into stages × chunks parts, "
                 "stage s holding parts s, s + stages, ...), 2 for `zbv` and `dualpipev` (stage "
                 "s holding parts s and 2 × stages - 1 - s); 1 otherwise",
                 config::at_least(1))
        .integer("data_parallel", PIPETRAIN_FIELD(data),
                 "checked against the job (`--data`); 0: ranks / (stages × context_parallel × "
                 "model_parallel)",
                 config::at_least(0))
        .integer("model_parallel", PIPETRAIN_FIELD(tensor),
                 "tensor-parallel group size (`--model`); GPT and LLaMA, dividing `heads` and "
                 "`vocab_size`",
                 config::at_least(1))
        .flag("sequence_parallel", PIPETRAIN_FIELD(sequence_parallel),
              "Megatron's sequence parallelism (`--sequence-parallel`): with `model_parallel` "
              "above 1, the norms, dropout and residual stream hold 1/model_parallel of the "
              "sequence (`model.context` divisible by it); stage transfers carry each rank's "
              "slice. Training and evaluation only: nothing on disk depends on it")
        .integer("context_parallel", PIPETRAIN_FIELD(context),
                 "context-parallel group size (`--context-parallel`; Megatron's "
                 "`--context-parallel-size`): each sequence cut into 2 × C chunks, rank i "
                 "holding chunks i and 2C - 1 - i, attention passing keys and values around the "
                 "group (ring attention); GPT and LLaMA, `model.context` divisible by 2 × C. "
                 "Training and evaluation only: nothing on disk depends on it",
                 config::at_least(1))
        .integer("expert_parallel", PIPETRAIN_FIELD(expert),
                 "expert-parallel group size (`--expert-parallel`; Megatron's "
                 "`--expert-model-parallel-size`): groups of E consecutive data-parallel ranks "
                 "split each MoE layer's experts, tokens sent to their experts' ranks and back "
                 "(all-to-all); model.type mixtral, E dividing `model.experts` and the "
                 "data-parallel size; under ZeRO the experts' masters and optimizer state are "
                 "sharded over the ranks holding them. Training, evaluation and `logits "
                 "--expert-parallel`: checkpoints hold every expert",
                 config::at_least(1))
        .check([](const ParallelLayout& l) {
          if (l.sequence_parallel && l.tensor < 2)
            throw io::InputError(
                "sequence_parallel splits the sequence over the tensor-parallel group: it needs "
                "model_parallel above 1 (--model), got " +
                std::to_string(l.tensor));
        });
    return t;
  }();
  return table;
}

}  // namespace pipetrain::topology
