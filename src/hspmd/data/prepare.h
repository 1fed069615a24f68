// Turning user files into a token dataset: what `hspmd data prepare` runs.
//
//   PrepareOptions o;
//   o.inputs = {"data/corpus/kjv-genesis-2kings.txt"};
//   o.output_dir = "build/data/kjv";
//   o.append_eos = true;
//   PrepareStats s = prepare_dataset(ByteTokenizer(), o);   // s.documents == 338
//
// Input formats (one per file; kAuto picks per file):
//   text        documents separated by blank lines (a line that is empty or only whitespace); a
//               document's lines are joined with "\n". A file without blank lines is one document.
//   jsonl-text  one JSON object per line with a string "text"
//   jsonl-ids   one JSON object per line with "input_ids": [int, ...] (already tokenized; ids must
//               be inside the tokenizer's vocabulary, or below vocab_size when that is set)
//   auto        *.jsonl / *.json / *.ndjson: jsonl-ids when the first object has "input_ids", else
//               jsonl-text; any other file: text
// Empty lines in JSONL are skipped. Errors name the file and line: "x.jsonl:17: key \"text\" missing".
//
// Ids from another tokenizer: set vocab_size (the tokenizer is then not used; every input must be
// jsonl-ids) and the dataset records that vocabulary with the tokenizer id "ids".
// Held-out split: val_fraction F > 0 sends floor(n·F) of the n documents, evenly spread (document
// i when floor((i+1)F) > floor(iF)), to the validation split in output_dir/val (TokenDataset::
// open_validation), the rest to output_dir.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "hspmd/data/token_dataset.h"
#include "hspmd/data/tokenizer.h"

namespace hspmd::data {

enum class InputFormat { kAuto, kText, kJsonlText, kJsonlIds };
// "auto", "text", "jsonl-text", "jsonl-ids" (Error listing them otherwise).
InputFormat parse_input_format(const std::string& text);

struct PrepareOptions {
  std::vector<std::string> inputs;
  std::string output_dir;
  InputFormat format = InputFormat::kAuto;
  bool append_eos = false;  // add the tokenizer's eos id after every document (Error if it has none)
  uint32_t vocab_size = 0;  // > 0: pre-tokenized ids of a vocabulary this large (see above)
  double val_fraction = 0;  // in [0, 1): share of documents held out for validation
  // Progress lines (documents/s, MB read) go here at most every progress_interval_s; null: none.
  std::ostream* progress = nullptr;
  double progress_interval_s = 1.0;
};

struct PrepareStats {
  uint64_t documents = 0;  // of the training split (all documents without val_fraction)
  uint64_t tokens = 0;
  uint64_t val_documents = 0;  // of the validation split
  uint64_t val_tokens = 0;
  uint64_t bytes_read = 0;
  double seconds = 0;
};

// Reads every input, writes the dataset atomically (on error no dataset file appears in output_dir).
// A validation split left in output_dir/val by an earlier prepare is removed when val_fraction is 0,
// so a dataset never pairs with another's held-out documents.
PrepareStats prepare_dataset(const Tokenizer& tokenizer, const PrepareOptions& options);

// Summary of a dataset for `hspmd data info` and for tests.
struct DatasetSummary {
  uint64_t documents = 0, tokens = 0, empty_documents = 0;
  uint64_t min_length = 0, max_length = 0, median_length = 0, p90_length = 0;
  double mean_length = 0;
};
DatasetSummary summarize(const TokenDataset& dataset);

}  // namespace hspmd::data
