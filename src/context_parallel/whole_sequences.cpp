#include "context_parallel/whole_sequences.h"

#include <utility>

namespace pipetrain::context_parallel {
namespace {

thread_local bool whole = false;

}  // namespace

WholeSequences::WholeSequences() : was_whole_(std::exchange(whole, true)) {}

WholeSequences::~WholeSequences() {
  whole = was_whole_;
}

bool whole_sequences() {
  return whole;
}

}  // namespace pipetrain::context_parallel
