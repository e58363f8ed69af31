// pipetrain._C: the C++ engine behind the pipetrain package (python/pipetrain). The
// Python modules give DeepSpeed's names; this module only hands their layers, loss, data
// and config to the engine and its results back.
#include <mpi.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/version.h>

#include <nlohmann/json.hpp>

#include "activation.h"
#include "iterator_source.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/module/partition.h"
#include "pipetrain/topology/process_topology.h"
#include "python_engine.h"

namespace py = pybind11;
using pipetrain::python::PythonEngine;

namespace pipetrain::python {
namespace {

nlohmann::json to_json(const py::handle& value) {
  const py::module_ json = py::module_::import("json");
  return nlohmann::json::parse(json.attr("dumps")(value).cast<std::string>());
}

py::object from_json(const nlohmann::json& value) {
  return py::module_::import("json").attr("loads")(value.dump());
}

// Runs `work` without the GIL. An error ends the job on every rank with one line, as the
// CLI's (comm::fail_rank); the end of the data comes back as StopIteration.
template <typename Work>
auto collective(Work&& work) -> decltype(work()) {
  try {
    py::gil_scoped_release released;
    return work();
  } catch (const engine::DataExhausted&) {
    throw py::stop_iteration("the data ran out");
  } catch (const std::exception& error) {
    comm::fail_rank(error);
  }
}

std::vector<PythonLayer> layers_of(const py::list& entries) {
  std::vector<PythonLayer> layers;
  for (const py::handle entry : entries) {
    const py::dict d = entry.cast<py::dict>();
    PythonLayer layer;
    layer.index = d["index"].cast<int>();
    layer.type = d["type"].cast<std::string>();
    layer.parameters = d["parameters"].cast<int64_t>();
    layer.built = share(py::reinterpret_borrow<py::object>(d["built"]));
    layer.tie_key = d["tie_key"].cast<std::string>();
    layer.tied_parameters = d["tied_parameters"].cast<std::vector<std::string>>();
    layer.forward_fn = share(py::reinterpret_borrow<py::object>(d["forward_fn"]));
    layer.where = d["where"].cast<std::string>();
    layer.previous = d["previous"].cast<std::string>();
    layers.push_back(std::move(layer));
  }
  return layers;
}

py::list outputs_of(const std::vector<module::Activation>& outputs) {
  py::list list;
  for (const auto& output : outputs) list.append(to_python(output));
  return list;
}

// The data of a step: a Python iterator, or (None) the engine's token windows.
template <typename Work>
auto with_data(PythonEngine& engine, const py::object& iterator, bool validation, Work&& work) {
  if (iterator.is_none()) {
    engine::MicroBatchSource* windows = engine.token_windows(validation);
    if (!windows) throw py::value_error("no data: give a data iterator or TokenWindows");
    return collective([&] { return work(windows); });
  }
  IteratorSource source(share(iterator));
  return collective([&] { return work(&source); });
}

}  // namespace
}  // namespace pipetrain::python

PYBIND11_MODULE(_C, m) {
  using namespace pipetrain;
  using namespace pipetrain::python;
  m.doc() = "pipetrain's C++ engine (use the pipetrain package, not this module)";
  m.attr("torch_version") = TORCH_VERSION;

  m.def("start_rank", [] {
    collective([] { comm::start_rank(); });
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return std::make_pair(rank, size);
  });
  m.def("finish_rank", [] { comm::finish_rank(); });
  m.def(
      "broadcast_text",
      [](const std::string& text) {
        return collective([&] {
          int length = static_cast<int>(text.size());
          MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
          std::string shared = text;
          shared.resize(static_cast<std::size_t>(length));
          MPI_Bcast(shared.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
          return shared;
        });
      },
      "rank 0's text, on every rank (collective)");
  m.def(
      "grid_ranks",
      [](int stages, int data) {
        const topology::ProcessTopology topology =
            topology::pipe_data_parallel_topology(stages, data);
        std::vector<std::vector<int>> ranks(stages, std::vector<int>(data));
        for (int s = 0; s < stages; ++s)
          for (int d = 0; d < data; ++d) ranks[s][d] = topology.rank({s, d});
        return ranks;
      },
      "rank of (stage, data index) on the pipe x data grid, as the engine lays it out");
  m.def("partition", [](const std::string& method, const std::vector<int64_t>& parameters,
                        const std::vector<std::string>& types, int parts) {
    try {
      module::LayerFacts facts{parameters, types, {}};
      return module::partition_layers(module::PartitionMethod(method), facts, parts);
    } catch (const io::InputError& error) {
      throw py::value_error(error.what());
    }
  });

  m.def(
      "schedule_shape",
      [](const py::dict& config) {
        const nlohmann::json json = to_json(config);
        return collective([&] {
          const engine::TrainingConfig parsed = read_config(json);
          const bool v = parsed.pipeline.placement() == schedule::Placement::kV;
          return std::make_pair(static_cast<int>(parsed.pipeline.chunks),
                                std::string(v ? "v" : "loop"));
        });
      },
      "(chunks per stage, placement 'loop' or 'v') of the config's schedule; ends the job on a bad "
      "config");

  py::class_<PythonEngine>(m, "Engine")
      .def(py::init([](const py::list& layers, py::object loss_fn, int stages, int chunks,
                       std::vector<int> parts, uint64_t seed, int checkpoint_interval,
                       std::vector<std::string> checkpointable, const py::dict& config) {
        ModuleLayout layout{
            stages, chunks, std::move(parts), seed, checkpoint_interval, std::move(checkpointable)};
        std::vector<PythonLayer> entries = layers_of(layers);
        const nlohmann::json json = to_json(config);
        return collective([&] {
          return std::make_unique<PythonEngine>(entries, share(std::move(loss_fn)), layout, json);
        });
      }))
      .def("train_batch",
           [](PythonEngine& e, const py::object& data) {
             return with_data(e, data, false,
                              [&](engine::MicroBatchSource* s) { return e.train_batch(s); });
           })
      .def("eval_batch",
           [](PythonEngine& e, const py::object& data, bool return_outputs) {
             auto [loss, outputs] = with_data(e, data, true, [&](engine::MicroBatchSource* s) {
               return e.eval_batch(s, return_outputs);
             });
             return py::make_tuple(loss, outputs_of(outputs));
           })
      .def("use_token_windows",
           [](PythonEngine& e, const std::vector<std::string>& paths, const std::string& type,
              int token_bytes, int64_t vocab_size, int64_t context, double validation_fraction) {
             collective([&] {
               e.use_token_windows(paths, type, token_bytes, vocab_size, context,
                                   validation_fraction);
             });
           })
      .def("save_checkpoint",
           [](PythonEngine& e, const std::string& directory, const std::string& tag,
              const py::object& client_state) {
             const nlohmann::json state = to_json(client_state);
             collective([&] { e.save_checkpoint(directory, tag, state); });
           })
      .def("load_checkpoint",
           [](PythonEngine& e, const std::string& directory, const std::string& tag) {
             const nlohmann::json state =
                 collective([&] { return e.load_checkpoint(directory, tag); });
             return from_json(state);
           })
      .def_property_readonly("global_steps",
                             [](PythonEngine& e) { return e.engine().global_steps(); })
      .def_property_readonly("stage_id", [](PythonEngine& e) { return e.grid().stage_id(); })
      .def_property_readonly("data_parallel_id",
                             [](PythonEngine& e) { return e.grid().data_parallel_id(); })
      .def_property_readonly("holds_output",
                             [](PythonEngine& e) { return e.engine().holds_output(); })
      .def_property_readonly("micro_batches",
                             [](PythonEngine& e) { return e.engine().micro_batches(); })
      .def_property_readonly(
          "micro_batch_size",
          [](PythonEngine& e) { return e.engine().config().train_micro_batch_size_per_gpu; })
      .def_property_readonly("train_batch_size",
                             [](PythonEngine& e) { return e.engine().config().train_batch_size; })
      .def_property_readonly("grad_norm",
                             [](PythonEngine& e) { return e.engine().last_grad_norm(); })
      .def_property_readonly("learning_rate",
                             [](PythonEngine& e) { return e.engine().last_learning_rate(); })
      .def_property_readonly("loss_scale", [](PythonEngine& e) { return e.engine().loss_scale(); })
      .def_property_readonly("device", [](PythonEngine& e) { return e.engine().device().str(); })
      .def_property_readonly("config",
                             [](PythonEngine& e) { return from_json(e.effective_config()); })
      .def("set_grad_norm_reporting",
           [](PythonEngine& e, bool on) { e.engine().set_grad_norm_reporting(on); })
      .def("set_progress_report",
           [](PythonEngine& e, bool on) { e.engine().set_progress_report(on); })
      .def(
          "named_parameters",
          [](PythonEngine& e) { return e.engine().module().named_parameters(); },
          "this stage's trained parameters, named as in checkpoints");
}
