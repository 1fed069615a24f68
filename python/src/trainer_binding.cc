// hspmd.init() and hspmd.Trainer: training from Python, SPMD like torchrun. Every process of a run
// (started by `hspmd launch -n N -- python3 train.py`, or one plain process) calls hspmd.init(),
// builds the same Trainer and passes the same global batches. The Trainer is `hspmd train`'s
// worker (cli/train_worker.h) driven a step at a time: its keyword arguments are parsed by the
// CLI's own option definitions (cli::define_train_options), so every `hspmd train` option is a
// keyword with the same name (dashes -> underscores), default, checks and error messages, and a
// step runs the one training loop (runtime/training_loop.h) on the batch Python gives it.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "hspmd/cli/train_args.h"
#include "hspmd/cli/train_worker.h"
#include "hspmd/comm/env.h"
#include "hspmd/core/error.h"
#include "hspmd/models/model_factory.h"
#include "hspmd/runtime/sharded_checkpoint.h"
#include "hspmd/sharding/strategy.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace hspmd::python {

namespace {

// ---- the process: hspmd.init() ----

struct Process {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string source = "one process";  // or how the launcher started it ("hspmd launch", "mpirun", "srun")
  std::optional<comm::WorkerEnv> env;   // nullopt: one process, not launched
};

std::optional<Process>& the_process() {
  static std::optional<Process> process;
  return process;
}

bool launched() {
  return std::getenv("RANK") != nullptr || std::getenv("OMPI_COMM_WORLD_RANK") != nullptr ||
         std::getenv("SLURM_PROCID") != nullptr;
}

// This process's place in the run, from the launcher's environment as `hspmd train`'s workers read
// it (comm/env.h); once per process.
const Process& init() {
  std::optional<Process>& p = the_process();
  if (!p) {
    Process fresh;
    if (launched()) {
      comm::WorkerEnv env = comm::WorkerEnv::from_environment();
      fresh = {env.rank, env.world_size, env.local_rank, env.source, env};
    }
    p = fresh;
  }
  return *p;
}

// ---- options: `hspmd train`'s, parsed by its own definitions ----

std::string flag_of(const std::string& keyword) {
  std::string flag = "--" + keyword;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::string keyword_of(const std::string& flag) {
  std::string key = flag.substr(2);
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

// Options the Python API names differently: `model` is Trainer's first argument.
bool is_positional(const std::string& keyword) { return keyword == "model"; }

// An option value as command-line text: Python's str() (repr for floats, so no digit is lost).
std::string option_text(const nb::handle& value) {
  if (nb::isinstance<nb::bool_>(value)) return nb::cast<bool>(value) ? "true" : "false";
  if (nb::isinstance<nb::float_>(value)) return nb::cast<std::string>(nb::repr(value));
  return nb::cast<std::string>(nb::str(value));
}

struct ParsedOptions {
  std::unique_ptr<cli::TrainArgs> args = std::make_unique<cli::TrainArgs>();
  std::unique_ptr<CLI::App> app = std::make_unique<CLI::App>("hspmd.Trainer options", "hspmd.Trainer");

  ParsedOptions() { cli::define_train_options(app.get(), args.get()); }
};

// `options` as `hspmd train` would read them from its command line. Error naming an unknown
// keyword; values are checked by the CLI's definitions, with its messages.
std::unique_ptr<ParsedOptions> parse_options(const nb::kwargs& options) {
  auto parsed = std::make_unique<ParsedOptions>();
  std::vector<std::string> argv;
  for (auto [k, v] : options) {
    const std::string key = nb::cast<std::string>(k);
    const std::string flag = flag_of(key);
    const CLI::Option* opt = parsed->app->get_option_no_throw(flag);
    HSPMD_CHECK(opt != nullptr && !is_positional(key) && key.find('-') == std::string::npos)
        << "hspmd.Trainer: unknown option " << key << "= (`hspmd train` has no " << flag
        << "; hspmd.train_options() lists every option)";
    if (v.is_none()) continue;
    if (opt->get_expected_max() == 0) {  // a flag: True gives it
      if (nb::cast<bool>(v)) argv.push_back(flag);
      continue;
    }
    if (nb::isinstance<nb::list>(v) || nb::isinstance<nb::tuple>(v)) {
      for (nb::handle item : v) argv.insert(argv.end(), {flag, option_text(item)});
      continue;
    }
    argv.insert(argv.end(), {flag, option_text(v)});
  }
  std::reverse(argv.begin(), argv.end());  // CLI11 takes the arguments last first
  try {
    parsed->app->parse(argv);
  } catch (const CLI::ParseError& e) {
    throw Error(std::string("hspmd.Trainer: ") + e.what());
  }
  return parsed;
}

// Every option of `hspmd train` as {keyword: default}: flags False, repeatable options [], options
// without a default None; numbers as numbers.
nb::dict train_options() {
  ParsedOptions parsed;
  nb::dict out;
  for (const CLI::Option* opt : parsed.app->get_options()) {
    if (opt->get_name(false, true).rfind("--", 0) != 0) continue;  // --help
    const std::string flag = opt->get_name(false, true);
    if (flag == "--help" || opt->get_group().empty()) continue;     // hidden ones
    const std::string key = keyword_of(flag);
    if (is_positional(key)) continue;
    if (opt->get_expected_max() == 0) {
      out[key.c_str()] = false;
    } else if (opt->get_expected_max() > 1) {
      out[key.c_str()] = nb::list();
    } else if (opt->get_default_str().empty()) {
      out[key.c_str()] = nb::none();
    } else {
      const std::string text = opt->get_default_str();
      nb::object value = nb::str(text.c_str());
      try {
        value = nb::module_::import_("ast").attr("literal_eval")(text);
      } catch (const nb::python_error&) {  // words stay text ("1f1b", "fused")
      }
      out[key.c_str()] = value;
    }
  }
  return out;
}

// ---- batches: any integer arrays, one sequence each ----

// One sequence's token ids from anything NumPy or DLPack can see (NumPy, PyTorch, lists).
std::vector<int32_t> token_ids(const nb::handle& item, size_t index) {
  nb::ndarray<nb::ro, nb::device::cpu> a;
  if (!nb::try_cast(item, a)) {
    nb::object array = nb::module_::import_("numpy").attr("asarray")(item);
    HSPMD_CHECK(nb::try_cast(array, a)) << "sequence " << index << " of the batch is not an array of token ids";
  }
  HSPMD_CHECK(a.ndim() == 1) << "sequence " << index << " of the batch has " << a.ndim()
                             << " dimensions; a sequence is a 1-D array of token ids";
  const nb::dlpack::dtype t = a.dtype();
  HSPMD_CHECK((t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int) ||
               t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::UInt)) &&
              (t.bits == 8 || t.bits == 16 || t.bits == 32 || t.bits == 64) && t.lanes == 1)
      << "sequence " << index << " of the batch: token ids must be integers";
  const bool is_signed = t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int);
  const auto* base = static_cast<const char*>(a.data());
  const int64_t stride = a.stride(0) * (t.bits / 8);
  std::vector<int32_t> out(a.shape(0));
  for (size_t i = 0; i < out.size(); ++i) {
    const char* p = base + static_cast<int64_t>(i) * stride;
    int64_t v = 0;
    switch (t.bits) {
      case 8: v = is_signed ? *reinterpret_cast<const int8_t*>(p) : *reinterpret_cast<const uint8_t*>(p); break;
      case 16: v = is_signed ? *reinterpret_cast<const int16_t*>(p) : *reinterpret_cast<const uint16_t*>(p); break;
      case 32: v = is_signed ? *reinterpret_cast<const int32_t*>(p) : *reinterpret_cast<const uint32_t*>(p); break;
      default: v = *reinterpret_cast<const int64_t*>(p); break;
    }
    HSPMD_CHECK(v >= 0 && v <= INT32_MAX) << "sequence " << index << " of the batch: token id " << v << " at position "
                                          << i << " is not a valid token id";
    out[i] = static_cast<int32_t>(v);
  }
  return out;
}

std::vector<data::Segment> segments_of(const nb::handle& batch) {
  std::vector<data::Segment> out;
  for (nb::handle item : batch) out.push_back({out.size(), 0, token_ids(item, out.size())});
  return out;
}

// ---- tensors: this rank's shards, seen through DLPack ----

class Trainer;

// One tensor part this rank holds, in hspmd's memory (writes through NumPy / PyTorch change what
// hspmd trains). It keeps the trainer's memory alive.
struct Shard {
  std::string name;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> begin, end;  // the region it holds, global coordinates
  bool primary = true;  // this rank's copy is the one the checkpoint and the gradient norm count
  Tensor data;
  std::shared_ptr<cli::TrainWorker> owner;
};

nb::tuple as_tuple(const std::vector<int64_t>& v) {
  nb::list l;
  for (int64_t x : v) l.append(x);
  return nb::tuple(l);
}

std::vector<int64_t> dims_of(const Shape& shape) { return {shape.dims().begin(), shape.dims().end()}; }

Shard make_shard(const std::string& name, const Shape& global, const sharding::Region& region, const Tensor& data,
                 bool primary, std::shared_ptr<cli::TrainWorker> owner) {
  HSPMD_CHECK(data.dtype() == DType::kFloat32) << "tensor " << name << " is not float32";
  std::vector<int64_t> end(region.begin.size());
  for (size_t d = 0; d < end.size(); ++d) end[d] = region.begin[d] + region.shape().dims()[d];
  return {name, dims_of(global), region.begin, end, primary, data, std::move(owner)};
}

// The shard's memory as an ndarray owned by the Shard's Python object.
template <typename... Framework>
nb::ndarray<float, nb::c_contig, Framework...> view_of(Shard& s) {
  std::vector<size_t> shape;
  for (int64_t d : s.data.shape().dims()) shape.push_back(static_cast<size_t>(d));
  return nb::ndarray<float, nb::c_contig, Framework...>(s.data.data<float>(), shape.size(), shape.data(), nb::find(&s));
}

// ---- the trainer ----

std::ostream& quiet() {
  static std::ostream discard(nullptr);
  return discard;
}

class Trainer {
 public:
  Trainer(std::shared_ptr<const models::Model> model, const nb::object& strategy, const nb::kwargs& options) {
    const Process& process = init();
    std::unique_ptr<ParsedOptions> parsed = parse_options(options);
    cli::TrainArgs& args = *parsed->args;
    HSPMD_CHECK(args.nproc == 0) << "hspmd.Trainer: nproc= starts worker processes from the command line; start a "
                                    "Python script on N processes with `hspmd launch -n N -- python3 SCRIPT`";
    HSPMD_CHECK(!args.check_single && args.trace.empty() && args.dump_init_weights.empty() && args.max_restarts == 0)
        << "hspmd.Trainer: check_single=, trace=, dump_init_weights= and max_restarts= are `hspmd train`'s "
           "(compare with a one-process Trainer yourself; restarts are the launcher's)";
    if (!strategy.is_none()) {
      if (nb::isinstance<sharding::Strategy>(strategy)) {
        args.strategy_value = nb::cast<sharding::Strategy>(strategy);
      } else {
        args.strategy = nb::cast<std::string>(nb::str(strategy));  // a file (str or pathlib.Path)
      }
    }
    HSPMD_CHECK(args.resume.empty() || args.init_weights.empty()) << "--resume and --init-weights exclude each other";
    if (!args.resume.empty()) args.options = cli::resumed_options(args, *parsed->app, *model);
    worker_ = std::make_shared<cli::TrainWorker>(args, std::move(model), process.env, quiet());
    steps_ = args.options.steps;
  }

  runtime::StepMetrics step(const nb::object& batch) {
    runtime::DistTrainer& t = worker_->trainer();
    HSPMD_CHECK(!t.done()) << "the run has taken all its steps (steps=" << steps_ << "); give a larger steps=";
    if (!batch.is_none()) t.give_batch(segments_of(batch));
    nb::gil_scoped_release release;
    worker_->loop().advance();
    return worker_->loop().last_step();
  }

  double evaluate(const nb::handle& batch) {
    std::vector<data::Segment> segments = segments_of(batch);
    runtime::DistTrainer& t = worker_->trainer();
    t.give_batch(segments);  // checks the batch as a training one is checked
    nb::gil_scoped_release release;
    return t.evaluate(segments);
  }

  runtime::SwitchReport switch_to(const nb::object& strategy) {
    const sharding::Strategy s = nb::isinstance<sharding::Strategy>(strategy)
                                     ? nb::cast<sharding::Strategy>(strategy)
                                     : sharding::Strategy::from_file(nb::cast<std::string>(nb::str(strategy)));
    nb::gil_scoped_release release;
    return worker_->switch_to(s);
  }

  void save(const std::string& dir) {
    nb::gil_scoped_release release;
    worker_->trainer().save(dir);
  }

  std::vector<Shard> parameters() const {
    std::vector<Shard> out;
    for (const runtime::SavedShard& s : worker_->trainer().parameter_shards())
      out.push_back(make_shard(s.name, s.global_shape, s.region, s.data, true, worker_));
    return out;
  }

  nb::dict state_dict() const {
    nb::dict out;
    for (const runtime::SavedShard& s : worker_->trainer().state_shards())
      out[s.name.c_str()] = make_shard(s.name, s.global_shape, s.region, s.data, true, worker_);
    return out;
  }

  nb::object gather(const std::string& name, std::optional<int> rank) {
    Tensor whole;
    {
      nb::gil_scoped_release release;
      whole = worker_->trainer().gather_state_tensor(name);
    }
    if (rank && *rank != worker_->rank()) return nb::none();
    const sharding::Region all{std::vector<int64_t>(whole.shape().rank(), 0), dims_of(whole.shape())};
    nb::object shard = nb::cast(make_shard(name, whole.shape(), all, whole, true, worker_));
    return nb::module_::import_("numpy").attr("from_dlpack")(shard);
  }

  cli::TrainWorker& worker() { return *worker_; }

 private:
  std::shared_ptr<cli::TrainWorker> worker_;
  int64_t steps_ = 0;
};

}  // namespace

void bind_trainer(nb::module_& m) {
  nb::class_<Process>(m, "Process", "This process's place in the run (hspmd.init()).")
      .def_ro("rank", &Process::rank)
      .def_ro("world_size", &Process::world_size, "Processes of the run.")
      .def_ro("local_rank", &Process::local_rank, "Its index on its host.")
      .def_ro("source", &Process::source, "\"hspmd launch\", \"mpirun\", \"srun\", or \"one process\".")
      .def("__repr__", [](const Process& p) {
        return "Process(rank=" + std::to_string(p.rank) + ", world_size=" + std::to_string(p.world_size) + ", source='" +
               p.source + "')";
      });
  m.def("init", &init, nb::rv_policy::reference,
        "Joins the run this process belongs to: rank, world size and the run's store come from the launcher's\n"
        "environment (`hspmd launch -n N -- python3 train.py`, mpirun or srun), as `hspmd train`'s workers\n"
        "read them; without one, a run of one process. Call it once, first; later calls return the same.");
  m.def("train_options", &train_options, nb::sig("def train_options() -> dict[str, object]"),
        "Every option of `hspmd train` as {keyword: default}: what hspmd.Trainer(model, strategy, **options)\n"
        "accepts (--min-lr -> min_lr=), with the CLI's defaults.");

  nb::class_<runtime::StepMetrics>(m, "StepMetrics", "What one training step did (the same on every rank).")
      .def_ro("step", &runtime::StepMetrics::step, "The 1-based optimizer step just taken.")
      .def_ro("loss", &runtime::StepMetrics::loss, "Token-weighted mean cross-entropy over the global batch.")
      .def_ro("lr", &runtime::StepMetrics::lr, "The learning rate of the step.")
      .def_ro("grad_norm", &runtime::StepMetrics::grad_norm, "Global gradient norm, before clipping.")
      .def_ro("tokens", &runtime::StepMetrics::tokens, "Tokens of the global batch.")
      .def_ro("label_tokens", &runtime::StepMetrics::label_tokens, "Of them, those with a label.")
      .def_ro("seconds", &runtime::StepMetrics::step_seconds, "Wall time of the step.")
      .def_ro("tokens_per_second", &runtime::StepMetrics::tokens_per_second)
      .def_ro("peak_bytes", &runtime::StepMetrics::peak_bytes, "This rank's allocator high-water mark.")
      .def(
          "to_dict", [](const runtime::StepMetrics& s) { return json_value(s.to_json().dump()); },
          "The metrics line `hspmd train --metrics` writes, as a dict.")
      .def("__repr__", [](const runtime::StepMetrics& s) {
        return "StepMetrics(step=" + std::to_string(s.step) + ", loss=" + std::to_string(s.loss) +
               ", grad_norm=" + std::to_string(s.grad_norm) + ", tokens=" + std::to_string(s.tokens) + ")";
      });

  nb::class_<runtime::SwitchReport>(m, "SwitchReport", "What one strategy switch moved (Trainer.switch).")
      .def_ro("source", &runtime::SwitchReport::from, "The plan switched from.")
      .def_ro("target", &runtime::SwitchReport::to, "The plan switched to.")
      .def_ro("sent_bytes", &runtime::SwitchReport::sent_bytes, "Over all ranks.")
      .def_ro("local_copy_bytes", &runtime::SwitchReport::local_copy_bytes)
      .def_ro("messages", &runtime::SwitchReport::messages, "(sender, receiver) pairs.")
      .def_ro("seconds", &runtime::SwitchReport::total_seconds)
      .def("__str__", &runtime::SwitchReport::to_string);

  nb::class_<Shard>(m, "Shard",
                    "A part of a tensor this rank holds, in hspmd's own memory: numpy.from_dlpack(shard) and\n"
                    "torch.from_dlpack(shard) see it without a copy, so writing through them changes what hspmd\n"
                    "trains. A strategy switch moves tensors to new memory: take shards again after one.")
      .def_ro("name", &Shard::name, "Hugging Face name (moments: \"<name>.exp_avg\", \"<name>.exp_avg_sq\").")
      .def_prop_ro("global_shape", [](const Shard& s) { return as_tuple(s.global_shape); }, "The whole tensor's shape.")
      .def_prop_ro(
          "slices", [](const Shard& s) {
            nb::list l;
            for (size_t d = 0; d < s.begin.size(); ++d) l.append(nb::slice(nb::int_(s.begin[d]), nb::int_(s.end[d]), nb::none()));
            return nb::tuple(l);
          },
          "The part it holds: whole[shard.slices] == shard.")
      .def_prop_ro("shape", [](const Shard& s) { return as_tuple(dims_of(s.data.shape())); })
      // nanobind's array-API object speaks the whole protocol (versioned capsules when the consumer
      // asks for them: NumPy imports an unversioned one read-only).
      .def("__dlpack__",
           [](Shard& s, const nb::args& args, const nb::kwargs& kwargs) {
             return nb::cast(view_of<nb::array_api>(s)).attr("__dlpack__")(*args, **kwargs);
           },
           "The DLPack capsule of its memory (float32, CPU).")
      .def("__dlpack_device__", [](Shard&) { return nb::make_tuple(nb::int_(1), nb::int_(0)); }, "(kDLCPU, 0).")
      .def("numpy", [](Shard& s) { return view_of<nb::numpy>(s); },
           "A NumPy array over its memory (no copy).")
      .def("__repr__", [](const Shard& s) {
        std::string r = "Shard('" + s.name + "', slices=";
        for (size_t d = 0; d < s.begin.size(); ++d)
          r += (d ? "," : "[") + std::to_string(s.begin[d]) + ":" + std::to_string(s.end[d]);
        return r + "])";
      });

  nb::class_<Trainer>(m, "Trainer",
                      "Trains a model under a strategy, one step per call, on the batches the script gives it.\n\n"
                      "Every process of the run builds the same Trainer and passes the same global batches\n"
                      "(SPMD, like torchrun). Trainer(model, strategy=None, **options): `strategy` is a Strategy\n"
                      "or a strategy file (None: one process); every option of `hspmd train` is a keyword\n"
                      "argument with the same name (--min-lr -> min_lr=) and default (hspmd.train_options()).\n"
                      "`data=` gives step() without a batch the CLI's batches from that dataset.")
      .def(nb::init<std::shared_ptr<const models::Model>, const nb::object&, const nb::kwargs&>(), "model"_a,
           "strategy"_a = nb::none(), "options"_a,
           nb::sig("def __init__(self, model: Model, strategy: Strategy | str | None = None, **options: object) -> None"))
      .def_static(
          "load",
          [](const std::string& dir, std::optional<std::shared_ptr<const models::Model>> model, const nb::object& strategy,
             nb::kwargs options) {
            std::shared_ptr<const models::Model> m =
                model ? *model
                      : models::model_from_config_text(runtime::read_checkpoint_state(dir).at("config").dump(), dir);
            options["resume"] = dir;
            return new Trainer(std::move(m), strategy, options);
          },
          "dir"_a, "model"_a = nb::none(), "strategy"_a = nb::none(), "options"_a,
          nb::sig("def load(dir: str, model: Model | None = None, strategy: Strategy | str | None = None, "
                  "**options: object) -> Trainer"),
          "A Trainer continuing the run saved in `dir` (resume=dir): weights, AdamW moments, step and the\n"
          "checkpoint's options (keywords given override them). `model`: the checkpoint's config when None.")
      .def("step", &Trainer::step, "batch"_a = nb::none(),
           nb::sig("def step(self, batch: Sequence[object] | None = None) -> StepMetrics"),
           "Collective: one optimizer step on the global batch (a list of token-id arrays, each trained whole\n"
           "as its own sequence, at most seq_len tokens; every rank passes the same). Without a batch, the\n"
           "next batch of data= as `hspmd train` reads it. Returns the step's metrics, the same on every rank.")
      .def("evaluate", &Trainer::evaluate, "batch"_a, nb::sig("def evaluate(self, batch: Sequence[object]) -> float"),
           "Collective: the token-weighted mean loss of the global batch, forward only; weights unchanged.")
      .def("switch", &Trainer::switch_to, "strategy"_a,
           nb::sig("def switch(self, strategy: Strategy | str) -> SwitchReport"),
           "Collective: moves weights and AdamW moments to `strategy` (a Strategy or a file) before the next\n"
           "step, as `hspmd train --switch` does (switch_bsr=; with elastic=True through the elastic run);\n"
           "training goes on under it. hspmd.Error when it does not fit (then nothing moved).")
      .def("save", &Trainer::save, "dir"_a, "Collective: writes a checkpoint any strategy (and hspmd eval) reads.")
      .def("parameters", &Trainer::parameters,
           "This rank's parameter shards (each element on one rank only, as in the checkpoint).")
      .def("state_dict", &Trainer::state_dict,
           "{name: Shard} of this rank's parameters and AdamW moments, as the checkpoint stores them.")
      .def("gather", &Trainer::gather, "name"_a, "rank"_a = nb::none(),
           nb::sig("def gather(self, name: str, rank: int | None = None) -> numpy.typing.NDArray[numpy.float32] | None"),
           "Collective: the whole tensor `name` as a NumPy array on `rank` (None: every rank); None elsewhere.")
      .def_prop_ro("step_count", [](Trainer& t) { return t.worker().trainer().step_count(); }, "Steps taken.")
      .def_prop_ro("done", [](Trainer& t) { return t.worker().trainer().done(); }, "Whether all steps are taken.")
      .def_prop_ro("rank", [](Trainer& t) { return t.worker().rank(); })
      .def_prop_ro("world_size", [](Trainer& t) { return t.worker().world_size(); })
      .def_prop_ro("active", [](Trainer& t) { return t.worker().trainer().active(); },
                   "Whether this rank trains under the current strategy (False: a spare).")
      .def("describe", [](Trainer& t) { return t.worker().trainer().describe(); },
           "This rank's place: pipeline, stage, micro-batches, schedule, memory.");
}

}  // namespace hspmd::python
