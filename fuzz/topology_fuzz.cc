// Cluster spec (resolve/topology.h): devices, nodes, link bandwidths.
#include "fuzz/fuzz_input.h"
#include "hspmd/resolve/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hspmd::fuzz::expect_clean([&] {
    const auto topo = hspmd::resolve::Topology::from_json_text(hspmd::fuzz::as_text(data, size), "fuzz.json");
    for (int a = 0; a < topo.num_devices() && a < 8; ++a) {
      for (int b = 0; b < topo.num_devices() && b < 8; ++b) (void)topo.tier(a, b);
    }
  });
  return 0;
}
