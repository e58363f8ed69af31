#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/examples.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "trainer/job_config.h"

namespace pipetrain::trainer {

// The checkpoint a DPO run's reference is (objective.reference frozen or adapters_off):
// objective.reference_checkpoint, else the one `load` names, or, where `load` resumes a DPO
// run (it is the run's own save folder), the reference that run trained against. InputError where
// there is none, where it is not the policy's architecture, or, for adapters_off, where the policy
// has no adapters or the checkpoint carries some.
std::string reference_checkpoint(const JobConfig& policy);

// The reference's log-probability of each example (the sum over its completion tokens),
// on every rank of `ranks`. Collective: a frozen reference (or the base under adapters) is
// scored through the pipeline at the policy's stages and tensor-parallel size (its
// data-parallel replicas sharing the examples), precision and device, its model held only
// while it scores, in rows of the policy's micro-batch size and `context`, with the policy's
// loss in float32 (so a reference equal to the policy gives its numbers); a
// precomputed one is read from its file, checked to be of these examples. A line on what it is goes
// to `summary`.
std::vector<double> reference_logprobs(const JobConfig& policy, const data::ExampleList& examples,
                                       int64_t context,
                                       const std::shared_ptr<comm::MpiCommunicator>& ranks,
                                       std::string* summary);

}  // namespace pipetrain::trainer
