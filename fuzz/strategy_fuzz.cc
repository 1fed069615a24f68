// Strategy JSON (sharding/strategy.h): pipelines, stages, rank ranges, layer ranges.
#include "fuzz/fuzz_input.h"
#include "hspmd/sharding/strategy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hspmd::fuzz::expect_clean([&] {
    const auto strategy = hspmd::sharding::Strategy::from_json_text(hspmd::fuzz::as_text(data, size), "fuzz.json");
    (void)strategy.ranks();
  });
  return 0;
}
