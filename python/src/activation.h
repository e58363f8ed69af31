#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "pipetrain/module/layer.h"

namespace pipetrain::python {

namespace py = pybind11;

// Activations as DeepSpeed's layers see them: one tensor as itself, several as a tuple.
// Both need the GIL.
py::object to_python(const module::Activation& activation);
// A tensor, or a tuple or list of tensors; std::invalid_argument naming `what` otherwise.
module::Activation from_python(const py::handle& value, const std::string& what);

// "[2, 16, 32]" for each tensor, for messages.
std::string shapes_of(const module::Activation& activation);

}  // namespace pipetrain::python
