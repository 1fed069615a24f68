#include "hspmd/kernels/bias.h"

#include <gmock/gmock.h>

#include "kernels/kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using hspmd::testing::all_close;
using hspmd::testing::error_of;
using hspmd::testing::random_tensor;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Every row of x plus bias, element by element in double.
Tensor reference(const Tensor& x, const Tensor& bias) {
  Tensor y = Tensor::empty(x.shape(), DType::kFloat64);
  const int64_t n = bias.numel();
  for (int64_t i = 0; i < x.numel(); ++i) y.data<double>()[i] = x.element_as_double(i) + bias.element_as_double(i % n);
  return y;
}

TEST(BiasAdd, AddsTheBiasToEveryRow) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    // Rank 1, 2 and 3; 300 x 70 rows takes the threaded path.
    for (const Shape& shape : {Shape{7}, Shape{5, 7}, Shape{3, 2, 7}, Shape{300, 70}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape.to_string());
      Tensor x = random_tensor(shape, dtype, 1);
      Tensor bias = random_tensor(Shape{shape.dims().back()}, dtype, 2);
      Tensor y = Tensor::empty(shape, dtype);
      bias_add(x, bias, y);
      EXPECT_TRUE(all_close(y, reference(x, bias), 1e-6, 1e-6));
      bias_add(x, bias, x);  // in place
      EXPECT_TRUE(all_close(x, y, 0, 0));
    }
  }
}

TEST(BiasAdd, ErrorsNameTheKernelAndTensor) {
  Tensor x = Tensor::zeros(Shape{3, 4}, DType::kFloat32);
  EXPECT_THAT(error_of([&] { bias_add(x, Tensor::zeros(Shape{3}, DType::kFloat32), x); }),
              AllOf(HasSubstr("bias_add"), HasSubstr("bias float32[3]")));
  EXPECT_THAT(error_of([&] { bias_add(x, Tensor::zeros(Shape{4}, DType::kFloat64), x); }),
              AllOf(HasSubstr("bias_add"), HasSubstr("'bias'")));
  const Tensor bias = Tensor::zeros(Shape{4}, DType::kFloat32), y = Tensor::zeros(Shape{4, 3}, DType::kFloat32);
  EXPECT_THAT(error_of([&] { bias_add(x, bias, y); }), AllOf(HasSubstr("bias_add"), HasSubstr("y float32[4, 3]")));
}

}  // namespace
}  // namespace hspmd::kernels
