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

// An exception's message for a person, on one line: LibTorch's C++ backtrace after the
// message is cut off, and a failed allocation (std::bad_alloc, or LibTorch's CPU or CUDA
// allocator) says what was being done (see Activity) and, where known, its size, e.g.
// "out of memory while building the model's layers: tried to allocate 48.0 GiB".
std::string error_message(const std::exception& e);

}  // namespace pipetrain::io
