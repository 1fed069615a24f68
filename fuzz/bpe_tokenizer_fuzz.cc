// Hugging Face tokenizer.json (data/bpe_tokenizer.h); a tokenizer that loads also encodes a
// mixed-script text and decodes the result, since the vocabulary and merges drive both.
#include "fuzz/fuzz_input.h"
#include "hspmd/data/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hspmd::fuzz::expect_clean([&] {
    const auto tokenizer = hspmd::data::BpeTokenizer::from_json_text(hspmd::fuzz::as_text(data, size), "fuzz.json");
    const std::vector<int32_t> ids = tokenizer.encode("Hello world, héllo 世界 123 <|endoftext|>  \n\t x");
    (void)tokenizer.decode(ids);
  });
  return 0;
}
