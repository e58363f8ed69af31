#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace pipetrain::io {

// Bad input from the user (config, checkpoint, data, command line). The CLI reports it
// as one line and exits with code 2, before any work starts.
class InputError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// An exception's message for a person: LibTorch's errors carry a C++ backtrace after
// their message, which is cut off here.
inline std::string error_message(const std::exception& e) {
  const std::string what = e.what();
  const auto backtrace = what.find("\nException raised from ");
  return backtrace == std::string::npos ? what : what.substr(0, backtrace);
}

}  // namespace pipetrain::io
