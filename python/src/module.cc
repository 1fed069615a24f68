// The Python module `hspmd`: hspmd's values and analyses for Python scripts (docs/python.md).
// hspmd::Error arrives as the Python exception hspmd.Error carrying hspmd's one-line message (what
// the CLI prints after "hspmd: error: ").
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "hspmd/core/error.h"

namespace nb = nanobind;

namespace hspmd::python {

std::string json_text(const nb::handle& value) {
  return nb::cast<std::string>(nb::module_::import_("json").attr("dumps")(value));
}

nb::object json_value(const std::string& text) { return nb::module_::import_("json").attr("loads")(text); }

}  // namespace hspmd::python

NB_MODULE(hspmd, m) {
  m.doc() =
      "hspmd: hierarchical and heterogeneous SPMD training (the Hetu v2 / HSPMD paper).\n\n"
      "Values: Strategy, Model, Cluster, Profile. Analysis: explain(model, strategy, ...), the\n"
      "structured form of `hspmd explain --strategy`. Training, SPMD like torchrun: hspmd.init(),\n"
      "hspmd.Trainer(model, strategy, **options) (every `hspmd train` option), trainer.step(batch);\n"
      "tensors through DLPack (Trainer.parameters, state_dict, gather). Errors raise hspmd.Error with\n"
      "hspmd's message.";
  m.attr("__version__") = HSPMD_VERSION;
  nb::exception<hspmd::Error>(m, "Error", PyExc_RuntimeError);
  hspmd::python::bind_strategy(m);
  hspmd::python::bind_model(m);
  hspmd::python::bind_cluster(m);
  hspmd::python::bind_explain(m);
  hspmd::python::bind_plan(m);
  hspmd::python::bind_data(m);
  hspmd::python::bind_trainer(m);
}
