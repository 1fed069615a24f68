#include "hspmd/data/bpe_tokenizer.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hspmd/core/error.h"
#include "hspmd/core/philox.h"

namespace hspmd::data {
namespace {

using nlohmann::json;

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string type_of(const json& node) {
  return node.is_object() && node.contains("type") && node["type"].is_string() ? node["type"].get<std::string>() : "?";
}

std::string merge_key(const std::string& left, const std::string& right) {
  std::string key = left;
  key.push_back('\0');
  key += right;
  return key;
}

// Splits a byte-level string into its UTF-8 characters.
std::vector<std::string> characters(const std::string& text) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < text.size();) {
    size_t length = 0;
    decode_utf8(text, pos, length);
    out.push_back(text.substr(pos, length));
    pos += length;
  }
  return out;
}

}  // namespace

BpeTokenizer BpeTokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HSPMD_CHECK(in) << "cannot open tokenizer " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return from_json_text(buffer.str(), path);
}

BpeTokenizer BpeTokenizer::from_json_text(const std::string& text, const std::string& source) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    HSPMD_THROW() << source << ": not valid JSON: " << e.what();
  }
  // A key of the wrong JSON type (an object where a string belongs) is a bad file, not a crash.
  try {
    BpeTokenizer tok;
    tok.source_ = source;
    char hash[24];
    std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(stable_hash(text.data(), text.size())));
    tok.id_ = std::string("bpe:") + hash;

    HSPMD_CHECK(root.is_object() && root.contains("model") && root["model"].is_object())
        << source << ": key \"model\" missing (not a Hugging Face tokenizer.json?)";
    const json& model = root["model"];
    std::string model_type = model.value("type", std::string("BPE"));
    HSPMD_CHECK(model_type == "BPE") << source << ": model type \"" << model_type
                                     << "\" is not supported (only byte-level BPE tokenizers are)";
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      HSPMD_CHECK(!model.contains(key) || model[key].is_null() || model[key] == "")
          << source << ": model." << key << " is not supported";
    }
    HSPMD_CHECK(!root.contains("normalizer") || root["normalizer"].is_null())
        << source << ": normalizer \"" << type_of(root["normalizer"]) << "\" is not supported (byte-level BPE only)";
    tok.ignore_merges_ = model.value("ignore_merges", false);

    // Pre-tokenizer: ByteLevel alone, or Sequence[Split(known regex), ByteLevel(use_regex = false)].
    HSPMD_CHECK(root.contains("pre_tokenizer") && root["pre_tokenizer"].is_object())
        << source << ": pre_tokenizer missing: only byte-level BPE (pre_tokenizer ByteLevel) is supported";
    const json& pre = root["pre_tokenizer"];
    std::vector<json> steps = type_of(pre) == "Sequence" ? pre.value("pretokenizers", std::vector<json>{})
                                                         : std::vector<json>{pre};
    bool byte_level = false, split_given = false;
    for (const json& step : steps) {
      std::string type = type_of(step);
      if (type == "ByteLevel") {
        byte_level = true;
        tok.add_prefix_space_ = step.value("add_prefix_space", false);
        if (step.value("use_regex", true) && !split_given) tok.split_rule_ = SplitRule::kGpt2;
        tok.use_split_ = split_given || step.value("use_regex", true);
      } else if (type == "Split") {
        std::string pattern;
        if (step.contains("pattern") && step["pattern"].is_object() && step["pattern"].contains("Regex")) {
          pattern = step["pattern"]["Regex"].get<std::string>();
        }
        if (pattern.find(R"(\p{N}{1,3})") != std::string::npos) {
          tok.split_rule_ = SplitRule::kLlama3;
        } else if (pattern == kGpt2Pattern) {
          tok.split_rule_ = SplitRule::kGpt2;
        } else {
          HSPMD_THROW() << source << ": pre_tokenizer Split pattern " << json(pattern).dump()
                        << " is not supported (only the GPT-2 and Llama 3 regexes are)";
        }
        HSPMD_CHECK(!step.value("invert", false)) << source << ": inverted Split pre-tokenizers are not supported";
        split_given = true;
        tok.use_split_ = true;
      } else {
        HSPMD_THROW() << source << ": pre_tokenizer \"" << type << "\" is not supported (byte-level BPE only)";
      }
    }
    HSPMD_CHECK(byte_level) << source << ": no ByteLevel pre-tokenizer: only byte-level BPE is supported";

    // Vocabulary and added tokens share one id space; vocab_size is the largest id + 1.
    HSPMD_CHECK(model.contains("vocab") && model["vocab"].is_object()) << source << ": model.vocab missing";
    int32_t max_id = -1;
    auto check_id = [&](const json& id, const std::string& token) {
      HSPMD_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX)
          << source << ": token " << json(token).dump() << " has invalid id " << id.dump();
      max_id = std::max(max_id, id.get<int32_t>());
      return id.get<int32_t>();
    };
    for (const auto& [token, id] : model["vocab"].items()) tok.vocab_[token] = check_id(id, token);
    if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
      for (const json& added : root["added_tokens"]) {
        HSPMD_CHECK(added.contains("content") && added["content"].is_string() && !added["content"].get<std::string>().empty() &&
                    added.contains("id"))
            << source << ": added_tokens entry " << added.dump() << " needs \"id\" and a non-empty \"content\"";
        std::string content = added["content"].get<std::string>();
        tok.added_[content] = check_id(added["id"], content);
      }
    }
    HSPMD_CHECK(max_id >= 0) << source << ": empty vocabulary";
    tok.id_to_token_.assign(static_cast<size_t>(max_id) + 1, "");
    tok.is_added_.assign(static_cast<size_t>(max_id) + 1, false);
    for (const auto& [token, id] : tok.vocab_) tok.id_to_token_[id] = token;
    for (const auto& [content, id] : tok.added_) {
      tok.id_to_token_[id] = content;
      tok.is_added_[id] = true;
      tok.added_by_first_byte_[static_cast<unsigned char>(content[0])].emplace_back(content, id);
    }
    for (auto& bucket : tok.added_by_first_byte_) {
      std::sort(bucket.begin(), bucket.end(), [](const auto& a, const auto& b) {
        return a.first.size() != b.first.size() ? a.first.size() > b.first.size() : a.first < b.first;
      });
    }

    // Merges: "left right" strings (classic) or ["left", "right"] pairs (tokenizers >= 0.20).
    HSPMD_CHECK(model.contains("merges") && model["merges"].is_array()) << source << ": model.merges missing";
    int32_t rank = 0;
    for (const json& merge : model["merges"]) {
      std::string left, right;
      if (merge.is_string()) {
        std::string m = merge.get<std::string>();
        size_t space = m.find(' ');
        HSPMD_CHECK(space != std::string::npos && m.find(' ', space + 1) == std::string::npos)
            << source << ": merge " << rank << " " << merge.dump() << " is not \"left right\"";
        left = m.substr(0, space);
        right = m.substr(space + 1);
      } else {
        HSPMD_CHECK(merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string())
            << source << ": merge " << rank << " " << merge.dump() << " is neither \"left right\" nor [left, right]";
        left = merge[0].get<std::string>();
        right = merge[1].get<std::string>();
      }
      tok.merge_rank_.emplace(merge_key(left, right), rank++);  // emplace: the first (best) rank wins
    }

    if (model.contains("unk_token") && model["unk_token"].is_string()) tok.unk_ = tok.token_id(model["unk_token"].get<std::string>());
    for (const char* name : {"<|begin_of_text|>", "<s>", "<|endoftext|>"}) {
      if (!tok.bos_) tok.bos_ = tok.token_id(name);
    }
    for (const char* name : {"<|end_of_text|>", "</s>", "<|endoftext|>"}) {
      if (!tok.eos_) tok.eos_ = tok.token_id(name);
    }
    return tok;
  } catch (const json::exception& e) {
    HSPMD_THROW() << source << ": unexpected JSON: " << e.what();
  }
}

std::optional<int32_t> BpeTokenizer::token_id(const std::string& token) const {
  if (auto it = added_.find(token); it != added_.end()) return it->second;
  if (auto it = vocab_.find(token); it != vocab_.end()) return it->second;
  return std::nullopt;
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  std::string mapped;
  for (char c : piece) mapped += byte_to_unicode()[static_cast<unsigned char>(c)];
  if (ignore_merges_) {
    if (auto it = vocab_.find(mapped); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<std::string> symbols = characters(mapped);
  while (symbols.size() > 1) {
    int32_t best = INT32_MAX;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = merge_rank_.find(merge_key(symbols[i], symbols[i + 1]));
      if (it != merge_rank_.end()) best = std::min(best, it->second);
    }
    if (best == INT32_MAX) break;
    std::vector<std::string> merged;
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size()) {
        auto it = merge_rank_.find(merge_key(symbols[i], symbols[i + 1]));
        if (it != merge_rank_.end() && it->second == best) {
          merged.push_back(symbols[i] + symbols[i + 1]);
          ++i;
          continue;
        }
      }
      merged.push_back(symbols[i]);
    }
    symbols = std::move(merged);
  }
  for (const std::string& symbol : symbols) {
    auto it = vocab_.find(symbol);
    if (it != vocab_.end()) {
      out.push_back(it->second);
    } else {
      HSPMD_CHECK(unk_) << source_ << ": \"" << symbol << "\" (from " << json(std::string(piece)).dump()
                        << ") is not in the vocabulary and the model has no unk_token";
      out.push_back(*unk_);
    }
  }
}

void BpeTokenizer::encode_segment(std::string_view segment, std::vector<int32_t>& out) const {
  if (segment.empty()) return;
  std::string prefixed;
  if (add_prefix_space_ && segment.front() != ' ') {
    prefixed.reserve(segment.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(segment);
    segment = prefixed;
  }
  if (!use_split_) {
    encode_piece(segment, out);
    return;
  }
  for (std::string_view piece : split_pretokens(segment, split_rule_)) encode_piece(piece, out);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  size_t segment_begin = 0;
  for (size_t pos = 0; pos < text.size();) {
    const auto& bucket = added_by_first_byte_[static_cast<unsigned char>(text[pos])];
    const std::pair<std::string, int32_t>* hit = nullptr;
    for (const auto& candidate : bucket) {
      if (text.compare(pos, candidate.first.size(), candidate.first) == 0) {
        hit = &candidate;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    encode_segment(text.substr(segment_begin, pos - segment_begin), out);
    out.push_back(hit->second);
    pos += hit->first.size();
    segment_begin = pos;
  }
  encode_segment(text.substr(segment_begin), out);
  return out;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (int32_t id : ids) {
    HSPMD_CHECK(id >= 0 && static_cast<size_t>(id) < id_to_token_.size())
        << source_ << ": id " << id << " is outside the vocabulary [0, " << id_to_token_.size() << ")";
    const std::string& token = id_to_token_[id];
    if (is_added_[id]) {
      text += token;
      continue;
    }
    for (size_t pos = 0; pos < token.size();) {
      size_t length = 0;
      int b = unicode_to_byte(decode_utf8(token, pos, length));
      HSPMD_CHECK(b >= 0) << source_ << ": token " << id << " " << json(token).dump()
                          << " is not a byte-level token (cannot decode)";
      text.push_back(static_cast<char>(b));
      pos += length;
    }
  }
  return text;
}

}  // namespace hspmd::data
