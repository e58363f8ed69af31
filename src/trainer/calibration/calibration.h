#pragma once

#include "planner/cluster.h"

namespace pipetrain::trainer {

// Measures this machine as the planner models it, one device per rank of the job (run it
// with as many ranks as the machine has cores, so that they compete as in training):
// float32 matrix-product peak, the share of it a GPT block's forward and backward reach,
// time per layer pass beyond FLOPs (a tiny block), the optimizer step's streaming rate
// (Adam over 4M parameters), and, with two ranks or more, MPI's point-to-point latency
// and bandwidth between ranks 0 and 1; last, what the engine itself adds per pass and per
// step (a tiny GPT trained on a pipeline of every rank, the planner's prediction of it
// without overheads subtracted). Collective over the world; each rank returns its
// own compute figures and the link figures of ranks 0 and 1.
planner::Cluster calibrate_machine();

}  // namespace pipetrain::trainer
