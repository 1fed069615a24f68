#include "hspmd/graph/cuda/cuda_kernels.h"

#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>

#include "hspmd/core/cuda/cuda_error.h"
#include "hspmd/core/cuda/cuda_tensor_memory.h"
#include "hspmd/core/error.h"
#include "hspmd/kernels/cross_entropy.h"
#include "hspmd/kernels/cuda/attention.h"
#include "hspmd/kernels/cuda/cross_entropy.h"
#include "hspmd/kernels/cuda/elementwise.h"
#include "hspmd/kernels/cuda/embedding.h"
#include "hspmd/kernels/cuda/gemm.h"
#include "hspmd/kernels/cuda/lm_head_loss.h"
#include "hspmd/kernels/cuda/rms_norm.h"
#include "hspmd/kernels/cuda/rope.h"

namespace hspmd::graph {

namespace {

namespace kc = kernels::cuda;

const std::vector<DType> kF32{DType::kFloat32};
const std::vector<DType> kF32OrBf16{DType::kFloat32, DType::kBFloat16};
const std::vector<DType> kAnyDType{DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32, DType::kInt64};

// What an entry needs besides its tensors: the rank's GPU memory (and through it the stream), and
// its GPU made current while the entry runs (a kernel launches on the current device, which must be
// the stream's; a rank on cuda:1 shares the process's current device with the others).
struct Gpu {
  cuda::CudaTensorMemory& memory;
  cudaStream_t stream;
  cuda::DeviceGuard current;
};
Gpu gpu_of(const KernelContext& k) {
  cuda::CudaTensorMemory& memory = cuda::cuda_tensor_memory(*k.allocator);
  return {memory, memory.stream(), cuda::DeviceGuard(memory.device_index())};
}

// One cuBLASLt handle and workspace per stream: GEMMs queued on two streams may run at once, and
// must not share a workspace. Never freed (a process has a few ranks' streams): destroyed at exit,
// after the CUDA runtime's own teardown, the handles' frees would fail.
kc::CublasLtGemm& gemm_for(const Gpu& gpu) {
  static std::mutex mu;
  static auto* handles = new std::map<cudaStream_t, std::unique_ptr<kc::CublasLtGemm>>();
  std::lock_guard lock(mu);
  std::unique_ptr<kc::CublasLtGemm>& handle = (*handles)[gpu.stream];
  if (!handle) handle = std::make_unique<kc::CublasLtGemm>(gpu.memory.device_index());
  return *handle;
}

const void* in(const Tensor& t) { return t.device_raw_data(); }
void* out(const Tensor& t) { return t.device_raw_data(); }
float* f32(const Tensor& t) { return t.device_data<float>(); }

// x rounded to bfloat16 values, kept in float32 (attention's bf16_operands: kernels/bf16_rounding.h).
Tensor rounded_to_bf16(const KernelContext& k, const Gpu& gpu, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), DType::kFloat32, k.allocator);
  kc::round_to_bfloat16(f32(x), f32(y), x.numel(), gpu.stream);
  return y;
}

// Attention's operands as its kernels take them: rounded to bf16 values first when the op asks for
// bf16 operands.
void round_attention_operands(const KernelContext& k, const Gpu& gpu, std::initializer_list<Tensor*> operands) {
  if (!k.op.attrs.bf16_operands) return;
  for (Tensor* t : operands) *t = rounded_to_bf16(k, gpu, *t);
}

// x cast to bfloat16 storage (the GEMMs' bf16 operands: half the bytes, tensor cores).
Tensor as_bf16(const KernelContext& k, const Gpu& gpu, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), DType::kBFloat16, k.allocator);
  kc::cast(x.dtype(), in(x), DType::kBFloat16, out(y), x.numel(), gpu.stream);
  return y;
}

// The vocabulary-parallel token losses normalize each row with statistics gathered from every
// shard (KernelContext::gather_vocab_shards). A shard computes its statistics on the device; they
// meet on the host (the runtime's all-gather takes host buffers: 3 float64 per token), where
// the CPU kernel combines them into the losses and the whole row's lse (a few flops per token),
// which return to the device for the loss's sum and the backward.
bool holds_a_vocabulary_shard(const KernelContext& k) { return k.op.attrs.vocab_size != 0; }

// What the shard's kernels need to know of the row: where its columns start, how wide it is.
int64_t vocab_start(const KernelContext& k) { return k.op.attrs.vocab_start; }
int64_t vocab_size(const KernelContext& k) { return k.op.attrs.vocab_size; }

// (loss, lse) from this shard's statistics stats [3, T] float64 on the device.
void finish_shard_loss(KernelContext& k, const Gpu& gpu, const Tensor& stats, const Tensor& targets,
                       const Tensor& loss_scale) {
  HSPMD_CHECK(k.gather_vocab_shards) << k.op.name << ": this rank holds vocabulary columns from " << vocab_start(k)
                                     << " of " << vocab_size(k)
                                     << " but was given no way to gather the other shards' statistics";
  const int64_t tokens = targets.numel();
  const Tensor all = k.gather_vocab_shards(stats.to_host());
  Tensor losses = Tensor::empty(Shape{tokens}, DType::kFloat32), lse = Tensor::empty(Shape{tokens}, DType::kFloat32);
  kernels::cross_entropy_combine(all, targets.to_host(), losses, lse,
                                 {.ignore_index = k.op.attrs.ignore_index, .vocab_start = vocab_start(k),
                                  .vocab_size = vocab_size(k), .softcap = k.op.attrs.softcap});
  losses = losses.clone(k.allocator);
  Tensor loss = k.new_output(0);
  kc::scaled_loss_sum(f32(losses), tokens, f32(loss_scale), f32(loss), gpu.stream);
  k.outputs = {loss, lse.clone(k.allocator)};
}

void add_leaf_kernels(KernelRegistry& r) {
  // A constant (the seed 1.0 of d loss / d loss): filled on the host and copied.
  r.add(OpKind::kFull, DeviceType::kCUDA, kAnyDType, [](KernelContext& k) {
    Tensor t = k.new_output(0);
    t.fill(k.op.attrs.value);
    k.outputs = {t};
  });
}

void add_embedding_kernels(KernelRegistry& r) {
  // An id outside the table gives a zero row on the GPU (a kernel cannot throw); the trainer checks
  // the dataset's vocabulary against the model before any step.
  r.add(OpKind::kEmbedding, DeviceType::kCUDA, kF32, [](KernelContext& k) {
    const Gpu gpu = gpu_of(k);
    const Tensor &table = k.inputs[0], &ids = k.inputs[1];
    Tensor y = k.new_output(0);
    kc::embedding_fwd(table.dtype(), in(table), ids.dtype(), in(ids), out(y),
                      {.tokens = ids.numel(), .vocab = table.dim(0), .hidden = table.dim(1),
                       .vocab_start = k.op.attrs.vocab_start, .padding_id = k.op.attrs.padding_id},
                      gpu.stream);
    k.outputs = {y};
  });
  r.add(OpKind::kEmbeddingBwd, DeviceType::kCUDA, kF32, [](KernelContext& k) {
    const Gpu gpu = gpu_of(k);
    const Tensor &ids = k.inputs[0], &dy = k.inputs[1];
    Tensor dtable = k.new_output(0);
    kc::embedding_bwd(dy.dtype(), ids.dtype(), in(ids), in(dy), f32(dtable),
                      {.tokens = ids.numel(), .vocab = dtable.dim(0), .hidden = dtable.dim(1),
                       .vocab_start = k.op.attrs.vocab_start, .padding_id = k.op.attrs.padding_id},
                      gpu.stream);
    k.outputs = {dtable};
  });
}

void add_rms_norm_kernels(KernelRegistry& r) {
  r.add(OpKind::kRmsNorm, DeviceType::kCUDA, kF32, [](KernelContext& k) {
    const Gpu gpu = gpu_of(k);
    const Tensor &x = k.inputs[0], &w = k.inputs[1];
    Tensor y = k.new_output(0), rstd = k.new_output(1);
    const int64_t cols = w.numel();
    kc::rms_norm_fwd(x.dtype(), in(x), in(w), static_cast<float>(k.op.attrs.eps), out(y), f32(rstd),
                     x.numel() / cols, cols, gpu.stream, static_cast<float>(k.op.attrs.weight_offset));
    k.outputs = {y, rstd};
  });
  r.add(OpKind::kRmsNormBwd, DeviceType::kCUDA, kF32, [](KernelContext& k) {
    const Gpu gpu = gpu_of(k);
    const Tensor &x = k.inputs[0], &w = k.inputs[1], &rstd = k.inputs[2], &dy = k.inputs[3];
    Tensor dx = k.new_output(0), dw = k.new_output(1);
    const int64_t cols = w.numel();
    kc::rms_norm_bwd(x.dtype(), in(x), in(w), f32(rstd), in(dy), out(dx), f32(dw), x.numel() / cols, cols,
                     gpu.stream, static_cast<float>(k.op.attrs.weight_offset));
    k.outputs = {dx, dw};
  });
}

// out [M, N] = op(a) @ op(b) on cuBLASLt: float32 (no TF32: the CPU's precision), bfloat16, or
// float32 tensors whose operands are cast to bfloat16 (bf16_operands; float32 accumulation and out).
void add_matmul_kernels(KernelRegistry& r) {
  r.add(OpKind::kMatmul, DeviceType::kCUDA, kF32OrBf16, [](KernelContext& k) {
    const Gpu gpu = gpu_of(k);
    const OpAttrs& at = k.op.attrs;
    Tensor a = k.inputs[0], b = k.inputs[1];
    Tensor y = k.new_output(0);
    k.outputs = {y};
    const int64_t m = y.dim(0), n = y.dim(1), inner = at.trans_a ? a.dim(0) : a.dim(1);
    if (m == 0 || n == 0) return;
    if (inner == 0) {  // an empty sum: cuBLASLt takes no zero sizes
      y.allocator()->backend().zero(out(y), y.nbytes());
      return;
    }
    if (at.bf16_operands) {
      a = as_bf16(k, gpu, a);
      b = as_bf16(k, gpu, b);
    }
    kc::GemmArgs g;
    g.a = in(a);
    g.b = in(b);
    g.out = out(y);
    g.operands = a.dtype();
    g.out_dtype = y.dtype();
    g.m = m;
    g.n = n;
    g.k = inner;
    g.trans_a = at.trans_a;
    g.trans_b = at.trans_b;
    gemm_for(gpu).run(g, gpu.stream);
  });
}

void add_rope_kernels(KernelRegistry& r) {
  // The model's inverse frequencies go to the device with each call: D/2 float64, copied ahead of
  // the kernel on the stream.
  auto rope = [](KernelContext& k, bool backward) {
    const Gpu gpu = gpu_of(k);
    const Tensor &x = k.inputs[0], &positions = k.inputs[1];
    const std::vector<double>& freq = k.op.attrs.inv_freq;
    const Tensor inv_freq =
        Tensor::from_vector(Shape{static_cast<int64_t>(freq.size())}, freq, k.allocator);
    Tensor y = k.new_output(0);
    const kc::RopeShape shape{.tokens = x.dim(0), .heads = x.dim(1), .head_dim = x.dim(2)};
    HSPMD_CHECK(static_cast<int64_t>(freq.size()) * 2 == shape.head_dim)
        << "rope: " << freq.size() << " inverse frequencies for head dim " << shape.head_dim;
    (backward ? kc::rope_bwd : kc::rope_fwd)(x.dtype(), in(x), positions.dtype(), in(positions),
                                             inv_freq.device_data<double>(), out(y), shape, gpu.stream);
    k.outputs = {y};
  };
  r.add(OpKind::kRope, DeviceType::kCUDA, kF32, [rope](KernelContext& k) { rope(k, false); });
  r.add(OpKind::kRopeBwd, DeviceType::kCUDA, kF32, [rope](KernelContext& k) { rope(k, true); });
}

kc::AttentionShape attention_shape(const KernelContext& k) {
  const Tensor &q = k.inputs[0], &key = k.inputs[1], &cu_seqlens = k.inputs[3];
  return {.tokens = q.dim(0), .q_heads = q.dim(1), .kv_heads = key.dim(1), .head_dim = q.dim(2),
          .sequences = cu_seqlens.numel() - 1, .scale = k.op.attrs.scale, .window = k.op.attrs.window};
}

// The reference CUDA attention (kernels/cuda/attention.h); bf16_operands rounds q, k, v (and dout)
// to bfloat16 values first, as the CPU kernel does. attention(q, k, v, cu_seqlens) -> (out, lse):
void attention_forward(KernelContext& k) {
  const Gpu gpu = gpu_of(k);
  Tensor q = k.inputs[0], key = k.inputs[1], v = k.inputs[2];
  const Tensor& cu_seqlens = k.inputs[3];
  round_attention_operands(k, gpu, {&q, &key, &v});
  Tensor o = k.new_output(0), lse = k.new_output(1);
  kc::attention_fwd(q.dtype(), in(q), in(key), in(v), cu_seqlens.dtype(), in(cu_seqlens), out(o), f32(lse),
                    attention_shape(k), gpu.stream);
  k.outputs = {o, lse};
}

// attention_bwd(q, k, v, cu_seqlens, out, lse, dout) -> (dq, dk, dv)
void attention_backward(KernelContext& k) {
  const Gpu gpu = gpu_of(k);
  Tensor q = k.inputs[0], key = k.inputs[1], v = k.inputs[2], dout = k.inputs[6];
  const Tensor &cu_seqlens = k.inputs[3], &o = k.inputs[4], &lse = k.inputs[5];
  round_attention_operands(k, gpu, {&q, &key, &v, &dout});
  Tensor dq = k.new_output(0), dk = k.new_output(1), dv = k.new_output(2);
  kc::attention_bwd(q.dtype(), in(q), in(key), in(v), cu_seqlens.dtype(), in(cu_seqlens), in(o), f32(lse),
                    in(dout), f32(dq), f32(dk), f32(dv), attention_shape(k), gpu.stream);
  k.outputs = {dq, dk, dv};
}

void add_attention_kernels(KernelRegistry& r) {
  r.add(OpKind::kAttention, DeviceType::kCUDA, kF32, attention_forward);
  r.add(OpKind::kAttentionBwd, DeviceType::kCUDA, kF32, attention_backward);
}

// The decoder graphs' attention is context_attention, whose rows carry their packed positions
// (q_index, kv_index): a CP rank's share of the queries (in the load-balanced order) against the
// gathered keys, or 0..T-1 for both without context parallelism, where the op is attention (the
// flash kernel where it applies). Telling the two apart reads the index vectors on the host when
// there are as many query rows as keys (which waits for the stream's work queued so far); a CP
// rank has fewer, and its indices stay on the device.
bool packed_order(const Tensor& q_index, const Tensor& kv_index) {
  const int64_t tk = kv_index.numel();
  if (q_index.numel() != tk) return false;
  for (const Tensor* index : {&q_index, &kv_index}) {
    const Tensor host = index->to_host();
    for (int64_t i = 0; i < tk; ++i) {
      if (static_cast<int64_t>(host.element_as_double(i)) != i) return false;
    }
  }
  return true;
}

// The kernel turns kv_index into each packed position's row (scratch [Tk] int64).
kc::ContextRows context_rows(const KernelContext& k, const Tensor& kv_row) {
  const Tensor &q_index = k.inputs[4], &kv_index = k.inputs[5];
  HSPMD_CHECK(q_index.dtype() == kv_index.dtype())
      << k.op.name << ": q_index is " << dtype_name(q_index.dtype()) << " and kv_index " << dtype_name(kv_index.dtype())
      << "; the CUDA context_attention takes one index dtype";
  return {.index_dtype = q_index.dtype(), .q_index = in(q_index), .kv_index = in(kv_index),
          .keys = kv_index.numel(), .kv_row = kv_row.device_data<int64_t>()};
}

Tensor kv_row_scratch(const KernelContext& k) {
  return Tensor::empty(Shape{k.inputs[5].numel()}, DType::kInt64, k.allocator);
}

void add_context_attention_kernels(KernelRegistry& r) {
  // context_attention(q, k, v, cu_seqlens, q_index, kv_index) -> (out, lse)
  r.add(OpKind::kContextAttention, DeviceType::kCUDA, kF32, [](KernelContext& k) {
    if (packed_order(k.inputs[4], k.inputs[5])) {
      const std::vector<Tensor> in(k.inputs.begin(), k.inputs.begin() + 4);
      KernelContext plain{k.op, in, k.output_shapes, k.allocator, {}, {}};
      attention_forward(plain);
      k.outputs = std::move(plain.outputs);
      return;
    }
    const Gpu gpu = gpu_of(k);
    Tensor q = k.inputs[0], key = k.inputs[1], v = k.inputs[2];
    const Tensor& cu_seqlens = k.inputs[3];
    round_attention_operands(k, gpu, {&q, &key, &v});
    const Tensor kv_row = kv_row_scratch(k);
    Tensor o = k.new_output(0), lse = k.new_output(1);
    kc::context_attention_fwd(q.dtype(), in(q), in(key), in(v), cu_seqlens.dtype(), in(cu_seqlens),
                              context_rows(k, kv_row), out(o), f32(lse), attention_shape(k), gpu.stream);
    k.outputs = {o, lse};
  });
  // context_attention_bwd(q, k, v, cu_seqlens, q_index, kv_index, out, lse, dout) -> (dq, dk, dv)
  r.add(OpKind::kContextAttentionBwd, DeviceType::kCUDA, kF32, [](KernelContext& k) {
    if (packed_order(k.inputs[4], k.inputs[5])) {
      const std::vector<Tensor>& x = k.inputs;
      const std::vector<Tensor> in{x[0], x[1], x[2], x[3], x[6], x[7], x[8]};
      KernelContext plain{k.op, in, k.output_shapes, k.allocator, {}, {}};
      attention_backward(plain);
      k.outputs = std::move(plain.outputs);
      return;
    }
    const Gpu gpu = gpu_of(k);
    Tensor q = k.inputs[0], key = k.inputs[1], v = k.inputs[2], dout = k.inputs[8];
    const Tensor &cu_seqlens = k.inputs[3], &o = k.inputs[6], &lse = k.inputs[7];
    round_attention_operands(k, gpu, {&q, &key, &v, &dout});
    const Tensor kv_row = kv_row_scratch(k);
    Tensor dq = k.new_output(0), dk = k.new_output(1), dv = k.new_output(2);
    kc::context_attention_bwd(q.dtype(), in(q), in(key), in(v), cu_seqlens.dtype(), in(cu_seqlens),
                              context_rows(k, kv_row), in(o), f32(lse), in(dout), f32(dq), f32(dk), f32(dv),
                              attention_shape(k), gpu.stream);
    k.outputs = {dq, dk, dv};
  });
}

void add_elementwise_kernels(KernelRegistry& r) {
  r.add(OpKind::kAdd, DeviceType::kCUDA, kF32OrBf16, [](KernelContext& k) {
    Tensor y = k.new_output(0);
    kc::add(y.dtype(), in(k.inputs[0]), in(k.inputs[1]), out(y), y.numel(), gpu_of(k).stream);
    k.outputs = {y};
  });
  r.add(OpKind::kScale, DeviceType::kCUDA, kF32OrBf16, [](KernelContext& k) {
    Tensor y = k.new_output(0);
    kc::scale(y.dtype(), in(k.inputs[0]), k.op.attrs.scale, out(y), y.numel(), gpu_of(k).stream);
    k.outputs = {y};
  });
  using GatedFwd = void (*)(DType, const void*, const void*, void*, int64_t, cudaStream_t);
  using GatedBwd = void (*)(DType, const void*, const void*, const void*, void*, void*, int64_t, cudaStream_t);
  auto add_gated = [&r](OpKind fwd_kind, OpKind bwd_kind, GatedFwd fwd, GatedBwd bwd) {
    r.add(fwd_kind, DeviceType::kCUDA, kF32OrBf16, [fwd](KernelContext& k) {
      Tensor y = k.new_output(0);
      fwd(y.dtype(), in(k.inputs[0]), in(k.inputs[1]), out(y), y.numel(), gpu_of(k).stream);
      k.outputs = {y};
    });
    r.add(bwd_kind, DeviceType::kCUDA, kF32OrBf16, [bwd](KernelContext& k) {
      Tensor dgate = k.new_output(0), dup = k.new_output(1);
      bwd(dgate.dtype(), in(k.inputs[0]), in(k.inputs[1]), in(k.inputs[2]), out(dgate), out(dup), dgate.numel(),
          gpu_of(k).stream);
      k.outputs = {dgate, dup};
    });
  };
  add_gated(OpKind::kSwiglu, OpKind::kSwigluBwd, kc::swiglu_fwd, kc::swiglu_bwd);
  add_gated(OpKind::kGegluTanh, OpKind::kGegluTanhBwd, kc::geglu_tanh_fwd, kc::geglu_tanh_bwd);
}

void add_reshape_kernels(KernelRegistry& r) {
  // Views: no data moves, so every dtype.
  r.add(OpKind::kReshape, DeviceType::kCUDA, kAnyDType, [](KernelContext& k) {
    const Tensor& x = k.inputs[0];
    const Shape& to = k.output_shapes[0];
    HSPMD_CHECK(x.numel() == to.numel()) << "reshape: input " << x.to_string() << " has " << x.numel()
                                         << " elements, target " << to.to_string() << " has " << to.numel();
    k.outputs = {x.reshape(to.dims())};
  });
  r.add(OpKind::kReshard, DeviceType::kCUDA, kAnyDType, [](KernelContext& k) { k.outputs = {k.inputs[0]}; });
}

kc::CrossEntropyShape ce_shape(const KernelContext& k, const Tensor& logits) {
  return {.tokens = logits.dim(0), .vocab = logits.dim(1), .ignore_index = k.op.attrs.ignore_index,
          .softcap = k.op.attrs.softcap, .vocab_start = vocab_start(k), .vocab_size = vocab_size(k)};
}

void add_token_loss_kernels(KernelRegistry& r) {
  // cross_entropy(logits, targets, loss_scale) -> (loss, lse)
  r.add(OpKind::kCrossEntropy, DeviceType::kCUDA, kF32, [](KernelContext& k) {
    const Gpu gpu = gpu_of(k);
    const Tensor &logits = k.inputs[0], &targets = k.inputs[1], &loss_scale = k.inputs[2];
    if (holds_a_vocabulary_shard(k)) {
      Tensor stats = Tensor::empty(Shape{3, targets.numel()}, DType::kFloat64, k.allocator);
      kc::cross_entropy_shard_stats(logits.dtype(), in(logits), targets.dtype(), in(targets),
                                    stats.device_data<double>(), targets.numel(), ce_shape(k, logits), gpu.stream);
      return finish_shard_loss(k, gpu, stats, targets, loss_scale);
    }
    Tensor loss = k.new_output(0), lse = k.new_output(1);
    Tensor losses = Tensor::empty(Shape{targets.numel()}, DType::kFloat32, k.allocator);
    kc::cross_entropy_fwd(logits.dtype(), in(logits), targets.dtype(), in(targets), f32(losses), f32(lse),
                          ce_shape(k, logits), gpu.stream);
    kc::scaled_loss_sum(f32(losses), losses.numel(), f32(loss_scale), f32(loss), gpu.stream);
    k.outputs = {loss, lse};
  });
  // cross_entropy_bwd(logits, targets, lse, loss_scale, dloss) -> dlogits
  r.add(OpKind::kCrossEntropyBwd, DeviceType::kCUDA, kF32, [](KernelContext& k) {
    const Gpu gpu = gpu_of(k);
    const std::vector<Tensor>& x = k.inputs;
    const Tensor& logits = x[0];
    Tensor dlogits = k.new_output(0);
    Tensor dlosses = Tensor::empty(Shape{logits.dim(0)}, DType::kFloat32, k.allocator);
    kc::token_loss_grads(f32(x[3]), f32(x[4]), f32(dlosses), dlosses.numel(), gpu.stream);
    kc::cross_entropy_bwd(logits.dtype(), in(logits), x[1].dtype(), in(x[1]), f32(x[2]), f32(dlosses), out(dlogits),
                          ce_shape(k, logits), gpu.stream);
    k.outputs = {dlogits};
  });
}

kc::LmHeadLossShape head_shape(const KernelContext& k) {
  const Tensor &x = k.inputs[0], &w = k.inputs[1];
  return {.tokens = x.dim(0), .hidden = x.dim(1), .vocab = w.dim(0), .ignore_index = k.op.attrs.ignore_index,
          .softcap = k.op.attrs.softcap, .chunk_rows = 0, .vocab_start = vocab_start(k), .vocab_size = vocab_size(k)};
}

// The chunked lm-head loss (kernels/cuda/lm_head_loss.h); bf16_operands casts x and w to bfloat16
// storage first (its GEMMs then run on bfloat16 operands, dlogits rounded alike).
void add_lm_head_loss_kernels(KernelRegistry& r) {
  // lm_head_loss(x, w, targets, loss_scale) -> (loss, lse)
  r.add(OpKind::kLmHeadLoss, DeviceType::kCUDA, kF32, [](KernelContext& k) {
    const Gpu gpu = gpu_of(k);
    Tensor x = k.inputs[0], w = k.inputs[1];
    const Tensor &targets = k.inputs[2], &loss_scale = k.inputs[3];
    if (k.op.attrs.bf16_operands) {
      x = as_bf16(k, gpu, x);
      w = as_bf16(k, gpu, w);
    }
    const kc::LmHeadLossContext ctx{gemm_for(gpu), gpu.memory.allocator(), gpu.stream};
    if (holds_a_vocabulary_shard(k)) {
      Tensor stats = Tensor::empty(Shape{3, targets.numel()}, DType::kFloat64, k.allocator);
      kc::lm_head_loss_stats(ctx, x.dtype(), in(x), in(w), targets.dtype(), in(targets), stats.device_data<double>(),
                             head_shape(k));
      return finish_shard_loss(k, gpu, stats, targets, loss_scale);
    }
    Tensor loss = k.new_output(0), lse = k.new_output(1);
    Tensor losses = Tensor::empty(Shape{targets.numel()}, DType::kFloat32, k.allocator);
    kc::lm_head_loss_fwd(ctx, x.dtype(), in(x), in(w), targets.dtype(), in(targets), f32(losses), f32(lse),
                         head_shape(k));
    kc::scaled_loss_sum(f32(losses), losses.numel(), f32(loss_scale), f32(loss), gpu.stream);
    k.outputs = {loss, lse};
  });
  // lm_head_loss_bwd(x, w, targets, lse, loss_scale, dloss) -> (dx, dw)
  r.add(OpKind::kLmHeadLossBwd, DeviceType::kCUDA, kF32, [](KernelContext& k) {
    const Gpu gpu = gpu_of(k);
    Tensor x = k.inputs[0], w = k.inputs[1];
    const std::vector<Tensor>& in_ = k.inputs;
    if (k.op.attrs.bf16_operands) {
      x = as_bf16(k, gpu, x);
      w = as_bf16(k, gpu, w);
    }
    Tensor dx = k.new_output(0), dw = k.new_output(1);
    Tensor dlosses = Tensor::empty(Shape{x.dim(0)}, DType::kFloat32, k.allocator);
    kc::token_loss_grads(f32(in_[4]), f32(in_[5]), f32(dlosses), dlosses.numel(), gpu.stream);
    const kc::LmHeadLossContext ctx{gemm_for(gpu), gpu.memory.allocator(), gpu.stream};
    kc::lm_head_loss_bwd(ctx, x.dtype(), in(x), in(w), in_[2].dtype(), in(in_[2]), f32(in_[3]), f32(dlosses), f32(dx),
                         f32(dw), head_shape(k));
    k.outputs = {dx, dw};
  });
}

void add_bias_add_kernels(KernelRegistry& r) {
  r.add(OpKind::kBiasAdd, DeviceType::kCUDA, kF32, [](KernelContext& k) {
    const Tensor &x = k.inputs[0], &bias = k.inputs[1];
    Tensor y = k.new_output(0);
    const int64_t cols = bias.numel();
    kc::bias_add(x.dtype(), in(x), in(bias), out(y), x.numel() / cols, cols, gpu_of(k).stream);
    k.outputs = {y};
  });
  // dbias = dy summed over every leading dim.
  r.add(OpKind::kBiasAddBwd, DeviceType::kCUDA, kF32, [](KernelContext& k) {
    const Tensor& dy = k.inputs[0];
    Tensor dbias = k.new_output(0);
    const int64_t cols = dbias.numel();
    kc::sum_rows(dy.dtype(), in(dy), out(dbias), dy.numel() / cols, cols, gpu_of(k).stream);
    k.outputs = {dbias};
  });
}

}  // namespace

KernelRegistry build_cuda_kernels() {
  KernelRegistry r;
  add_leaf_kernels(r);
  add_embedding_kernels(r);
  add_rms_norm_kernels(r);
  add_matmul_kernels(r);
  add_rope_kernels(r);
  add_attention_kernels(r);
  add_context_attention_kernels(r);
  add_elementwise_kernels(r);
  add_reshape_kernels(r);
  add_token_loss_kernels(r);
  add_lm_head_loss_kernels(r);
  add_bias_add_kernels(r);
  return r;
}

const KernelRegistry& cuda_kernels() {
  static const KernelRegistry registry = build_cuda_kernels();
  return registry;
}

const std::vector<CpuOnlyKernel>& cpu_only_kernels() {
  // float64: the CPU kernels' extra precision serves as the oracle of tests; the CUDA kernels
  // compute in float32 (bfloat16 storage at most), and no training graph is float64.
  static const std::vector<CpuOnlyKernel> list = [] {
    const std::string f64 = "float64 is the CPU oracle's precision; the CUDA kernels compute in float32";
    std::vector<CpuOnlyKernel> l;
    for (OpKind kind : {OpKind::kEmbedding, OpKind::kEmbeddingBwd, OpKind::kRmsNorm, OpKind::kRmsNormBwd,
                        OpKind::kMatmul, OpKind::kRope, OpKind::kRopeBwd, OpKind::kAttention, OpKind::kAttentionBwd,
                        OpKind::kSwiglu, OpKind::kSwigluBwd, OpKind::kAdd, OpKind::kGegluTanh, OpKind::kGegluTanhBwd,
                        OpKind::kScale, OpKind::kCrossEntropy, OpKind::kCrossEntropyBwd, OpKind::kLmHeadLoss,
                        OpKind::kLmHeadLossBwd, OpKind::kBiasAdd, OpKind::kBiasAddBwd}) {
      l.push_back({kind, DType::kFloat64, f64});
    }
    l.push_back({OpKind::kContextAttention, DType::kFloat64, f64});
    l.push_back({OpKind::kContextAttentionBwd, DType::kFloat64, f64});
    return l;
  }();
  return list;
}

}  // namespace hspmd::graph
