#include "hspmd/data/prepare.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>

#include "hspmd/core/elapsed.h"
#include "hspmd/core/error.h"

namespace hspmd::data {
namespace {

using Clock = std::chrono::steady_clock;

bool is_blank(const std::string& line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f'; });
}

bool has_jsonl_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  return ext == ".jsonl" || ext == ".json" || ext == ".ndjson";
}

// Reads one input file line by line, tracking the line number for errors.
class LineReader {
 public:
  explicit LineReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    HSPMD_CHECK(in_) << "cannot open input " << path;
  }
  bool next(std::string& line) {
    if (!std::getline(in_, line)) return false;
    ++line_number_;
    bytes_ += line.size() + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
    return true;
  }
  std::string where() const { return path_ + ":" + std::to_string(line_number_); }
  uint64_t bytes() const { return bytes_; }

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t line_number_ = 0;
  uint64_t bytes_ = 0;
};

InputFormat detect_format(const std::string& path) {
  if (!has_jsonl_extension(path)) return InputFormat::kText;
  LineReader reader(path);
  std::string line;
  while (reader.next(line)) {
    if (is_blank(line)) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    return j.is_object() && j.contains("input_ids") ? InputFormat::kJsonlIds : InputFormat::kJsonlText;
  }
  return InputFormat::kJsonlText;  // empty file: no documents either way
}

// The tokenizer id recorded for ids made by a tokenizer hspmd does not know (PrepareOptions::vocab_size).
constexpr const char* kPretokenizedId = "ids";

class Preparer {
 public:
  Preparer(const Tokenizer& tokenizer, const PrepareOptions& options)
      : tokenizer_(tokenizer),
        options_(options),
        pretokenized_(options.vocab_size > 0),
        vocab_size_(pretokenized_ ? options.vocab_size : tokenizer.vocab_size()),
        tokenizer_id_(pretokenized_ ? kPretokenizedId : tokenizer.id()),
        writer_(options.output_dir, {vocab_size_, tokenizer_id_}),
        start_(Clock::now()),
        last_report_(start_) {
    if (options.append_eos) {
      HSPMD_CHECK(!pretokenized_) << "--append-eos: with --vocab-size the end-of-text id is unknown; "
                                     "put it at the end of each input_ids list instead";
      HSPMD_CHECK(tokenizer.eos_id()) << "--append-eos: tokenizer " << tokenizer.id() << " has no end-of-text token";
    }
    if (options.val_fraction > 0) {
      val_writer_.emplace((std::filesystem::path(options.output_dir) / kValidationDir).string(),
                          TokenDatasetWriter::Options{vocab_size_, tokenizer_id_});
    }
  }

  void run_file(const std::string& path) {
    InputFormat format = options_.format == InputFormat::kAuto ? detect_format(path) : options_.format;
    HSPMD_CHECK(!pretokenized_ || format == InputFormat::kJsonlIds)
        << path << ": --vocab-size is for pre-tokenized input (JSONL lines of {\"input_ids\": [...]}), but this "
        << "file is " << (format == InputFormat::kText ? "text" : "JSONL of \"text\"")
        << "; drop --vocab-size to tokenize it";
    LineReader reader(path);
    std::string line;
    if (format == InputFormat::kText) {
      std::string document;
      bool open = false;
      while (reader.next(line)) {
        if (is_blank(line)) {
          if (open) add(tokenizer_.encode(document), reader);
          document.clear();
          open = false;
          continue;
        }
        if (open) document.push_back('\n');
        document += line;
        open = true;
      }
      if (open) add(tokenizer_.encode(document), reader);
    } else {
      while (reader.next(line)) {
        if (is_blank(line)) continue;
        add(parse_jsonl(line, format, reader), reader);
      }
    }
    stats_.bytes_read += reader.bytes();
  }

  PrepareStats finish() {
    HSPMD_CHECK(stats_.documents + stats_.val_documents > 0) << "no documents found in the inputs (empty files?)";
    if (val_writer_) {
      HSPMD_CHECK(stats_.val_documents > 0 && stats_.documents > 0)
          << "--val-fraction " << options_.val_fraction << " of " << stats_.documents + stats_.val_documents
          << " documents leaves " << (stats_.val_documents == 0 ? "no validation" : "no training")
          << " documents; use a " << (stats_.val_documents == 0 ? "larger" : "smaller") << " fraction";
      val_writer_->finish();
    }
    writer_.finish();
    if (!val_writer_) remove_stale_validation_split();
    stats_.seconds = seconds_since(start_);
    return stats_;
  }

 private:
  std::vector<int32_t> parse_jsonl(const std::string& line, InputFormat format, const LineReader& reader) const {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      HSPMD_THROW() << reader.where() << ": invalid JSON: " << e.what();
    }
    HSPMD_CHECK(j.is_object()) << reader.where() << ": expected a JSON object, got " << j.type_name();
    if (format == InputFormat::kJsonlText) {
      HSPMD_CHECK(j.contains("text")) << reader.where() << ": key \"text\" missing";
      HSPMD_CHECK(j["text"].is_string()) << reader.where() << ": \"text\" is a " << j["text"].type_name()
                                         << ", expected a string";
      return tokenizer_.encode(j["text"].get<std::string>());
    }
    HSPMD_CHECK(j.contains("input_ids")) << reader.where() << ": key \"input_ids\" missing";
    const auto& ids = j["input_ids"];
    HSPMD_CHECK(ids.is_array()) << reader.where() << ": \"input_ids\" is a " << ids.type_name() << ", expected an array";
    std::vector<int32_t> tokens;
    tokens.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      HSPMD_CHECK(ids[i].is_number_integer() && ids[i].get<int64_t>() >= 0 &&
                  ids[i].get<int64_t>() < static_cast<int64_t>(vocab_size_))
          << reader.where() << ": input_ids[" << i << "] = " << ids[i].dump() << " is outside the vocabulary [0, "
          << vocab_size_ << ") "
          << (pretokenized_ ? std::string("given by --vocab-size")
                            : "of tokenizer " + tokenizer_.id() +
                                  " (ids from another tokenizer: give --vocab-size, or --tokenizer with its "
                                  "tokenizer.json)");
      tokens.push_back(ids[i].get<int32_t>());
    }
    return tokens;
  }

  // Document i (counting both splits) is held out when floor((i+1)F) > floor(iF): exactly floor(nF)
  // of n documents, spread evenly through the inputs rather than all taken from the last file.
  bool next_is_validation() const {
    if (!val_writer_) return false;
    const long double f = options_.val_fraction;
    const auto i = static_cast<long double>(stats_.documents + stats_.val_documents);
    return std::floor((i + 1) * f) > std::floor(i * f);
  }

  void remove_stale_validation_split() const {
    const auto val = std::filesystem::path(options_.output_dir) / kValidationDir;
    std::filesystem::remove(val / kTokensFile);
    std::filesystem::remove(val / kIndexFile);
    std::error_code ignored;  // leaves the folder when it holds anything else
    std::filesystem::remove(val, ignored);
  }

  void add(std::vector<int32_t> tokens, const LineReader& reader) {
    if (options_.append_eos) tokens.push_back(*tokenizer_.eos_id());
    if (next_is_validation()) {
      val_writer_->add_document(tokens);
      ++stats_.val_documents;
      stats_.val_tokens += tokens.size();
    } else {
      writer_.add_document(tokens);
      ++stats_.documents;
      stats_.tokens += tokens.size();
    }
    auto now = Clock::now();
    if (options_.progress != nullptr &&
        std::chrono::duration<double>(now - last_report_).count() >= options_.progress_interval_s) {
      double seconds = std::chrono::duration<double>(now - start_).count();
      const auto all_documents = static_cast<double>(stats_.documents + stats_.val_documents);
      *options_.progress << "prepare: " << stats_.documents + stats_.val_documents << " documents, "
                         << stats_.tokens + stats_.val_tokens << " tokens, "
                         << std::fixed << std::setprecision(1)
                         << static_cast<double>(stats_.bytes_read + reader.bytes()) / 1e6 << " MB read, "
                         << all_documents / seconds << " documents/s" << std::endl;
      last_report_ = now;
    }
  }

  const Tokenizer& tokenizer_;
  const PrepareOptions& options_;
  const bool pretokenized_;
  const uint32_t vocab_size_;
  const std::string tokenizer_id_;
  TokenDatasetWriter writer_;
  std::optional<TokenDatasetWriter> val_writer_;
  PrepareStats stats_;
  Clock::time_point start_, last_report_;
};

}  // namespace

InputFormat parse_input_format(const std::string& text) {
  if (text == "auto") return InputFormat::kAuto;
  if (text == "text") return InputFormat::kText;
  if (text == "jsonl-text") return InputFormat::kJsonlText;
  if (text == "jsonl-ids") return InputFormat::kJsonlIds;
  HSPMD_THROW() << "unknown input format \"" << text << "\" (expected auto, text, jsonl-text or jsonl-ids)";
}

PrepareStats prepare_dataset(const Tokenizer& tokenizer, const PrepareOptions& options) {
  HSPMD_CHECK(!options.inputs.empty()) << "no input files given";
  HSPMD_CHECK(!options.output_dir.empty()) << "no output directory given";
  HSPMD_CHECK(options.val_fraction >= 0 && options.val_fraction < 1)
      << "--val-fraction " << options.val_fraction << " is outside [0, 1)";
  // Check every input up front: a typo in the last file should not cost a long run.
  for (const auto& path : options.inputs) {
    HSPMD_CHECK(std::filesystem::is_regular_file(path)) << "input " << path << " does not exist or is not a file";
  }
  Preparer preparer(tokenizer, options);
  for (const auto& path : options.inputs) preparer.run_file(path);
  return preparer.finish();
}

DatasetSummary summarize(const TokenDataset& dataset) {
  DatasetSummary s;
  s.documents = dataset.num_documents();
  s.tokens = dataset.num_tokens();
  std::vector<uint64_t> lengths(s.documents);
  for (uint64_t d = 0; d < s.documents; ++d) {
    lengths[d] = dataset.document_length(d);
    if (lengths[d] == 0) ++s.empty_documents;
  }
  if (lengths.empty()) return s;
  std::sort(lengths.begin(), lengths.end());
  s.min_length = lengths.front();
  s.max_length = lengths.back();
  s.median_length = lengths[(lengths.size() - 1) / 2];
  s.p90_length = lengths[(lengths.size() - 1) * 9 / 10];
  s.mean_length = static_cast<double>(s.tokens) / static_cast<double>(s.documents);
  return s;
}

}  // namespace hspmd::data
