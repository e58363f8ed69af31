#include "activation.h"

#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <sstream>
#include <stdexcept>

namespace pipetrain::python {

py::object to_python(const module::Activation& activation) {
  if (activation.size() == 1) return py::cast(activation.front());
  py::tuple tuple(activation.size());
  for (std::size_t i = 0; i < activation.size(); ++i) tuple[i] = py::cast(activation[i]);
  return tuple;
}

module::Activation from_python(const py::handle& value, const std::string& what) {
  if (THPVariable_Check(value.ptr())) return {THPVariable_Unpack(value.ptr())};
  if (py::isinstance<py::tuple>(value) || py::isinstance<py::list>(value)) {
    module::Activation tensors;
    for (const py::handle item : value) {
      if (!THPVariable_Check(item.ptr())) {
        throw std::invalid_argument(what + " holds a " +
                                    std::string(py::str(py::type::of(item).attr("__name__"))) +
                                    ", not only tensors");
      }
      tensors.push_back(THPVariable_Unpack(item.ptr()));
    }
    if (tensors.empty()) throw std::invalid_argument(what + " is an empty " + "sequence");
    return tensors;
  }
  throw std::invalid_argument(what + " is a " +
                              std::string(py::str(py::type::of(value).attr("__name__"))) +
                              ", not a tensor or a tuple of tensors");
}

std::string shapes_of(const module::Activation& activation) {
  std::ostringstream out;
  for (std::size_t i = 0; i < activation.size(); ++i) {
    if (i) out << ", ";
    out << activation[i].sizes();
  }
  return out.str();
}

}  // namespace pipetrain::python
