// hspmd.Cluster (resolve/topology.h): the devices of a cluster and the links between them, read from
// a cluster spec or generated like `hspmd cluster` (planner/cluster_generator.h); hspmd.Profile
// (planner/profile.h): the measured or derived figures the cost model prices a strategy by.
#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "hspmd/planner/cluster_generator.h"
#include "hspmd/planner/profile.h"
#include "hspmd/resolve/topology.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace hspmd::python {

namespace {

using resolve::DeviceSpec;
using resolve::Topology;

// What `hspmd cluster --kinds K --like REFERENCE --per-node N [--inter-node-bandwidth B] [--name X]`
// writes, as a Cluster.
Topology generate_cluster(const std::string& kinds, const Topology& like, int per_node,
                          std::optional<double> inter_node_bandwidth, std::optional<std::string> name) {
  planner::ClusterRecipe recipe = planner::recipe_like(like, planner::parse_kind_counts(kinds));
  recipe.devices_per_node = per_node;
  if (inter_node_bandwidth) recipe.inter_node_bandwidth = *inter_node_bandwidth;
  int total = 0;
  for (const planner::GeneratedKind& k : recipe.kinds) total += k.count;
  recipe.name = name ? *name : "generated-" + std::to_string(total);
  return Topology::from_json_text(planner::cluster_json(recipe), recipe.name);
}

void bind_topology(nb::module_& m) {
  nb::class_<DeviceSpec>(m, "Device", "One device of a cluster spec.")
      .def_ro("id", &DeviceSpec::id, "Its id, which is its rank.")
      .def_ro("node", &DeviceSpec::node, "The node it sits in.")
      .def_ro("type", &DeviceSpec::type, "Its kind (\"H800\", \"cpu\"), the profile's device kind.")
      .def_ro("memory", &DeviceSpec::memory, "Memory in bytes.")
      .def_ro("peak_flops", &DeviceSpec::peak_flops, "Peak FLOP/s.")
      .def("__repr__", [](const DeviceSpec& d) {
        return "Device(id=" + std::to_string(d.id) + ", node=" + std::to_string(d.node) + ", type='" + d.type + "')";
      });

  nb::class_<Topology>(m, "Cluster",
                       "The devices of a cluster and the bandwidth between any two.")
      .def_static("from_file", &Topology::from_file, "path"_a, "Reads a cluster spec (JSON).")
      .def_static(
          "from_dict", [](const nb::dict& d, const std::string& source) {
            return Topology::from_json_text(json_text(d), source);
          },
          "d"_a, "source"_a = "<dict>", "A cluster from a dict with the spec's keys.")
      .def_static("generate", &generate_cluster, "kinds"_a, "like"_a, "per_node"_a = 8,
                  "inter_node_bandwidth"_a = nb::none(), "name"_a = nb::none(),
                  "A large cluster like `hspmd cluster`: kinds \"H800:384,H20:640\" take their memory, peak\n"
                  "and intra-node bandwidth from the devices of that type in `like`.")
      .def_prop_ro("name", &Topology::name, "The spec's name.")
      .def_prop_ro("num_devices", &Topology::num_devices, "Devices (ranks 0..num_devices-1).")
      .def_prop_ro(
          "devices",
          [](const Topology& t) {
            nb::list out;
            for (int i = 0; i < t.num_devices(); ++i) out.append(t.device(i));
            return out;
          },
          nb::sig("def devices(self) -> list[Device]"), "Every device, by id.")
      .def("bandwidth", &Topology::bandwidth, "a"_a, "b"_a, "Bytes/s from device a to device b (inf for a == b).")
      .def(
          "tier", [](const Topology& t, int a, int b) { return std::string(resolve::link_tier_name(t.tier(a, b))); },
          "a"_a, "b"_a, "The link tier between a and b: \"local\", \"intra-node\" or \"inter-node\".")
      .def("__repr__", [](const Topology& t) {
        return "Cluster(name='" + t.name() + "', devices=" + std::to_string(t.num_devices()) + ")";
      });
}

void bind_profile(nb::module_& m) {
  nb::class_<planner::Profile>(m, "Profile",
                               "The figures the cost model prices a strategy by (`hspmd profile`;\n"
                               "docs/profile-format.md).")
      .def_static("from_file", &planner::Profile::from_file, "path"_a, "Reads a profile (JSON).")
      .def_static(
          "from_dict", [](const nb::dict& d, const std::string& source) {
            return planner::Profile::from_json_text(json_text(d), source);
          },
          "d"_a, "source"_a = "<dict>", "A profile from a dict with the file's keys.")
      .def("to_json", &planner::Profile::to_json_text, "The profile as JSON text.")
      .def_ro("source", &planner::Profile::source, "How the figures were obtained.")
      .def_ro("model", &planner::Profile::model, "The model config it was made for.");
}

}  // namespace

void bind_cluster(nb::module_& m) {
  bind_topology(m);
  bind_profile(m);
}

}  // namespace hspmd::python
