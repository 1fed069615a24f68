// safetensors files (core/safetensors.h): the header's JSON, dtypes, shapes and data offsets; every
// tensor a valid header lists is then read, so offsets that pass validation must also be readable.
#include "fuzz/fuzz_input.h"
#include "fuzz/temp_files.h"
#include "hspmd/core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hspmd::fuzz::scratch_dir() + "/input.safetensors";
  hspmd::fuzz::write_file(path, data, size);
  hspmd::fuzz::expect_clean([&] {
    hspmd::safetensors::Reader reader(path);
    for (const auto& t : reader.tensors()) {
      if (t.nbytes() > (1u << 20)) continue;  // a valid header may describe large tensors: not read
      (void)reader.read(t.name);
      if (t.shape.rank() >= 1 && t.shape[0] > 0) (void)reader.read_rows(t.name, 0, 1);
    }
  });
  return 0;
}
