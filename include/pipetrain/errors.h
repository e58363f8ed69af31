#pragma once

#include <stdexcept>

namespace pipetrain {

// Bad input from the user (config, checkpoint, data, command line). The CLI reports it
// as one line and exits with code 2, before any work starts.
class InputError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace pipetrain
