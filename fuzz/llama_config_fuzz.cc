// Model config.json of every decoder family (models/llama_config.h, models/decoder_families.h),
// including validate(), the parameter count and the written config.
#include "fuzz/fuzz_input.h"
#include "hspmd/models/llama_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hspmd::fuzz::expect_clean([&] {
    const auto config = hspmd::models::LlamaConfig::from_json_text(hspmd::fuzz::as_text(data, size), "fuzz.json");
    config.validate();
    (void)config.num_parameters();
    (void)config.to_json_text();
  });
  return 0;
}
