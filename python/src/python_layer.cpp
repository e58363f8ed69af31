#include "python_layer.h"

#include <torch/csrc/autograd/python_variable.h>
#include <torch/nn/module.h>

#include <set>
#include <stdexcept>

#include "activation.h"

namespace pipetrain::python {
namespace {

void mirror_into(const py::handle& module, torch::nn::Module& into,
                 std::set<const c10::TensorImpl*>& seen) {
  for (const auto& [name, value] : module.attr("_parameters").cast<py::dict>()) {
    if (value.is_none()) continue;
    const at::Tensor tensor = THPVariable_Unpack(value.ptr());
    if (!seen.insert(tensor.unsafeGetTensorImpl()).second) continue;
    into.register_parameter(name.cast<std::string>(), tensor, tensor.requires_grad());
  }
  for (const auto& [name, value] : module.attr("_buffers").cast<py::dict>()) {
    if (value.is_none()) continue;
    into.register_buffer(name.cast<std::string>(), THPVariable_Unpack(value.ptr()));
  }
  for (const auto& [name, child] : module.attr("_modules").cast<py::dict>()) {
    if (child.is_none()) continue;
    auto mirrored = std::make_shared<torch::nn::Module>(
        std::string(py::str(py::type::of(child).attr("__name__"))));
    mirror_into(child, *mirrored, seen);
    into.register_module(name.cast<std::string>(), mirrored);
  }
}

bool is_module(const py::handle& object) {
  // Looked up each time (once per layer built): a static would outlive the interpreter.
  return py::isinstance(object, py::module_::import("torch.nn").attr("Module"));
}

// The first line of a Python error, with its type.
std::string one_line(std::string text) {
  const auto end = text.find('\n');
  if (end != std::string::npos) text.resize(end);
  return text;
}

// Calls `fn` on `inputs` (and `module` first, for a tied forward_fn) under the GIL.
module::Activation call(const SharedPy& fn, const SharedPy& module, const module::Activation& x,
                        const PythonLayer& layer) {
  std::string failure;
  {
    py::gil_scoped_acquire gil;
    try {
      const py::object out =
          module ? fn->get()(module->get(), to_python(x)) : fn->get()(to_python(x));
      return from_python(out, "its output");
    } catch (py::error_already_set& error) {
      failure = "raised " + python_error(error);
    } catch (const std::invalid_argument& error) {
      failure = "failed: " + std::string(error.what());
    }
  }
  std::string message = layer.where + " " + failure;
  if (!layer.previous.empty())
    message += " (its input, from " + layer.previous + ": " + shapes_of(x) + ")";
  throw std::runtime_error(message);
}

}  // namespace

std::string python_error(const py::error_already_set& error) {
  return one_line(std::string(py::str(error.type().attr("__name__"))) + ": " +
                  std::string(py::str(error.value())));
}

std::shared_ptr<torch::nn::Module> mirror(const py::handle& module) {
  auto mirrored = std::make_shared<torch::nn::Module>(
      std::string(py::str(py::type::of(module).attr("__name__"))));
  std::set<const c10::TensorImpl*> seen;
  mirror_into(module, *mirrored, seen);
  return mirrored;
}

module::LayerSpec layer_spec(const PythonLayer& layer) {
  module::LayerSpec spec;
  spec.type = layer.type;
  spec.count_parameters = [count = layer.parameters] { return count; };
  spec.tie_key = layer.tie_key;
  spec.tied_parameters = layer.tied_parameters;
  spec.build = [layer] {
    if (!layer.built) throw std::logic_error(layer.where + " is not built on this stage");
    std::shared_ptr<torch::nn::Module> module;
    {
      py::gil_scoped_acquire gil;
      if (is_module(layer.built->get())) module = mirror(layer.built->get());
    }
    return module::Layer{module, [layer](const module::Activation& x) {
                           return call(layer.built, nullptr, x, layer);
                         }};
  };
  if (layer.forward_fn) {
    spec.tied_forward = [layer](torch::nn::Module&, const module::Activation& x) {
      return call(layer.forward_fn, layer.built, x, layer);
    };
  }
  return spec;
}

module::LossFunction loss_function(SharedPy loss_fn, int stage) {
  return [loss_fn, stage](const module::Activation& outputs, const comm::TensorList& labels) {
    std::string failure;
    {
      py::gil_scoped_acquire gil;
      try {
        const py::object loss = loss_fn->get()(to_python(outputs), to_python(labels));
        if (!THPVariable_Check(loss.ptr()))
          throw std::invalid_argument("returned a " +
                                      std::string(py::str(py::type::of(loss).attr("__name__"))) +
                                      ", not a tensor");
        return THPVariable_Unpack(loss.ptr());
      } catch (py::error_already_set& error) {
        failure = "raised " + python_error(error);
      } catch (const std::invalid_argument& error) {
        failure = error.what();
      }
    }
    throw std::runtime_error("loss_fn on stage " + std::to_string(stage) + " " + failure +
                             " (outputs " + shapes_of(outputs) + ", labels " + shapes_of(labels) +
                             ")");
  };
}

}  // namespace pipetrain::python
