#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/module/layer.h"
#include "pipetrain/module/pipeline_module.h"
#include "py_ref.h"

namespace pipetrain::python {

// One layer of a pipetrain.pipe.PipelineModule as the engine takes it: built (and seeded)
// by the Python module on the stage that owns it, described everywhere.
struct PythonLayer {
  int index = 0;
  std::string type;        // the class name, for partitioning by type and messages
  int64_t parameters = 0;  // as the partition counted them
  SharedPy built;          // an nn.Module or a callable on this stage; null elsewhere
  std::string tie_key;     // a TiedLayerSpec's key
  std::vector<std::string> tied_parameters;  // names in the module of its tied_weight_attr
  SharedPy forward_fn;                       // a TiedLayerSpec's forward_fn(module, x)
  std::string where;                         // "layer 3 (GptBlock) on stage 1", for errors
  std::string previous;  // the layer feeding it, described alike ("" for the first)
};

// A C++ module holding the Python module's parameters and buffers themselves (the same
// tensors, by the same dotted names; a tensor shared under two names once), so the engine's
// optimizer, gradient reduction, ZeRO, precision and checkpoints act on what the Python
// forward reads.
std::shared_ptr<torch::nn::Module> mirror(const py::handle& module);

// The engine's spec of `layer`: its build hands over the Python object (mirrored); its
// forward calls it holding the GIL for that call only. A Python exception becomes one line
// naming the layer, its stage and the error (and, for a shape error, the layer before it).
module::LayerSpec layer_spec(const PythonLayer& layer);

// loss_fn(outputs, labels) with the GIL; a Python error named as the loss's on `stage`.
module::LossFunction loss_function(SharedPy loss_fn, int stage);

// The text of the Python error being handled ("ValueError: ..."), on one line.
std::string python_error(const py::error_already_set& error);

}  // namespace pipetrain::python
