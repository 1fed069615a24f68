#include "hspmd/data/tokenizer.h"

#include "hspmd/core/error.h"
#include "hspmd/data/bpe_tokenizer.h"

namespace hspmd::data {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  static constexpr const char* kSpecials[] = {"<bos>", "<eos>", "<pad>", "<sep>"};
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    HSPMD_CHECK(id >= 0 && id < static_cast<int32_t>(kVocabSize))
        << "byte tokenizer: id " << id << " is outside the vocabulary [0, " << kVocabSize << ")";
    if (id < 256) {
      text.push_back(static_cast<char>(id));
    } else {
      text += kSpecials[id - 256];
    }
  }
  return text;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& tokenizer_json_path) {
  if (tokenizer_json_path.empty()) return std::make_unique<ByteTokenizer>();
  return std::make_unique<BpeTokenizer>(BpeTokenizer::from_file(tokenizer_json_path));
}

}  // namespace hspmd::data
