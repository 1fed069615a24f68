// Token dataset index (data/token_dataset.h). The input is index.bin's length L (2 bytes,
// little-endian), index.bin (L bytes), then tokens.bin (the rest); every document of a dataset
// that opens is read, so a header that passes validation must describe readable tokens.
#include <algorithm>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "fuzz/temp_files.h"
#include "hspmd/data/token_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t index_bytes = std::min<size_t>(size - 2, data[0] | (size_t{data[1]} << 8));
  const std::string& dir = hspmd::fuzz::scratch_dir();
  hspmd::fuzz::write_file(dir + "/" + hspmd::data::kIndexFile, data + 2, index_bytes);
  hspmd::fuzz::write_file(dir + "/" + hspmd::data::kTokensFile, data + 2 + index_bytes, size - 2 - index_bytes);
  hspmd::fuzz::expect_clean([&] {
    const auto dataset = hspmd::data::TokenDataset::open(dir);
    std::vector<int32_t> tokens;
    for (uint64_t d = 0; d < dataset.num_documents() && d < 1024; ++d) {
      tokens.clear();
      dataset.read(d, 0, dataset.document_length(d), tokens);
    }
  });
  return 0;
}
