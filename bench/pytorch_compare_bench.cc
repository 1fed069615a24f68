// The hspmd half of bench/pytorch_compare.py: trains one Llama config for a few steps on one fixed
// batch and writes what the PyTorch half needs to run the very same step, plus its own figures.
//
//   bench_pytorch_compare_bench --config bench/llama-16m.json --batch 4 --seq 512 --steps 4 --threads 2 --out DIR
//       [--precision bf16]   bf16 mixed precision (float32 weights, AdamW and gradients)
//   -> DIR/init.safetensors   the initial weights (Hugging Face names, float32)
//      DIR/batch.safetensors  "input_ids" int64 [B, S]: B independent sequences of S tokens
//      DIR/hspmd.json         {"losses": [...], "step_seconds": [...], "step_minor_faults": [...],
//                              "peak_rss_bytes": ..., ...}
//
// Optimizer: AdamW, constant lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on matrices,
// global-norm clipping at 1.0: the same as the PyTorch side. Step 1 is a warm-up (first-touch page
// faults, thread start-up); the script measures the later ones.
// Peak memory is the resident-set high-water mark above the RSS before the model was built (the
// kernel's peak is reset through /proc/self/clear_refs), so both sides count the same things:
// weights, gradients, optimizer state and activations. sgemm: best of 5 square 1024^3 GEMMs.
// Minor page faults per step (getrusage) show how much memory each step touches for the first time.
// This is a plain program, not a Google Benchmark one: the Python script drives it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include "hspmd/core/elapsed.h"
#include "hspmd/core/error.h"
#include "hspmd/core/random.h"
#include "hspmd/core/safetensors.h"
#include "hspmd/data/packing.h"
#include "hspmd/graph/executor.h"
#include "hspmd/graph/optimizer.h"
#include "hspmd/kernels/matmul.h"
#include "hspmd/kernels/threading.h"
#include "hspmd/models/llama.h"
#include "hspmd/runtime/trainer.h"

namespace {

using namespace hspmd;

// VmRSS or VmHWM from /proc/self/status, in bytes.
size_t proc_status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;
  }
  return 0;
}

// Minor page faults of this process so far.
long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Resets the kernel's RSS high-water mark to the current RSS; false when not permitted.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

double sgemm_gflops() {
  const int64_t n = 1024;
  Tensor a = Tensor::empty(Shape{n, n}, DType::kFloat32), b = Tensor::empty(Shape{n, n}, DType::kFloat32);
  Tensor c = Tensor::empty(Shape{n, n}, DType::kFloat32);
  fill_uniform(a, 1, -1, 1);
  fill_uniform(b, 2, -1, 1);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    kernels::matmul(a, b, c);
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * n * n * n / best / 1e9;
}

struct Args {
  std::string config, out;
  int64_t batch = 4, seq = 512, steps = 4;
  int threads = 1;
  uint64_t seed = 1234;
  DType precision = DType::kFloat32;  // --precision fp32|bf16 (bf16 mixed precision, docs/mixed-precision.md)
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--config") a.config = v;
    else if (k == "--out") a.out = v;
    else if (k == "--batch") a.batch = std::stoll(v);
    else if (k == "--seq") a.seq = std::stoll(v);
    else if (k == "--steps") a.steps = std::stoll(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--seed") a.seed = std::stoull(v);
    else if (k == "--precision") a.precision = parse_dtype(v);
    else HSPMD_THROW() << "unknown argument " << k;
  }
  HSPMD_CHECK(!a.config.empty() && !a.out.empty()) << "usage: bench_pytorch_compare_bench --config FILE --out DIR "
                                                      "[--batch B --seq S --steps N --threads T --seed S --precision fp32|bf16]";
  return a;
}

void run(const Args& args) {
  kernels::set_num_threads(args.threads);
  models::LlamaConfig config = models::LlamaConfig::from_file(args.config);

  // The batch: B sequences of S random tokens, one sequence per row (cu_seqlens = multiples of S).
  std::mt19937_64 rng(args.seed);
  std::vector<int64_t> ids(static_cast<size_t>(args.batch * args.seq));
  std::vector<data::Segment> segments(static_cast<size_t>(args.batch));
  for (int64_t r = 0; r < args.batch; ++r) {
    segments[r].document = static_cast<uint64_t>(r);
    for (int64_t s = 0; s < args.seq; ++s) {
      int32_t t = static_cast<int32_t>(rng() % static_cast<uint64_t>(config.vocab_size));
      segments[r].tokens.push_back(t);
      ids[static_cast<size_t>(r * args.seq + s)] = t;
    }
  }
  data::Batch batch = data::pack(segments, {.seq_len = args.seq});
  safetensors::save(args.out + "/batch.safetensors",
                    {{"input_ids", Tensor::from_vector(Shape{args.batch, args.seq}, ids)}});
  graph::TensorMap feeds = runtime::llama_feeds(batch, batch.num_label_tokens());
  double gflops = sgemm_gflops();

  const size_t rss_before = proc_status_bytes("VmRSS");
  const bool reset = reset_peak_rss();
  models::LlamaModel model = models::build_llama(config, {.precision = args.precision});
  graph::TensorMap params = graph::init_parameters(model.graph, args.seed);
  {
    std::vector<std::pair<std::string, Tensor>> tensors(params.begin(), params.end());
    safetensors::save(args.out + "/init.safetensors", tensors, {{"format", "pt"}});
  }
  graph::Executor executor(model.graph, model.fetches());
  graph::OptimizerOptions opt;
  opt.adamw = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  opt.max_grad_norm = 1.0;
  opt.schedule = graph::LrSchedule::constant(1e-3);
  graph::AdamW adamw(params, opt);

  nlohmann::json result;
  for (int64_t step = 0; step < args.steps; ++step) {
    const long faults_before = minor_faults();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Tensor> out = executor.run(feeds, params);
    graph::TensorMap grads;
    for (size_t i = 0; i < model.param_names.size(); ++i) grads.emplace(model.param_names[i], out[i + 1]);
    adamw.step(params, grads);
    double seconds = seconds_since(t0);
    result["losses"].push_back(out[0].element_as_double(0));
    result["step_seconds"].push_back(seconds);
    result["step_minor_faults"].push_back(minor_faults() - faults_before);
  }
  const size_t hwm = proc_status_bytes("VmHWM");
  result["peak_rss_bytes"] = hwm > rss_before ? hwm - rss_before : 0;
  result["peak_reset"] = reset;
  result["allocator_peak_bytes"] = executor.stats().peak_bytes;
  result["sgemm_gflops"] = gflops;
  result["threads"] = kernels::num_threads();
  result["parameters"] = config.num_parameters();
  result["tokens"] = batch.num_tokens();
  std::ofstream(args.out + "/hspmd.json") << result.dump(2) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "bench_pytorch_compare_bench: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
