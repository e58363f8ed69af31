// pipetrain._C: the C++ engine behind the pipetrain package (python/pipetrain). The
// Python modules give DeepSpeed's names; this module only hands their layers, loss, data
// and config to the engine and its results back.
#include <mpi.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/version.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "activation.h"
#include "cli/plan.h"
#include "iterator_source.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/module/partition.h"
#include "pipetrain/topology/process_topology.h"
#include "python_engine.h"
#include "trainer/generation/logprobs.h"
#include "trainer/transformers/hugging_face.h"

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

// Work for one rank (a file written once) inside a collective call: rank 0 does it, and
// every rank ends with the same one line when it is refused.
template <typename Work>
void on_first_rank(Work&& work) {
  collective([&] {
    const auto world = comm::MpiCommunicator::world();
    std::string problem;
    if (world->rank() == 0) {
      try {
        work();
      } catch (const io::InputError& error) {
        problem = error.what();
      }
    }
    // The others wait for it without a deadline (an import reads and writes a whole model;
    // the launcher ends the job if rank 0 dies), then learn what it found.
    MPI_Barrier(world->handle());
    for (const std::string& found : comm::all_gather_text(*world, problem))
      if (!found.empty()) throw io::InputError(found);
  });
}

// pipetrain.plan's keyword arguments, as `pipetrain plan`'s options.
cli::PlanOptions plan_options(const std::string& cluster, int64_t global_batch,
                              const py::dict& limits) {
  cli::PlanOptions o;
  o.cluster = cluster;
  o.global_batch = global_batch;
  for (const auto& [key, value] : limits) {
    const std::string name = key.cast<std::string>();
    auto& l = o.limits;
    if (name == "top")
      o.top = value.cast<int>();
    else if (name == "nodes")
      o.nodes = value.cast<int64_t>();
    else if (name == "devices")
      l.devices = value.cast<int64_t>();
    else if (name == "model_parallel")
      l.tensor = value.cast<int>();
    else if (name == "context_parallel")
      l.context = value.cast<int>();
    else if (name == "sequence_parallel")
      l.sequence_parallel = value.cast<bool>();
    else if (name == "pipe")
      l.pipe = value.cast<int>();
    else if (name == "data")
      l.data = value.cast<int>();
    else if (name == "expert_parallel")
      l.experts = value.cast<int>();
    else if (name == "micro_batch")
      l.micro_batch = value.cast<int64_t>();
    else if (name == "max_micro_batch")
      l.max_micro_batch = value.cast<int64_t>();
    else if (name == "chunks")
      l.chunks = value.cast<int>();
    else if (name == "zero")
      l.zero = value.cast<int>();
    else if (name == "schedule")
      o.schedule = value.cast<std::string>();
    else if (name == "checkpointing")
      o.checkpointing = value.cast<bool>() ? "on" : "off";
    else if (name == "recompute")
      o.recompute = value.cast<std::string>();
    else
      throw py::type_error("pipetrain.plan() got an unexpected keyword argument '" + name + "'");
  }
  return o;
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
          const PythonConfig parsed = read_config(json);
          const bool v = parsed.engine.pipeline.schedule.placement() == schedule::Placement::kV;
          return std::make_pair(static_cast<int>(parsed.layout.chunks),
                                std::string(v ? "v" : "loop"));
        });
      },
      "(chunks per stage, placement 'loop' or 'v') of the config's schedule; ends the job on a bad "
      "key (the engine checks the schedule against the module it is given)");

  m.def(
      "import_hugging_face",
      [](const std::string& folder, const std::string& out) {
        // Every rank splits (collective); rank 0 imports on its own one-rank communicator.
        const auto alone = collective([] {
          const auto world = comm::MpiCommunicator::world();
          return world->split(world->rank(), 0);
        });
        on_first_rank([&] { trainer::import_hugging_face(folder, out, alone); });
      },
      "pipetrain import --hf FOLDER --out OUT on rank 0 (collective)");
  m.def(
      "export",
      [](const std::string& checkpoint, const std::string& tag, const std::string& out,
         const std::string& format) {
        on_first_rank([&] {
          if (format == "hf") {
            trainer::export_hugging_face(checkpoint, tag, out);
          } else if (format == "peft") {
            trainer::export_peft(checkpoint, tag, out);
          } else if (format == "safetensors") {
            checkpoint::export_checkpoint(checkpoint, tag, out);
          } else {
            throw io::InputError("export: format '" + format +
                                 "' is not one of safetensors, hf, peft");
          }
        });
      },
      "pipetrain export on rank 0 (collective)");
  m.def(
      "logprobs",
      [](const std::string& checkpoint, const std::vector<std::string>& data, int tensor_parallel,
         int expert_parallel, int64_t micro_batch, const std::string& out) {
        collective([&] {
          trainer::write_logprobs({.checkpoint = checkpoint,
                                   .data = data,
                                   .tensor_parallel = tensor_parallel,
                                   .expert_parallel = expert_parallel,
                                   .micro_batch = micro_batch,
                                   .out = out});
        });
      },
      "pipetrain logprobs over every rank (collective)");
  m.def(
      "plan",
      [](const py::dict& config, const std::string& cluster, int64_t global_batch,
         const py::dict& limits) {
        const nlohmann::json json = to_json(config);
        const cli::PlanOptions options = plan_options(cluster, global_batch, limits);
        nlohmann::json rows = nlohmann::json::array();
        try {
          const cli::Plan plan = cli::make_plan(options, json);
          const int top = std::min<int>(options.top, static_cast<int>(plan.all.size()));
          for (int i = 0; i < top; ++i) {
            nlohmann::json row = cli::candidate_json(plan.all[i]);
            row["config"] = cli::ready_config(json, plan.all[i].layout);
            rows.push_back(std::move(row));
          }
        } catch (const io::InputError& error) {
          throw py::value_error(error.what());
        }
        return from_json(rows);
      },
      "pipetrain plan --format json's rows, each with the config that trains it");

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
      .def_static(
          "builtin",
          [](const py::dict& config) {
            const nlohmann::json json = to_json(config);
            return collective([&] { return std::make_unique<PythonEngine>(json); });
          },
          "a built-in family's job from a pipetrain train config (collective)")
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
      .def(
          "generate",
          [](PythonEngine& e, const std::vector<std::vector<int64_t>>& prompts,
             int64_t max_new_tokens, double temperature, int64_t top_k, double top_p, uint64_t seed,
             const std::vector<uint64_t>& seeds, const std::vector<int64_t>& stop) {
            const trainer::SamplingOptions options{
                .temperature = temperature,
                .top_k = top_k,
                .seed = seed,
                .top_p = top_p,
                .stop = stop,
                .kv_cache = true,
                .max_in_flight = std::max<int64_t>(1, static_cast<int64_t>(prompts.size()))};
            auto result =
                collective([&] { return e.generate(prompts, max_new_tokens, options, seeds); });
            return py::make_tuple(result.first, result.second);
          },
          "each prompt's sequence and its new tokens' log-probabilities (collective)")
      .def_property_readonly("objective_metrics", &PythonEngine::objective_metrics)
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
      .def_property_readonly("stages",
                             [](PythonEngine& e) { return e.grid().pipe_parallel_size(); })
      .def_property_readonly("global_rank", [](PythonEngine& e) { return e.grid().global_rank(); })
      .def_property_readonly("world_size", [](PythonEngine& e) { return e.grid().world_size(); })
      .def_property_readonly("data_parallel_size",
                             [](PythonEngine& e) { return e.grid().data_parallel_size(); })
      .def_property_readonly("has_own_data",
                             [](PythonEngine& e) { return e.token_windows(false) != nullptr; })
      .def_property_readonly("tokens_per_sample", &PythonEngine::tokens_per_sample)
      .def_property_readonly("flops_per_sample", &PythonEngine::flops_per_sample)
      .def_property_readonly("peak_flops", &PythonEngine::peak_flops)
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
