// hspmd.Strategy (sharding/strategy.h): a parallel strategy read from a file, a dict or JSON text,
// written back as JSON or a dict; its pipelines and stages readable as attributes.
#include <nanobind/nanobind.h>
#include <nanobind/operators.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "hspmd/sharding/strategy.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace hspmd::python {

using sharding::PipelineSpec;
using sharding::StageSpec;
using sharding::Strategy;

void bind_strategy(nb::module_& m) {
  nb::class_<StageSpec>(m, "Stage", "One pipeline stage: its ranks (CP outer, TP inner) and decoder layers.")
      .def_ro("ranks", &StageSpec::ranks, "The stage's ranks, context-parallel coordinate outer, TP inner.")
      .def_ro("first_layer", &StageSpec::first_layer, "First decoder layer (inclusive).")
      .def_ro("last_layer", &StageSpec::last_layer, "Last decoder layer (inclusive).")
      .def_ro("cp", &StageSpec::cp, "Context-parallel degree.")
      .def_ro("sequence_parallel", &StageSpec::sequence_parallel,
              "Activations between TP blocks split by tokens over the TP ranks.")
      .def_prop_ro("tp", &StageSpec::tp, "Tensor-parallel degree: ranks / cp.")
      .def("__repr__", [](const StageSpec& s) {
        return "Stage(ranks=" + nb::cast<std::string>(nb::repr(nb::cast(s.ranks))) + ", layers=" +
               std::to_string(s.first_layer) + "-" + std::to_string(s.last_layer) + ", cp=" + std::to_string(s.cp) +
               ")";
      });

  nb::class_<PipelineSpec>(m, "Pipeline", "One data-parallel replica: its micro-batches and stages.")
      .def_ro("micro_batch_size", &PipelineSpec::micro_batch_size, "Sequences per micro-batch.")
      .def_ro("num_micro_batches", &PipelineSpec::num_micro_batches, "Micro-batches per step.")
      .def_ro("stages", &PipelineSpec::stages, "Stages in pipeline order.")
      .def("__repr__", [](const PipelineSpec& p) {
        return "Pipeline(micro_batch_size=" + std::to_string(p.micro_batch_size) +
               ", num_micro_batches=" + std::to_string(p.num_micro_batches) +
               ", stages=" + std::to_string(p.stages.size()) + ")";
      });

  nb::class_<Strategy>(m, "Strategy",
                       "A (possibly heterogeneous) parallel strategy: pipelines -> stages -> {ranks, layers}\n"
                       "(the format: examples/strategies/). Read with from_file, from_dict or from_json; any key\n"
                       "hspmd does not know is refused with hspmd.Error naming it.")
      .def_static("from_file", &Strategy::from_file, "path"_a, "Reads a strategy file (JSON).")
      .def_static(
          "from_json", [](const std::string& text, const std::string& source) {
            return Strategy::from_json_text(text, source);
          },
          "text"_a, "source"_a = "<json>", "Parses strategy JSON text; errors name `source`.")
      .def_static(
          "from_dict", [](const nb::dict& d, const std::string& source) {
            return Strategy::from_json_text(json_text(d), source);
          },
          "d"_a, "source"_a = "<dict>",
          "A strategy from a dict with the file's keys; errors name `source` and the key at fault.")
      .def("to_json", &Strategy::to_json_text, "The strategy as JSON text (what from_json reads back).")
      .def(
          "to_dict", [](const Strategy& s) { return json_value(s.to_json_text()); },
          "The strategy as a dict (what from_dict reads back).")
      .def("validate", &Strategy::validate, "num_layers"_a,
           "Raises hspmd.Error unless every pipeline covers layers 0..num_layers-1 exactly once.")
      .def_ro("name", &Strategy::name, "The strategy's name.")
      .def_ro("zero", &Strategy::zero, "The ZeRO stage across pipelines: 0, 1 or 2.")
      .def_prop_ro("zero1", &Strategy::shards_optimizer_states,
                   "Whether the optimizer states are sharded across pipelines (ZeRO stage 1 or more).")
      .def_ro("recompute", &Strategy::recompute, "Activation recomputation.")
      .def_ro("pipelines", &Strategy::pipelines, "The pipelines (data-parallel replicas).")
      .def_prop_ro("ranks", &Strategy::ranks, "Every rank used, ascending.")
      .def(nb::self == nb::self)
      .def("__repr__", [](const Strategy& s) {
        return "Strategy(name='" + s.name + "', pipelines=" + std::to_string(s.pipelines.size()) +
               ", ranks=" + std::to_string(s.ranks().size()) + ")";
      });
}

}  // namespace hspmd::python
