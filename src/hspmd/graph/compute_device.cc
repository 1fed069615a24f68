#include "hspmd/graph/compute_device.h"

#include "hspmd/kernels/elementwise.h"
#include "hspmd/kernels/reduce.h"
#include "hspmd/kernels/slice.h"

namespace hspmd::graph {

ComputeDevice cpu_compute(Allocator::Options options) {
  return {.allocator = Allocator(std::move(options)),
          .kernels = &KernelRegistry::standard(),
          .add = [](const Tensor& a, const Tensor& b, const Tensor& out) { kernels::add(a, b, out); },
          .add_sum_squares = [](const Tensor& x,
                                const Tensor& total) { total.data<double>()[0] += kernels::sum_squares(x); },
          .add_to_total = [](const Tensor& x, const Tensor& total,
                             int64_t at) { total.data<double>()[at] += x.element_as_double(0); },
          .adamw_step = [](const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, int64_t step,
                           const kernels::AdamWOptions& o) { kernels::adamw_step(p, g, m, v, step, o); },
          .copy_region = kernels::copy_region};
}

}  // namespace hspmd::graph
