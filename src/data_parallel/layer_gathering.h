#pragma once

#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "data_parallel/sharded_parameters.h"
#include "pipetrain/module/layer_hooks.h"

namespace pipetrain::data_parallel {

// When ZeRO stage 3 gathers each layer's parameters (ShardedParameters holds them): just
// before the layer's forward, with the next `prefetch` layers' gathers started behind it;
// just before its backward (a hook on its outputs' gradients), with the `prefetch` layers
// before it started. With `reshard_after_forward` a layer is released after its forward,
// and after its backward once the backward reaches the layer before it, so at most
// prefetch + 1 layers are gathered at any moment; without, each stays gathered from its
// first gather to the end of the step (as torchtitan does under a pipeline).
class LayerGathering : public module::LayerHooks,
                       public std::enable_shared_from_this<LayerGathering> {
 public:
  struct Options {
    int prefetch = 1;
    bool reshard_after_forward = true;
  };
  // `chunks`: this stage's layers of each model chunk, as [first, last); `buckets_of`: the
  // buckets of `parameters` that hold each layer's parameters (a layer without none).
  LayerGathering(std::shared_ptr<ShardedParameters> parameters,
                 std::vector<std::pair<int, int>> chunks,
                 std::map<int, std::vector<int>> buckets_of, Options options);

  void before_forward(int layer) override;
  module::Activation after_forward(int layer, module::Activation output) override;
  // Layer `layer`'s backward is about to run.
  void before_backward(int layer);
  // A forward or backward pass of the schedule has ended; the step's passes have ended
  // (nothing stays gathered: before the optimizer step, and after evaluation).
  void end_pass();
  void end_step();
  // A step threw: gathers on their way are forgotten.
  void abandon();

  const ShardedParameters& parameters() const { return *parameters_; }

 private:
  // Up to `count` layers with parameters after `layer` (step 1) or before it (step -1),
  // within its chunk.
  std::vector<int> neighbours(int layer, int step, int count) const;
  // The buckets of `layer` and of its neighbours in direction `step`: gathered (the first)
  // or started (the rest); with resharding, every other gathered bucket released first.
  void want(int layer, int step);
  const std::vector<int>& buckets(int layer) const;
  std::set<int> buckets_of(const std::vector<int>& layers) const;

  std::shared_ptr<ShardedParameters> parameters_;
  std::vector<std::pair<int, int>> chunks_;
  std::map<int, std::vector<int>> buckets_of_;
  Options options_;
};

}  // namespace pipetrain::data_parallel
