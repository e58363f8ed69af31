#include <string>

#include "pipetrain/config/json_value.h"
#include "pipetrain/data_parallel/zero_config.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::data_parallel {

const config::KeyTable<ZeroConfig>& zero_keys() {
  static const config::KeyTable<ZeroConfig> table = [] {
    config::KeyTable<ZeroConfig> t;
    // DeepSpeed's `zero_optimization` section.

    t.custom(
         "zero_optimization.stage", "int",
         "ZeRO over the data-parallel ranks: 0 off; 1 fp32 masters and optimizer state sharded "
         "(gradients reduce-scattered once per step, updated shards all-gathered); 2 reduces "
         "every backward pass's gradients into fp32 shards instead, freeing them (a lower "
         "peak); 3 also shards the parameters, each layer's gathered just before its forward "
         "and backward",
         [](const std::string& key, const nlohmann::json& v, ZeroConfig& c) {
           const int64_t stage = config::read_integer(key, v, config::at_least(0));
           if (stage > 3)
             throw io::InputError(key + " must be 0, 1, 2 or 3, got " + std::to_string(stage));
           c.stage = stage;
         },
         [](const ZeroConfig& c) { return nlohmann::json(c.stage); })
        .integer(
            "zero_optimization.reduce_bucket_size", PIPETRAIN_FIELD(reduce_bucket_size),
            "elements per ZeRO gradient bucket, each reduce-scattered on its own (stage 1; 2 and 3 "
            "reduce one bucket per layer after every backward pass)",
            config::at_least(1))
        .integer("zero_optimization.allgather_bucket_size", PIPETRAIN_FIELD(allgather_bucket_size),
                 "elements per all-gather of updated ZeRO shards (stages 1, 2)",
                 config::at_least(1))
        .integer("zero_optimization.prefetch", PIPETRAIN_FIELD(prefetch),
                 "stage 3: layers whose parameters are gathered ahead of the one computing "
                 "(FSDP's forward and backward prefetch)",
                 config::at_least(0))
        .flag("zero_optimization.reshard_after_forward", PIPETRAIN_FIELD(reshard_after_forward),
              "stage 3: free a layer's gathered parameters after its forward and gather them "
              "again for backward (least memory); false keeps them for the whole step")
        .accepted("zero_optimization.overlap_comm", "bool",
                  "DeepSpeed's; accepted and ignored: `overlap_grad_reduce` says whether buckets, "
                  "ZeRO 1's reduce-scatters too, start during the last backward passes");
    return t;
  }();
  return table;
}

}  // namespace pipetrain::data_parallel
