// hspmd.Model (models/model.h): a model read from a config.json or a Hugging Face save_pretrained
// directory by models::load_model, with the facts `hspmd model info` prints (type, layers,
// vocabulary, parameter count, each parameter's name and shape).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "hspmd/models/model_factory.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace hspmd::python {

namespace {

// A shape as a Python tuple of ints, the way NumPy writes shapes.
nb::tuple shape_tuple(const Shape& shape) {
  nb::list dims;
  for (int64_t d : shape.dims()) dims.append(d);
  return nb::tuple(dims);
}

// Python shares ownership of the model; nanobind holds shared pointers to non-const objects (the
// bindings expose const methods only).
std::shared_ptr<models::Model> mutable_model(std::shared_ptr<const models::Model> model) {
  return std::const_pointer_cast<models::Model>(std::move(model));
}

}  // namespace

void bind_model(nb::module_& m) {
  nb::class_<models::Model>(m, "Model",
                            "A model hspmd builds from a Hugging Face style config.json (by its\n"
                            "\"model_type\"). Model(path) reads a config.json or a save_pretrained directory;\n"
                            "keys hspmd would compute differently are refused with hspmd.Error.")
      .def(nb::new_([](const std::string& path) { return mutable_model(models::load_model(path)); }), "path"_a,
           "Reads a config.json, or the config.json of a save_pretrained directory.")
      .def_static(
          "from_dict", [](const nb::dict& config, const std::string& source) {
            return mutable_model(models::model_from_config_text(json_text(config), source));
          },
          "config"_a, "source"_a = "<dict>", "A model from a config dict (a config.json's content).")
      .def_prop_ro("model_type", &models::Model::model_type, "The config's \"model_type\" (\"llama\").")
      .def_prop_ro("num_layers", &models::Model::num_layers, "Decoder layers.")
      .def_prop_ro("vocab_size", &models::Model::vocab_size, "Token ids the model embeds: [0, vocab_size).")
      .def_prop_ro("max_sequence_length", &models::Model::max_sequence_length,
                   "The longest sequence the model may be trained on.")
      .def_prop_ro(
          "num_parameters", [](const models::Model& model) { return models::num_parameters(model); },
          "The elements of every parameter together.")
      .def(
          "parameters",
          [](const models::Model& model) {
            nb::list out;
            for (const models::ParamSpec& p : model.parameters()) out.append(nb::make_tuple(p.name, shape_tuple(p.shape)));
            return out;
          },
          nb::sig("def parameters(self) -> list[tuple[str, tuple[int, ...]]]"),
          "Every parameter as (Hugging Face name, global shape), in the model's order.")
      .def(
          "config", [](const models::Model& model) { return json_value(model.config_json().dump()); },
          "The config as a dict, in hspmd's canonical form (equal configs give equal dicts).")
      .def("summary", &models::Model::summary, "One line: layers, hidden size, heads, vocabulary, parameters.")
      .def("__repr__", [](const models::Model& model) {
        return "Model(model_type='" + model.model_type() + "', " + model.summary() + ")";
      });
}

}  // namespace hspmd::python
