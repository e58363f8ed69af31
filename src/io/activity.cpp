#include "io/activity.h"

#include <exception>

namespace pipetrain::io {
namespace {

thread_local const Activity* current = nullptr;
thread_local std::string left_by_exception;

}  // namespace

Activity::Activity(std::string what)
    : what_(std::move(what)), outer_(current), exceptions_(std::uncaught_exceptions()) {
  current = this;
  left_by_exception.clear();  // a new activity: an earlier, handled failure is history
}

Activity::~Activity() {
  // Unwinding: the innermost scope left first records itself; outer scopes keep it.
  if (std::uncaught_exceptions() > exceptions_ && left_by_exception.empty())
    left_by_exception = what_;
  current = outer_;
}

std::string failed_activity() {
  std::string failed;
  failed.swap(left_by_exception);  // read once: the next failure starts afresh
  if (failed.empty() && current) failed = current->what();
  return failed;
}

}  // namespace pipetrain::io
