#include "iterator_source.h"

#include <stdexcept>
#include <string>

#include "activation.h"
#include "python_layer.h"

namespace pipetrain::python {

engine::MicroBatch IteratorSource::next() {
  std::string failure;
  {
    py::gil_scoped_acquire gil;
    try {
      py::object batch = py::reinterpret_steal<py::object>(PyIter_Next(iterator_->get().ptr()));
      if (!batch) {
        if (PyErr_Occurred()) throw py::error_already_set();
        throw engine::DataExhausted();
      }
      if (!(py::isinstance<py::tuple>(batch) || py::isinstance<py::list>(batch)) ||
          py::len(batch) != 2) {
        throw std::invalid_argument(
            "the data iterator gave a " +
            std::string(py::str(py::type::of(batch).attr("__name__"))) +
            ": each next() must give (inputs, labels), as DeepSpeed's pipeline engine reads it");
      }
      const py::sequence pair = batch.cast<py::sequence>();
      return {from_python(pair[0], "the batch's inputs"), from_python(pair[1], "its labels")};
    } catch (py::error_already_set& error) {
      failure = "the data iterator raised " + python_error(error);
    } catch (const std::invalid_argument& error) {
      failure = error.what();
    }
  }
  throw std::runtime_error(failure);
}

}  // namespace pipetrain::python
