#include "runtime/fake_device_compute_testlib.h"

#include <memory>
#include <string>
#include <vector>

#include "hspmd/kernels/adamw.h"
#include "hspmd/kernels/elementwise.h"
#include "hspmd/kernels/reduce.h"
#include "hspmd/kernels/slice.h"

namespace hspmd::runtime::testing {

namespace {

// Every CPU kernel again under DeviceType::kCUDA, run on host copies of the inputs.
graph::KernelRegistry staged_cpu_kernels() {
  const graph::KernelRegistry& cpu = graph::KernelRegistry::standard();
  graph::KernelRegistry staged;
  for (int kind = 0; kind < graph::kNumOpKinds; ++kind) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32, DType::kInt64}) {
      const graph::Kernel* kernel = cpu.find(static_cast<graph::OpKind>(kind), DeviceType::kCPU, dtype);
      if (kernel == nullptr) continue;
      staged.add(static_cast<graph::OpKind>(kind), DeviceType::kCUDA, {dtype}, [kernel](graph::KernelContext& k) {
        std::vector<Tensor> inputs;
        for (const Tensor& t : k.inputs) inputs.push_back(t.to_host());
        graph::KernelContext host{k.op, inputs, k.output_shapes, &Allocator::process_default(), {},
                                  k.gather_vocab_shards};
        (*kernel)(host);
        k.outputs.clear();
        for (const Tensor& t : host.outputs) k.outputs.push_back(t.clone(k.allocator));
      });
    }
  }
  return staged;
}

}  // namespace

graph::ComputeDevice fake_device_compute(std::shared_ptr<hspmd::testing::FakeDeviceMemory> memory) {
  static const graph::KernelRegistry kernels = staged_cpu_kernels();
  return {.allocator = Allocator(memory),
          .kernels = &kernels,
          .add = [](const Tensor& a, const Tensor& b, const Tensor& out) {
            const Tensor sum = a.to_host();  // a fresh host copy: a is on the fake device
            kernels::add(sum, b.to_host(), sum);
            Tensor(out).copy_from(sum);  // a handle: the copy writes out's storage
          },
          .add_sum_squares = [](const Tensor& x, const Tensor& total) {
            const Tensor sum = total.to_host();  // staged as the other kernels are; same additions as the host's
            sum.data<double>()[0] += kernels::sum_squares(x.to_host());
            Tensor(total).copy_from(sum);
          },
          .add_to_total = [](const Tensor& x, const Tensor& total, int64_t at) {
            const Tensor sum = total.to_host();
            sum.data<double>()[at] += x.to_host().element_as_double(0);
            Tensor(total).copy_from(sum);
          },
          .adamw_step = [](const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, int64_t step,
                           const kernels::AdamWOptions& o) {
            const Tensor hp = p.to_host(), hm = m.to_host(), hv = v.to_host();
            kernels::adamw_step(hp, g.to_host(), hm, hv, step, o);
            Tensor(p).copy_from(hp);  // handles: the copies write the device tensors' storage
            Tensor(m).copy_from(hm);
            Tensor(v).copy_from(hv);
          },
          .copy_region = [memory](const Tensor& src, const std::vector<int64_t>& src_starts, const Tensor& dst,
                            const std::vector<int64_t>& dst_starts, const std::vector<int64_t>& extents) {
            const Tensor hd = dst.to_host();
            kernels::copy_region(src.to_host(), src_starts, hd, dst_starts, extents);
            Tensor(dst).copy_from(hd);
            ++memory->region_copies;
          }};
}

}  // namespace hspmd::runtime::testing
