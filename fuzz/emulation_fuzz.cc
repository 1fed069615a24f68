// Emulated devices (runtime/emulation.h), for a world of 1 to 8 ranks chosen by the first byte.
#include "fuzz/fuzz_input.h"
#include "hspmd/runtime/emulation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int world_size = 1 + data[0] % 8;
  hspmd::fuzz::expect_clean([&] {
    (void)hspmd::runtime::EmulatedDevices::from_json_text(hspmd::fuzz::as_text(data + 1, size - 1), "fuzz.json",
                                                          world_size);
  });
  return 0;
}
