// matmul (kernels/matmul.h) on the GEMM libraries of cpu/blas.h. One GEMM per batch, or a single
// GEMM for the whole batch when b is shared and a is not transposed (a[B, M, K] is then just
// a[B*M, K]): the common linear-layer case gets one large, well-threaded call instead of B small ones.
#include "hspmd/kernels/matmul.h"

#include <climits>
#include <cstring>
#include <sstream>
#include <vector>

#include "hspmd/kernels/bf16_rounding.h"
#include "hspmd/kernels/cpu/blas.h"

namespace hspmd::kernels {
namespace {

// Sizes of one matmul call after validation. out is [batch..., m, n]; b_shared means b is one 2-D
// matrix used by every batch.
struct MatmulDims {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool b_shared = false;
};

std::string describe(const Tensor& a, const Tensor& b, const MatmulOptions& o) {
  std::ostringstream s;
  s << "matmul: a " << a.to_string() << (o.trans_a ? "^T" : "") << " and b " << b.to_string()
    << (o.trans_b ? "^T" : "");
  return s.str();
}

bool overlaps(const Tensor& x, const Tensor& y) {
  const char* xb = static_cast<const char*>(x.raw_data());
  const char* yb = static_cast<const char*>(y.raw_data());
  return x.nbytes() > 0 && y.nbytes() > 0 && xb < yb + y.nbytes() && yb < xb + x.nbytes();
}

MatmulDims check_matmul(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulOptions& o) {
  HSPMD_CHECK(a.defined() && b.defined() && out.defined()) << "matmul: undefined tensor among a, b, out";
  const std::string what = describe(a, b, o);
  HSPMD_CHECK(a.rank() >= 2 && b.rank() >= 2) << what << ": both need at least 2 dims";
  HSPMD_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype())
      << what << ", out " << out.to_string() << ": dtypes differ";
  HSPMD_CHECK(a.dtype() == DType::kFloat32 || a.dtype() == DType::kFloat64 || a.dtype() == DType::kBFloat16)
      << what << ": dtype must be float32, float64 or bfloat16";
  MatmulDims d;
  d.m = o.trans_a ? a.dim(-1) : a.dim(-2);
  d.k = o.trans_a ? a.dim(-2) : a.dim(-1);
  int64_t kb = o.trans_b ? b.dim(-1) : b.dim(-2);
  d.n = o.trans_b ? b.dim(-2) : b.dim(-1);
  HSPMD_CHECK(d.k == kb) << what << ": inner dims " << d.k << " and " << kb << " differ";

  std::vector<int64_t> lead(a.shape().dims().begin(), a.shape().dims().end() - 2);
  d.b_shared = b.rank() == 2 && a.rank() > 2;
  if (!d.b_shared) {
    std::vector<int64_t> lead_b(b.shape().dims().begin(), b.shape().dims().end() - 2);
    HSPMD_CHECK(lead == lead_b) << what << ": batch dims differ (b must have a's batch dims or be 2-D)";
  }
  for (int64_t x : lead) d.batch *= x;
  std::vector<int64_t> expect = lead;
  expect.push_back(d.m);
  expect.push_back(d.n);
  HSPMD_CHECK(out.shape() == Shape(expect)) << what << ": out is " << out.to_string() << ", expected "
                                            << Shape(expect).to_string();
  HSPMD_CHECK(!overlaps(out, a) && !overlaps(out, b)) << what << ": out must not overlap an input";
  HSPMD_CHECK(!o.bf16_operands || a.dtype() == DType::kFloat32)
      << what << ": bf16 operands are rounded from float32 inputs, got " << dtype_name(a.dtype());
  int64_t rows = d.b_shared && !o.trans_a ? d.batch * d.m : d.m;
  HSPMD_CHECK(rows <= INT_MAX && d.n <= INT_MAX && d.k <= INT_MAX)
      << what << ": a dimension exceeds the BLAS limit " << INT_MAX;
  return d;
}

// `In` is the operands' type, `T` the result's (bf16 operands accumulate into float32).
template <typename In, typename T>
void matmul_typed(const In* a, const In* b, T* c, const MatmulDims& d, const MatmulOptions& o) {
  const T alpha = static_cast<T>(o.alpha), beta = static_cast<T>(o.beta);
  const int64_t lda = o.trans_a ? d.m : d.k, ldb = o.trans_b ? d.k : d.n;
  if (d.b_shared && !o.trans_a) {
    cpu::gemm(false, o.trans_b, d.batch * d.m, d.n, d.k, alpha, a, lda, b, ldb, beta, c, d.n);
    return;
  }
  const int64_t b_step = d.b_shared ? 0 : d.k * d.n;
  auto product = [&](int64_t i) {
    cpu::gemm(o.trans_a, o.trans_b, d.m, d.n, d.k, alpha, a + i * d.m * d.k, lda, b + i * b_step, ldb, beta,
              c + i * d.m * d.n, d.n);
  };
  // Small products run single-threaded inside the GEMM library, so spread the batch over our threads
  // instead (each batch writes its own slice of out: no races, same result for any thread count).
  const bool small = d.m * d.n * d.k <= cpu::kSingleThreadedGemmWork;
  if (small && d.batch > 1 && d.batch * d.m * d.n * d.k >= (1 << 20)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < d.batch; ++i) product(i);
    return;
  }
  // Not inside a parallel region, not even an inactive one (`omp parallel if (false)`): a GEMM
  // library's own region nested in it gets a new team, and libgomp started a thread for every such
  // call while the pool's thread spun idle (docs/cpu-kernels.md, "GEMM").
  for (int64_t i = 0; i < d.batch; ++i) product(i);
}

std::vector<float> to_float(const Tensor& t) {
  std::vector<float> r(static_cast<size_t>(t.numel()));
  const BFloat16* p = t.data<BFloat16>();
  const int64_t n = t.numel();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) r[i] = static_cast<float>(p[i]);
  return r;
}

// bfloat16 is storage only: widen a, b (and out when beta reads it) to float32, multiply, round once.
void matmul_bf16(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulDims& d, const MatmulOptions& o) {
  std::vector<float> fa = to_float(a), fb = to_float(b);
  std::vector<float> fc = o.beta != 0.0 ? to_float(out) : std::vector<float>(static_cast<size_t>(out.numel()));
  matmul_typed(fa.data(), fb.data(), fc.data(), d, o);
  BFloat16* p = out.data<BFloat16>();
  const int64_t n = out.numel();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) p[i] = BFloat16(fc[i]);
}

// Two scratch buffers per calling thread, kept between calls and grown when needed. Fresh buffers
// the size of the lm head's gradient (tokens x vocabulary) page-faulted on every call, which cost
// tiny models more than their GEMMs. The price: the largest operand stays allocated.
template <typename T>
T* scratch(int slot, int64_t n) {
  thread_local std::vector<T> buffers[2];
  std::vector<T>& b = buffers[slot];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}

// bf16 operands: bf16 copies of a and b, then oneDNN's bf16 GEMM where the CPU has bf16 dot
// products; elsewhere rounded float32 copies and the float32 GEMM, whose products of bf16 values
// are exact, so both compute a bf16 GEMM with float32 accumulation (up to the order of additions).
void matmul_bf16_operands(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulDims& d,
                          const MatmulOptions& o) {
  if (bf16_gemm() == Bf16Gemm::kOneDnn) {
    BFloat16* ra = scratch<BFloat16>(0, a.numel());
    BFloat16* rb = scratch<BFloat16>(1, b.numel());
    to_bfloat16(a.data<float>(), ra, a.numel());
    to_bfloat16(b.data<float>(), rb, b.numel());
    matmul_typed(ra, rb, out.data<float>(), d, o);
    return;
  }
  float* ra = scratch<float>(0, a.numel());
  float* rb = scratch<float>(1, b.numel());
  round_to_bfloat16(a.data<float>(), ra, a.numel());
  round_to_bfloat16(b.data<float>(), rb, b.numel());
  matmul_typed(ra, rb, out.data<float>(), d, o);
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulOptions& options) {
  const MatmulDims d = check_matmul(a, b, out, options);
  if (out.numel() == 0) return;
  if (d.k == 0) {
    // An empty sum: out = beta * out. BLAS would skip this for some sizes; beta == 0 must also
    // clear NaN/garbage in out, so it is a fill rather than a multiply.
    if (options.beta == 0.0) {
      Tensor handle = out;  // a Tensor is a handle: filling the copy writes out's storage
      handle.fill(0.0);
    } else {
      for (int64_t i = 0; i < out.numel(); ++i) {
        double v = options.beta * out.element_as_double(i);
        if (out.dtype() == DType::kFloat32) out.data<float>()[i] = static_cast<float>(v);
        if (out.dtype() == DType::kFloat64) out.data<double>()[i] = v;
        if (out.dtype() == DType::kBFloat16) out.data<BFloat16>()[i] = BFloat16(static_cast<float>(v));
      }
    }
    return;
  }
  switch (a.dtype()) {
    case DType::kFloat32:
      if (options.bf16_operands) {
        matmul_bf16_operands(a, b, out, d, options);
      } else {
        matmul_typed(a.data<float>(), b.data<float>(), out.data<float>(), d, options);
      }
      break;
    case DType::kFloat64:
      matmul_typed(a.data<double>(), b.data<double>(), out.data<double>(), d, options);
      break;
    case DType::kBFloat16:
      matmul_bf16(a, b, out, d, options);
      break;
    default:
      HSPMD_ASSERT(false) << "matmul: dtype " << dtype_name(a.dtype()) << " passed the check";
  }
}

}  // namespace hspmd::kernels
