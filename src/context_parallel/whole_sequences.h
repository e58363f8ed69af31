#pragma once

// Generation feeds one position at a time, which no group can split: while a
// WholeSequences lives on this thread, layers compute on whole sequences even where the
// job splits them (sequence parallelism over the model group, context parallelism over
// the context group).
namespace pipetrain::context_parallel {

class WholeSequences {
 public:
  WholeSequences();
  ~WholeSequences();
  WholeSequences(const WholeSequences&) = delete;
  WholeSequences& operator=(const WholeSequences&) = delete;

 private:
  bool was_whole_;
};

// Whether a WholeSequences is in scope on this thread.
bool whole_sequences();

}  // namespace pipetrain::context_parallel
