#pragma once

#include <pybind11/pybind11.h>

#include <memory>

namespace pipetrain::python {

namespace py = pybind11;

// A Python object held by C++ code that copies and drops it on threads without the GIL
// (the engine's layer functions, autograd's closures): copies share one reference, and the
// last one releases it under the GIL.
class PyRef {
 public:
  explicit PyRef(py::object object) : object_(std::move(object)) {}
  ~PyRef() {
    if (!Py_IsInitialized()) {
      object_.release();  // the interpreter is gone: nothing left to release into
      return;
    }
    py::gil_scoped_acquire gil;
    object_ = py::object();
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  // Only with the GIL held.
  const py::object& get() const { return object_; }

 private:
  py::object object_;
};
using SharedPy = std::shared_ptr<PyRef>;

inline SharedPy share(py::object object) {
  if (object.is_none()) return nullptr;
  return std::make_shared<PyRef>(std::move(object));
}

}  // namespace pipetrain::python
