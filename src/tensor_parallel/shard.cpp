#include "pipetrain/tensor_parallel/shard.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace pipetrain::tensor_parallel {
namespace {

int64_t piece_length(int64_t length, ShardLayout layout, int size) {
  if (layout.stride < 1 || length % (layout.stride * size) != 0) {
    throw std::invalid_argument("dimension " + std::to_string(layout.dim) + " of length " +
                                std::to_string(length) + " does not split into " +
                                std::to_string(layout.stride) + " x " + std::to_string(size) +
                                " equal pieces");
  }
  return length / (layout.stride * size);
}

}  // namespace

at::Tensor take_shard(const at::Tensor& full, ShardLayout layout, int rank, int size) {
  const int64_t piece = piece_length(full.size(layout.dim), layout, size);
  if (size == 1) return full.contiguous();  // the whole tensor: no copy
  std::vector<at::Tensor> pieces;
  for (const auto& block : full.chunk(layout.stride, layout.dim))
    pieces.push_back(block.narrow(layout.dim, rank * piece, piece));
  return at::cat(pieces, layout.dim).contiguous();
}

at::Tensor join_shards(const at::Tensor& stacked, ShardLayout layout) {
  // Shard r is [block 0 piece r, block 1 piece r, ...]; the full tensor lists block 0's
  // pieces of every rank, then block 1's, and so on.
  const int64_t size = stacked.size(0);
  piece_length(stacked.size(layout.dim + 1) * size, layout, static_cast<int>(size));  // checks
  std::vector<std::vector<at::Tensor>> blocks;
  for (int64_t r = 0; r < size; ++r) blocks.push_back(stacked[r].chunk(layout.stride, layout.dim));
  std::vector<at::Tensor> ordered;
  for (int64_t b = 0; b < layout.stride; ++b) {
    for (int64_t r = 0; r < size; ++r) ordered.push_back(blocks[r][b]);
  }
  return at::cat(ordered, layout.dim);
}

std::vector<int64_t> full_shape(at::IntArrayRef shard_shape, ShardLayout layout, int size) {
  std::vector<int64_t> shape = shard_shape.vec();
  shape.at(layout.dim) *= size;
  return shape;
}

}  // namespace pipetrain::tensor_parallel
