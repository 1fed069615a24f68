// `hspmd data prepare` and `hspmd data info`: make a token dataset from text or JSONL files, and
// describe one.
//
//   hspmd data prepare --input data/corpus/kjv-genesis-2kings.txt --output build/datasets/kjv --append-eos
//   hspmd data prepare --input a.jsonl b.jsonl --output ds --tokenizer tokenizer.json --format jsonl-text
//   hspmd data prepare --input ids.jsonl --output ds --vocab-size 32000 --val-fraction 0.05
//   hspmd data info build/datasets/kjv [--seq-len 256]      (with the length histogram)
//   hspmd data long-tailed --source build/datasets/kjv --output runs/kjv-mixed --median 64 --max-length 1024
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>

#include "hspmd/data/length_histogram.h"
#include "hspmd/data/long_tailed.h"
#include "hspmd/data/prepare.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/data/tokenizer.h"

namespace hspmd::cli {
namespace {

struct PrepareArgs {
  std::vector<std::string> inputs;
  std::string output;
  std::string tokenizer;
  std::string format = "auto";
  bool append_eos = false;
  uint32_t vocab_size = 0;
  double val_fraction = 0;
};

void run_prepare(const PrepareArgs& args) {
  auto tokenizer = data::load_tokenizer(args.tokenizer);
  data::PrepareOptions options;
  options.inputs = args.inputs;
  options.output_dir = args.output;
  options.format = data::parse_input_format(args.format);
  options.append_eos = args.append_eos;
  options.vocab_size = args.vocab_size;
  options.val_fraction = args.val_fraction;
  options.progress = &std::cerr;
  data::PrepareStats s = data::prepare_dataset(*tokenizer, options);
  const data::TokenDataset written = data::TokenDataset::open(args.output);
  std::cout << "prepared " << args.output << ": " << s.documents << " documents, " << s.tokens << " tokens (vocab "
            << written.vocab_size() << ", tokenizer " << written.tokenizer_id() << ")";
  if (s.val_documents > 0) {
    std::cout << "; validation split " << args.output << "/" << data::kValidationDir << ": " << s.val_documents
              << " documents, " << s.val_tokens << " tokens";
  }
  std::cout << " from " << std::fixed
            << std::setprecision(2) << static_cast<double>(s.bytes_read) / 1e6 << " MB in " << s.seconds << " s ("
            << std::setprecision(0) << static_cast<double>(s.documents + s.val_documents) / std::max(s.seconds, 1e-9)
            << " documents/s)\n";
}

struct InfoArgs {
  std::string dir;
  int64_t seq_len = 0;
};

void run_info(const InfoArgs& args) {
  const std::string& dir = args.dir;
  data::TokenDataset ds = data::TokenDataset::open(dir);
  data::DatasetSummary s = data::summarize(ds);
  std::cout << "dataset     " << dir << "\n"
            << "documents   " << s.documents << " (" << s.empty_documents << " empty)\n"
            << "tokens      " << s.tokens << "\n"
            << "vocab size  " << ds.vocab_size() << " (uint" << 8 * ds.header().token_bytes << " tokens)\n"
            << "tokenizer   " << ds.tokenizer_id() << "\n"
            << "doc length  min " << s.min_length << ", median " << s.median_length << ", mean " << std::fixed
            << std::setprecision(1) << s.mean_length << ", p90 " << s.p90_length << ", max " << s.max_length << "\n";
  if (data::TokenDataset::has_validation(dir)) {
    data::DatasetSummary v = data::summarize(data::TokenDataset::open_validation(dir));
    std::cout << "validation  " << v.documents << " documents, " << v.tokens << " tokens (" << dir << "/"
              << data::kValidationDir << ")\n";
  }
  std::cout << data::length_histogram(ds, args.seq_len).to_string();
}

struct LongTailedArgs {
  std::string source, output;
  data::LongTailedOptions options;
};

void run_long_tailed(const LongTailedArgs& args) {
  const data::TokenDataset source = data::TokenDataset::open(args.source);
  data::write_long_tailed_dataset(source, args.output, args.options);
  const data::TokenDataset written = data::TokenDataset::open(args.output);
  std::cout << "wrote " << args.output << ": " << written.num_documents() << " documents, " << written.num_tokens()
            << " tokens, lengths lognormal (median " << args.options.median << ", sigma " << args.options.sigma
            << ") clipped to [2, " << args.options.max_length << "], text from " << args.source << "\n";
}

}  // namespace

void add_data_command(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Make and inspect token datasets");
  data->require_subcommand(1);

  auto args = std::make_shared<PrepareArgs>();
  CLI::App* prepare = data->add_subcommand(
      "prepare",
      "Tokenize text files (documents separated by blank lines), JSONL of {\"text\": ...} or JSONL of "
      "{\"input_ids\": [...]} into a token dataset directory (docs/dataset-format.md)");
  prepare->add_option("--input", args->inputs, "Input files")->required()->check(CLI::ExistingFile);
  prepare->add_option("--output", args->output, "Output dataset directory")->required();
  CLI::Option* tokenizer = prepare->add_option("--tokenizer", args->tokenizer,
                      "Hugging Face tokenizer.json (byte-level BPE); default: byte-level, vocab 260")
      ->check(CLI::ExistingFile);
  prepare
      ->add_option("--vocab-size", args->vocab_size,
                   "Pre-tokenized input: JSONL {\"input_ids\": [...]} from another tokenizer, every id below N "
                   "(recorded in the dataset; the tokenizer id becomes \"ids\")")
      ->check(CLI::Range(1u, 1u << 31))
      ->excludes(tokenizer);
  prepare
      ->add_option("--val-fraction", args->val_fraction,
                   "Hold out this share of the documents (evenly spread) as a validation split in OUTPUT/val")
      ->check(CLI::Range(0.0, 0.999999));
  prepare->add_option("--format", args->format, "Input format")
      ->check(CLI::IsMember({"auto", "text", "jsonl-text", "jsonl-ids"}))
      ->capture_default_str();
  prepare->add_flag("--append-eos", args->append_eos, "Append the end-of-text token to every document");
  prepare->callback([args] { run_prepare(*args); });

  auto info_args = std::make_shared<InfoArgs>();
  CLI::App* info = data->add_subcommand(
      "info", "Print documents, tokens, vocabulary, length statistics and the length histogram");
  info->add_option("dir", info_args->dir, "Dataset directory")->required();
  info->add_option("--seq-len", info_args->seq_len,
                   "Also the histogram of the segments a run with this context length trains on (documents cut "
                   "into chunks of at most this many tokens)")
      ->check(CLI::NonNegativeNumber);
  info->callback([info_args] { run_info(*info_args); });

  auto tail = std::make_shared<LongTailedArgs>();
  CLI::App* long_tailed = data->add_subcommand(
      "long-tailed",
      "Write a mixed-length dataset: lognormal document lengths, clipped, cut from another dataset's text in order "
      "(for trying and benchmarking dispatch by length)");
  long_tailed->add_option("--source", tail->source, "Dataset whose tokens fill the documents")->required();
  long_tailed->add_option("--output", tail->output, "Output dataset directory")->required();
  long_tailed->add_option("--documents", tail->options.documents, "Number of documents")->capture_default_str();
  long_tailed->add_option("--median", tail->options.median, "Median document length in tokens")
      ->capture_default_str()
      ->check(CLI::Range(2.0, 1e9));
  long_tailed->add_option("--max-length", tail->options.max_length, "Longest document (lengths are clipped to it)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 40));
  long_tailed->add_option("--sigma", tail->options.sigma, "Lognormal shape: larger means a longer tail")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  long_tailed->add_option("--seed", tail->options.seed, "Seed of the lengths")->capture_default_str();
  long_tailed->callback([tail] { run_long_tailed(*tail); });
}

}  // namespace hspmd::cli
