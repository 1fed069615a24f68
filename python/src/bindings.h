// The parts of the Python module `hspmd`, one per value or analysis (docs/python.md); module.cc
// calls each on the module it defines.
#pragma once

#include <string>

#include <nanobind/nanobind.h>

namespace hspmd::python {

void bind_strategy(nanobind::module_& m);
void bind_model(nanobind::module_& m);
void bind_cluster(nanobind::module_& m);  // Cluster and Profile
void bind_explain(nanobind::module_& m);
void bind_plan(nanobind::module_& m);     // plan, explain_switch
void bind_data(nanobind::module_& m);     // Dataset and its batches
void bind_trainer(nanobind::module_& m);  // init, Trainer, StepMetrics, Shard

// A Python dict (or list) as JSON text, through the json module, so that a dict and the file with
// the same content are read by the same C++ parser and give the same errors.
std::string json_text(const nanobind::handle& value);
// JSON text as Python objects (json.loads).
nanobind::object json_value(const std::string& text);

}  // namespace hspmd::python
