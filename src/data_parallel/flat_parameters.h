#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "data_parallel/flat_shards.h"
#include "data_parallel/replica_parameters.h"
#include "pipetrain/comm/communicator.h"

namespace pipetrain::data_parallel {

// ZeRO stages 1 and 2's home of a stage's parameters: one flat buffer in the parameters'
// dtype, laid out as `layout`, in whose storage every parameter is seated (values kept), so
// nothing may move the module to another device or dtype afterwards. Every replica holds it
// whole; after the owners wrote their pieces, gather_parameters() all-gathers each bucket's
// pieces, in rounds of at most `allgather_bucket_size` elements per rank where a piece is
// larger (DeepSpeed's allgather_bucket_size), else in place.
class FlatParameters final : public ReplicaParameters {
 public:
  FlatParameters(std::vector<at::Tensor> parameters, const FlatShards& layout,
                 std::shared_ptr<comm::Communicator> data, int64_t allgather_bucket_size);
  FlatParameters(const FlatParameters&) = delete;
  FlatParameters& operator=(const FlatParameters&) = delete;

  at::Tensor piece(int k) const override;
  void gather_parameters() override;
  bool whole() const override { return true; }

 private:
  // Elements per rank in one all-gather of a piece of `piece` elements.
  int64_t per_round(int64_t piece) const;

  const FlatShards& layout_;  // the reduction's, which owns this
  std::shared_ptr<comm::Communicator> data_;
  int64_t allgather_bucket_size_;
  at::Tensor flat_;  // every parameter's storage
};

}  // namespace pipetrain::data_parallel
