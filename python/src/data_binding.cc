// hspmd.Dataset (data/token_dataset.h) and its batches (data/loader.h): a token dataset made by
// `hspmd data prepare`, read from Python, and the global batches `hspmd train` reads from it (same
// seq_len, global_batch_tokens and seed give the same segments in the same order), as lists of
// NumPy token-id arrays for Trainer.step. A script that trains on them trains what the CLI trains.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "hspmd/data/loader.h"
#include "hspmd/data/token_dataset.h"
#include "hspmd/runtime/train_options.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace hspmd::python {

namespace {

// Token ids as a NumPy int32 array owning its copy.
nb::ndarray<nb::numpy, int32_t> numpy_ids(std::vector<int32_t> ids) {
  auto* owned = new std::vector<int32_t>(std::move(ids));
  nb::capsule free(owned, [](void* p) noexcept { delete static_cast<std::vector<int32_t>*>(p); });
  return nb::ndarray<nb::numpy, int32_t>(owned->data(), {owned->size()}, free);
}

// An endless iterator over global batches (epoch after epoch, reshuffled by seed).
struct Batches {
  std::shared_ptr<const data::TokenDataset> dataset;
  data::Loader loader;

  Batches(std::shared_ptr<const data::TokenDataset> d, data::LoaderOptions options)
      : dataset(std::move(d)), loader(*dataset, options) {}

  nb::list next() {
    nb::list batch;
    for (data::Segment& s : loader.next()) batch.append(numpy_ids(std::move(s.tokens)));
    return batch;
  }
};

}  // namespace

void bind_data(nb::module_& m) {
  nb::class_<Batches>(m, "Batches", "The global batches of a dataset, as `hspmd train` reads them (endless).")
      .def("__iter__", [](nb::handle self) { return self; }, nb::rv_policy::reference)
      .def("__next__", &Batches::next, "The next global batch: a list of int32 token-id arrays.")
      .def_prop_ro("epoch", [](const Batches& b) { return b.loader.state().epoch; }, "Epochs completed.");

  const runtime::TrainerOptions defaults;
  nb::class_<data::TokenDataset>(m, "Dataset", "A token dataset made by `hspmd data prepare`.")
      .def(nb::new_([](const std::string& dir) {
             return std::make_shared<data::TokenDataset>(data::TokenDataset::open(dir));
           }),
           "dir"_a, "Opens the dataset in `dir` (its training split).")
      .def_static(
          "validation", [](const std::string& dir) {
            return std::make_shared<data::TokenDataset>(data::TokenDataset::open_validation(dir));
          },
          "dir"_a, "The validation split (`hspmd data prepare --val-fraction`).")
      .def_prop_ro("num_documents", &data::TokenDataset::num_documents)
      .def_prop_ro("num_tokens", &data::TokenDataset::num_tokens)
      .def_prop_ro("vocab_size", &data::TokenDataset::vocab_size, "The vocabulary it was prepared for.")
      .def(
          "document", [](const data::TokenDataset& d, uint64_t i) { return numpy_ids(d.document(i)); }, "index"_a,
          "Document `index`'s token ids (int32).")
      .def("__len__", &data::TokenDataset::num_documents)
      .def(
          "batches",
          [](nb::handle self, int64_t seq_len, int64_t global_batch_tokens, uint64_t seed) {
            auto dataset = nb::cast<std::shared_ptr<data::TokenDataset>>(self);
            return Batches(dataset, {.seq_len = seq_len, .global_batch_tokens = global_batch_tokens, .seed = seed});
          },
          "seq_len"_a = defaults.seq_len, "global_batch_tokens"_a = defaults.global_batch_tokens, "seed"_a = defaults.seed,
          "The global batches `hspmd train --seq-len --global-batch-tokens --seed` trains on, in its order:\n"
          "documents cut into segments of at most seq_len tokens, shuffled per epoch by seed, packed into\n"
          "batches of at most global_batch_tokens tokens.");
}

}  // namespace hspmd::python
