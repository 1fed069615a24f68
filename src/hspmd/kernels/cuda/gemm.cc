#include "hspmd/kernels/cuda/gemm.h"

#include <memory>

#include "hspmd/core/cuda/cuda_error.h"
#include "hspmd/kernels/cuda/cublaslt_library.h"

#define HSPMD_CUBLAS_CHECK(call)                                                                        \
  do {                                                                                                  \
    const cublasStatus_t hspmd_cublas_status_ = (call);                                                 \
    HSPMD_CHECK(hspmd_cublas_status_ == CUBLAS_STATUS_SUCCESS)                                          \
        << #call << " failed: " << cublaslt_library().GetStatusName(hspmd_cublas_status_) << " ("        \
        << cublaslt_library().GetStatusString(hspmd_cublas_status_) << ")";                                       \
  } while (false)

namespace hspmd::kernels::cuda {

namespace {

// Owners of cuBLASLt's descriptors, so an Error thrown halfway frees them.
struct MatmulDescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublaslt_library().MatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublaslt_library().MatrixLayoutDestroy(l); }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublaslt_library().MatmulPreferenceDestroy(p); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, MatmulDescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter>;

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return CUDA_R_32F;
    case DType::kBFloat16: return CUDA_R_16BF;
    case DType::kFloat64:
    case DType::kInt32:
    case DType::kInt64: break;
  }
  HSPMD_THROW() << "cuBLASLt GEMM: no " << dtype_name(dtype) << " operands (float32 or bfloat16)";
}

// The column-major layout of a row-major [rows, cols] matrix: [cols, rows] with leading dimension
// cols.
Layout row_major_layout(DType dtype, int64_t rows, int64_t cols, int64_t batch, int64_t batch_stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  HSPMD_CUBLAS_CHECK(cublaslt_library().MatrixLayoutCreate(&layout, cuda_type(dtype), static_cast<uint64_t>(cols),
                                                static_cast<uint64_t>(rows), cols));
  Layout owned(layout);
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    HSPMD_CUBLAS_CHECK(
        cublaslt_library().MatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    HSPMD_CUBLAS_CHECK(cublaslt_library().MatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                        &batch_stride, sizeof(batch_stride)));
  }
  return owned;
}

}  // namespace

CublasLtGemm::CublasLtGemm(int device, size_t workspace_bytes) : device_(device), workspace_bytes_(workspace_bytes) {
  hspmd::cuda::DeviceGuard guard(device_);
  HSPMD_CUBLAS_CHECK(cublaslt_library().Create(&handle_));
  if (workspace_bytes_ > 0) {
    const cudaError_t status = cudaMalloc(&workspace_, workspace_bytes_);
    if (status != cudaSuccess) cublaslt_library().Destroy(handle_);
    HSPMD_CUDA_CHECK(status);
  }
}

CublasLtGemm::~CublasLtGemm() {
  hspmd::cuda::DeviceGuard guard(device_, hspmd::cuda::DeviceGuard::kQuiet);
  cudaFree(workspace_);
  cublaslt_library().Destroy(handle_);
}

void CublasLtGemm::run(const GemmArgs& g, cudaStream_t stream) {
  const char* kernel = "cuda gemm";
  HSPMD_CHECK(g.operands == DType::kFloat32 || g.operands == DType::kBFloat16)
      << kernel << ": operands must be float32 or bfloat16, got " << dtype_name(g.operands);
  HSPMD_CHECK(g.out_dtype == DType::kFloat32 || (g.out_dtype == DType::kBFloat16 && g.operands == DType::kBFloat16))
      << kernel << ": out must be float32, or bfloat16 with bfloat16 operands; got " << dtype_name(g.out_dtype)
      << " with " << dtype_name(g.operands) << " operands";
  HSPMD_CHECK(g.m > 0 && g.n > 0 && g.k > 0 && g.batch > 0)
      << kernel << ": need positive sizes, got batch " << g.batch << ", m " << g.m << ", n " << g.n << ", k " << g.k;
  HSPMD_CHECK(!g.allow_tf32 || g.operands == DType::kFloat32) << kernel << ": allow_tf32 is for float32 operands";
  hspmd::cuda::DeviceGuard guard(device_);

  const cublasComputeType_t compute =
      g.operands == DType::kFloat32 && g.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasLtMatmulDesc_t desc_raw = nullptr;
  HSPMD_CUBLAS_CHECK(cublaslt_library().MatmulDescCreate(&desc_raw, compute, CUDA_R_32F));
  MatmulDesc desc(desc_raw);
  // out^T[N, M] = op(b)^T[N, K] @ op(a)^T[K, M]: cuBLASLt's A is b, its B is a. b stored row-major
  // [K, N] is column-major [N, K] already (no transpose); stored [N, K] (trans_b) it is [K, N].
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  HSPMD_CUBLAS_CHECK(cublaslt_library().MatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b)));
  HSPMD_CUBLAS_CHECK(cublaslt_library().MatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof(op_a)));

  // Row-major shapes as stored.
  const Layout layout_b = g.trans_b ? row_major_layout(g.operands, g.n, g.k, g.batch, g.b_batch_stride)
                                    : row_major_layout(g.operands, g.k, g.n, g.batch, g.b_batch_stride);
  const Layout layout_a = g.trans_a ? row_major_layout(g.operands, g.k, g.m, g.batch, g.a_batch_stride)
                                    : row_major_layout(g.operands, g.m, g.k, g.batch, g.a_batch_stride);
  const Layout layout_out = row_major_layout(g.out_dtype, g.m, g.n, g.batch, g.out_batch_stride);

  cublasLtMatmulPreference_t pref_raw = nullptr;
  HSPMD_CUBLAS_CHECK(cublaslt_library().MatmulPreferenceCreate(&pref_raw));
  Preference preference(pref_raw);
  HSPMD_CUBLAS_CHECK(cublaslt_library().MatmulPreferenceSetAttribute(
      preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  HSPMD_CUBLAS_CHECK(cublaslt_library().MatmulAlgoGetHeuristic(handle_, desc.get(), layout_b.get(), layout_a.get(),
                                                    layout_out.get(), layout_out.get(), preference.get(), 1,
                                                    &heuristic, &found));
  HSPMD_CHECK(found > 0) << kernel << ": cuBLASLt has no algorithm for " << dtype_name(g.operands) << " operands, "
                         << dtype_name(g.out_dtype) << " out, batch " << g.batch << ", m " << g.m << ", n " << g.n
                         << ", k " << g.k;
  HSPMD_CUBLAS_CHECK(cublaslt_library().Matmul(handle_, desc.get(), &g.alpha, g.b, layout_b.get(), g.a, layout_a.get(), &g.beta,
                                    g.out, layout_out.get(), g.out, layout_out.get(), &heuristic.algo, workspace_,
                                    workspace_bytes_, stream));
}

}  // namespace hspmd::kernels::cuda
