#pragma once

#include <string>

namespace pipetrain::io {

// What this thread is doing, in words for a person ("building the model's layers"), for
// failures that cannot say it themselves: an allocation failing deep inside LibTorch knows
// its size but not what it was for. Scopes nest; the innermost one an exception leaves is
// kept for the handler that reports it (see failed_activity).
class Activity {
 public:
  explicit Activity(std::string what);
  ~Activity();
  Activity(const Activity&) = delete;
  Activity& operator=(const Activity&) = delete;

  const std::string& what() const { return what_; }

 private:
  std::string what_;
  const Activity* outer_;
  int exceptions_ = 0;  // in flight at construction
};

// The innermost activity the exception being handled left (read once), else the current
// activity; empty when there was none.
std::string failed_activity();

}  // namespace pipetrain::io
