// Elementwise kernels against plain reference loops (float64 math), backward kernels against central
// finite differences, bfloat16 against the float32 kernel rounded to bfloat16.
#include "hspmd/kernels/elementwise.h"

#include <gmock/gmock.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "hspmd/kernels/threading.h"
#include "kernel_testlib.h"

namespace hspmd::kernels {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using hspmd::testing::all_close;
using hspmd::testing::dot;
using hspmd::testing::max_relative_error;
using hspmd::testing::numeric_gradient;
using hspmd::testing::random_tensor;

// Odd sizes, size-1 dims, a scalar and an empty tensor.
const std::vector<Shape> kShapes = {Shape{7, 13}, Shape{1, 5, 1}, Shape{}, Shape{1}, Shape{0, 4}, Shape{3, 0}};

Tensor reference(const Shape& shape, const std::function<double(int64_t)>& f) {
  Tensor t = Tensor::empty(shape, DType::kFloat64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = f(i);
  return t;
}

// Tolerances of a kernel run in `dtype` against float64 reference math.
double rtol(DType dtype) { return dtype == DType::kFloat64 ? 1e-12 : 2e-6; }
double atol(DType dtype) { return dtype == DType::kFloat64 ? 1e-14 : 1e-6; }

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

using Binary = std::function<void(const Tensor&, const Tensor&, const Tensor&)>;

struct BinaryCase {
  std::string name;
  Binary kernel;
  std::function<double(double, double)> ref;
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", add, [](double a, double b) { return a + b; }},
      {"sub", sub, [](double a, double b) { return a - b; }},
      {"mul", mul, [](double a, double b) { return a * b; }},
      {"axpy", [](const Tensor& a, const Tensor& b, const Tensor& o) { axpy(a, -0.7, b, o); },
       [](double a, double b) { return a + -0.7 * b; }},
      {"scale", [](const Tensor& a, const Tensor&, const Tensor& o) { scale(a, 1.3, o); },
       [](double a, double) { return 1.3 * a; }},
      {"silu_fwd", [](const Tensor& x, const Tensor&, const Tensor& y) { silu_fwd(x, y); },
       [](double x, double) { return silu(x); }},
      {"gelu_tanh_fwd", [](const Tensor& x, const Tensor&, const Tensor& y) { gelu_tanh_fwd(x, y); },
       [](double x, double) { return gelu_tanh(x); }},
      {"swiglu_fwd", swiglu_fwd, [](double g, double u) { return silu(g) * u; }},
  };
}

TEST(Elementwise, MatchesReferenceForFloat32AndFloat64) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& shape : kShapes) {
      Tensor a = random_tensor(shape, dtype, 1, -3, 3), b = random_tensor(shape, dtype, 2, -3, 3);
      for (const BinaryCase& c : binary_cases()) {
        Tensor out = Tensor::empty(shape, dtype);
        c.kernel(a, b, out);
        Tensor expected =
            reference(shape, [&](int64_t i) { return c.ref(a.element_as_double(i), b.element_as_double(i)); });
        EXPECT_TRUE(all_close(out, expected, rtol(dtype), atol(dtype), c.name + " " + out.to_string()));
      }
    }
  }
}

// bfloat16 is computed in float32: the result must equal the float32 kernel on the widened inputs,
// rounded to bfloat16, bit for bit.
Tensor widen(const Tensor& bf16) {
  Tensor t = Tensor::empty(bf16.shape(), DType::kFloat32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(bf16.data<BFloat16>()[i]);
  return t;
}

void expect_rounded_equal(const Tensor& bf16, const Tensor& f32, const std::string& what) {
  for (int64_t i = 0; i < bf16.numel(); ++i) {
    ASSERT_EQ(bf16.data<BFloat16>()[i].bits, BFloat16(f32.data<float>()[i]).bits)
        << what << " element " << i << ": " << f32.data<float>()[i];
  }
}

TEST(Elementwise, BFloat16EqualsFloat32RoundedToBFloat16) {
  for (const Shape& shape : {Shape{7, 13}, Shape{1}, Shape{0, 4}}) {
    Tensor a = random_tensor(shape, DType::kBFloat16, 3, -3, 3), b = random_tensor(shape, DType::kBFloat16, 4, -3, 3);
    Tensor a32 = widen(a), b32 = widen(b);
    for (const BinaryCase& c : binary_cases()) {
      Tensor out = Tensor::empty(shape, DType::kBFloat16), out32 = Tensor::empty(shape, DType::kFloat32);
      c.kernel(a, b, out);
      c.kernel(a32, b32, out32);
      expect_rounded_equal(out, out32, c.name);
    }
    // Backward kernels too (three inputs, one or two outputs).
    Tensor d = random_tensor(shape, DType::kBFloat16, 5), d32 = widen(d);
    Tensor dx = Tensor::empty(shape, DType::kBFloat16), dx32 = Tensor::empty(shape, DType::kFloat32);
    silu_bwd(a, d, dx);
    silu_bwd(a32, d32, dx32);
    expect_rounded_equal(dx, dx32, "silu_bwd");
    gelu_tanh_bwd(a, d, dx);
    gelu_tanh_bwd(a32, d32, dx32);
    expect_rounded_equal(dx, dx32, "gelu_tanh_bwd");
    Tensor du = Tensor::empty(shape, DType::kBFloat16), du32 = Tensor::empty(shape, DType::kFloat32);
    swiglu_bwd(a, b, d, dx, du);
    swiglu_bwd(a32, b32, d32, dx32, du32);
    expect_rounded_equal(dx, dx32, "swiglu_bwd dgate");
    expect_rounded_equal(du, du32, "swiglu_bwd dup");
  }
}

// Backward kernels against central differences of loss = dot(fwd(x), w) in float64.
TEST(Elementwise, BackwardMatchesFiniteDifferences) {
  const Shape shape{7, 13};
  Tensor x = random_tensor(shape, DType::kFloat64, 6, -3, 3);
  Tensor u = random_tensor(shape, DType::kFloat64, 7, -2, 2);
  Tensor w = random_tensor(shape, DType::kFloat64, 8);
  Tensor y = Tensor::empty(shape, DType::kFloat64), dx = Tensor::empty(shape, DType::kFloat64);

  auto check = [&](const char* name, const std::function<void(const Tensor&, const Tensor&)>& fwd,
                   const std::function<void(const Tensor&)>& bwd, Tensor& input) {
    Tensor numeric = numeric_gradient([&] { fwd(x, y); return dot(y, w); }, input);
    bwd(dx);
    EXPECT_LT(max_relative_error(dx, numeric), 1e-6) << name;
  };
  check("silu", silu_fwd, [&](const Tensor& g) { silu_bwd(x, w, g); }, x);
  check("gelu_tanh", gelu_tanh_fwd, [&](const Tensor& g) { gelu_tanh_bwd(x, w, g); }, x);

  Tensor dgate = Tensor::empty(shape, DType::kFloat64), dup = Tensor::empty(shape, DType::kFloat64);
  swiglu_bwd(x, u, w, dgate, dup);
  auto swiglu_loss = [&] { swiglu_fwd(x, u, y); return dot(y, w); };
  EXPECT_LT(max_relative_error(dgate, numeric_gradient(swiglu_loss, x)), 1e-6) << "swiglu dgate";
  EXPECT_LT(max_relative_error(dup, numeric_gradient(swiglu_loss, u)), 1e-6) << "swiglu dup";
}

// float32 backward against the float64 backward (the finite-difference test covers the math).
TEST(Elementwise, Float32BackwardMatchesFloat64) {
  const Shape shape{5, 11};
  Tensor x = random_tensor(shape, DType::kFloat32, 9, -3, 3), u = random_tensor(shape, DType::kFloat32, 10);
  Tensor d = random_tensor(shape, DType::kFloat32, 11);
  auto to64 = [](const Tensor& t) {
    return reference(t.shape(), [&](int64_t i) { return t.element_as_double(i); });
  };
  Tensor x64 = to64(x), u64 = to64(u), d64 = to64(d);
  Tensor g = Tensor::empty(shape, DType::kFloat32), g64 = Tensor::empty(shape, DType::kFloat64);
  Tensor h = Tensor::empty(shape, DType::kFloat32), h64 = Tensor::empty(shape, DType::kFloat64);
  silu_bwd(x, d, g);
  silu_bwd(x64, d64, g64);
  EXPECT_TRUE(all_close(g, g64, 1e-5, 1e-6, "silu_bwd float32"));
  gelu_tanh_bwd(x, d, g);
  gelu_tanh_bwd(x64, d64, g64);
  EXPECT_TRUE(all_close(g, g64, 1e-5, 1e-6, "gelu_tanh_bwd float32"));
  swiglu_bwd(x, u, d, g, h);
  swiglu_bwd(x64, u64, d64, g64, h64);
  EXPECT_TRUE(all_close(g, g64, 1e-5, 1e-6, "swiglu_bwd dgate float32"));
  EXPECT_TRUE(all_close(h, h64, 1e-5, 1e-6, "swiglu_bwd dup float32"));
}

TEST(Elementwise, OutputMayAliasAnInput) {
  Tensor a = random_tensor({7, 13}, DType::kFloat32, 12), b = random_tensor({7, 13}, DType::kFloat32, 13);
  Tensor expected = Tensor::empty(a.shape(), DType::kFloat32);
  axpy(a, 0.5, b, expected);
  axpy(a, 0.5, b, a);  // gradient accumulation in place
  EXPECT_TRUE(all_close(a, expected, 0, 0, "axpy in place"));

  Tensor g = random_tensor({9}, DType::kFloat64, 14), u = random_tensor({9}, DType::kFloat64, 15);
  Tensor d = random_tensor({9}, DType::kFloat64, 16);
  Tensor dg = Tensor::empty({9}, DType::kFloat64), du = Tensor::empty({9}, DType::kFloat64);
  swiglu_bwd(g, u, d, dg, du);
  swiglu_bwd(g, u, d, g, u);  // gradients overwrite the saved inputs
  EXPECT_TRUE(all_close(g, dg, 0, 0, "swiglu_bwd dgate in place"));
  EXPECT_TRUE(all_close(u, du, 0, 0, "swiglu_bwd dup in place"));
}

// A tensor above the parallel threshold, on two threads, against the reference.
TEST(Elementwise, LargeTensorOnTwoThreads) {
  set_num_threads(2);
  const Shape shape{100003};
  Tensor x = random_tensor(shape, DType::kFloat32, 17, -4, 4), u = random_tensor(shape, DType::kFloat32, 18);
  Tensor y = Tensor::empty(shape, DType::kFloat32);
  swiglu_fwd(x, u, y);
  Tensor expected =
      reference(shape, [&](int64_t i) { return silu(x.element_as_double(i)) * u.element_as_double(i); });
  EXPECT_TRUE(all_close(y, expected, 2e-6, 1e-6, "swiglu_fwd on 2 threads"));
  set_num_threads(1);
}

TEST(Elementwise, RejectsMismatchedTensors) {
  Tensor a = random_tensor({3, 4}, DType::kFloat32, 19);
  Tensor b = random_tensor({4, 4}, DType::kFloat32, 20);
  Tensor out = Tensor::empty({3, 4}, DType::kFloat32);
  EXPECT_THAT([&] { add(a, b, out); },
              ThrowsMessage<Error>(HasSubstr("add: 'a' float32[3, 4] and 'b' float32[4, 4] differ in numel")));
  Tensor c = random_tensor({12}, DType::kFloat64, 21);
  EXPECT_THAT([&] { mul(a, c, out); },
              ThrowsMessage<Error>(HasSubstr("mul: 'b' is float64[12] but 'a' is float32[3, 4]")));
  EXPECT_THAT([&] { silu_bwd(a, a, Tensor::empty({2}, DType::kFloat32)); },
              ThrowsMessage<Error>(HasSubstr("silu_bwd: 'x' float32[3, 4] and 'dx' float32[2] differ in numel")));
  Tensor ids = Tensor::zeros({3, 4}, DType::kInt64);
  EXPECT_THAT([&] { scale(ids, 2.0, ids); },
              ThrowsMessage<Error>(HasSubstr("scale: 'a' is int64[3, 4], expected float32, float64 or bfloat16")));
  EXPECT_THAT([&] { swiglu_fwd(a, Tensor(), out); }, ThrowsMessage<Error>(HasSubstr("swiglu_fwd: tensor 'up'")));
}

// geglu_tanh (Gemma's MLP): float32 runs the SIMD loops (gelu_tanh as x sigmoid(2u)), float64 and
// bfloat16 the tanh form; both against float64 reference math, on sizes that end in a partial
// vector and one above the SIMD chunk and the parallel threshold.
TEST(Geglu, ForwardMatchesReference) {
  set_num_threads(2);
  double worst = 0;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& shape : {Shape{7, 13}, Shape{1}, Shape{0, 4}, Shape{100003}}) {
      Tensor g = random_tensor(shape, dtype, 40, -6, 6), u = random_tensor(shape, dtype, 41, -3, 3);
      Tensor y = Tensor::empty(shape, dtype);
      geglu_tanh_fwd(g, u, y);
      Tensor expected = reference(
          shape, [&](int64_t i) { return gelu_tanh(g.element_as_double(i)) * u.element_as_double(i); });
      EXPECT_TRUE(all_close(y, expected, rtol(dtype), atol(dtype), "geglu_tanh_fwd " + y.to_string()));
      if (dtype == DType::kFloat32 && y.numel() > 0) worst = std::max(worst, max_relative_error(y, expected));
    }
  }
  set_num_threads(1);
  std::cout << "[ geglu_tanh ] float32 forward max relative error vs float64 reference: " << worst << "\n";
}

TEST(Geglu, BackwardMatchesFiniteDifferencesAndFloat32MatchesFloat64) {
  const Shape shape{7, 13};
  Tensor g = random_tensor(shape, DType::kFloat64, 42, -4, 4), u = random_tensor(shape, DType::kFloat64, 43, -2, 2);
  Tensor w = random_tensor(shape, DType::kFloat64, 44);
  Tensor y = Tensor::empty(shape, DType::kFloat64);
  Tensor dgate = Tensor::empty(shape, DType::kFloat64), dup = Tensor::empty(shape, DType::kFloat64);
  geglu_tanh_bwd(g, u, w, dgate, dup);
  auto loss = [&] { geglu_tanh_fwd(g, u, y); return dot(y, w); };
  const double eg = max_relative_error(dgate, numeric_gradient(loss, g));
  const double eu = max_relative_error(dup, numeric_gradient(loss, u));
  EXPECT_LT(eg, 1e-6) << "geglu_tanh dgate";
  EXPECT_LT(eu, 1e-6) << "geglu_tanh dup";

  auto to32 = [](const Tensor& t) {
    Tensor out = Tensor::empty(t.shape(), DType::kFloat32);
    for (int64_t i = 0; i < t.numel(); ++i) out.data<float>()[i] = static_cast<float>(t.data<double>()[i]);
    return out;
  };
  Tensor g32 = to32(g), u32 = to32(u), w32 = to32(w);
  Tensor dgate32 = Tensor::empty(shape, DType::kFloat32), dup32 = Tensor::empty(shape, DType::kFloat32);
  geglu_tanh_bwd(g32, u32, w32, dgate32, dup32);
  EXPECT_TRUE(all_close(dgate32, dgate, 1e-5, 1e-6, "geglu_tanh_bwd dgate float32"));
  EXPECT_TRUE(all_close(dup32, dup, 1e-5, 1e-6, "geglu_tanh_bwd dup float32"));
  std::cout << "[ geglu_tanh ] float64 vs finite differences: dgate " << eg << ", dup " << eu
            << "; float32 vs float64: dgate " << max_relative_error(dgate32, dgate) << ", dup "
            << max_relative_error(dup32, dup) << "\n";
}

// bfloat16 computes in float32 with the tanh form: within one bfloat16 rounding of the float32 kernel.
TEST(Geglu, BFloat16IsFloat32RoundedToBFloat16) {
  const Shape shape{7, 13};
  Tensor g = random_tensor(shape, DType::kBFloat16, 45, -3, 3), u = random_tensor(shape, DType::kBFloat16, 46, -3, 3);
  Tensor d = random_tensor(shape, DType::kBFloat16, 47);
  Tensor y = Tensor::empty(shape, DType::kBFloat16), y32 = Tensor::empty(shape, DType::kFloat32);
  geglu_tanh_fwd(g, u, y);
  geglu_tanh_fwd(widen(g), widen(u), y32);
  EXPECT_TRUE(all_close(widen(y), y32, 1.0 / 128, 1e-6, "geglu_tanh_fwd bfloat16"));
  Tensor dg = Tensor::empty(shape, DType::kBFloat16), du = Tensor::empty(shape, DType::kBFloat16);
  Tensor dg32 = Tensor::empty(shape, DType::kFloat32), du32 = Tensor::empty(shape, DType::kFloat32);
  geglu_tanh_bwd(g, u, d, dg, du);
  geglu_tanh_bwd(widen(g), widen(u), widen(d), dg32, du32);
  EXPECT_TRUE(all_close(widen(dg), dg32, 1.0 / 128, 1e-6, "geglu_tanh_bwd dgate bfloat16"));
  EXPECT_TRUE(all_close(widen(du), du32, 1.0 / 128, 1e-6, "geglu_tanh_bwd dup bfloat16"));
}

TEST(Geglu, GradientsMayOverwriteTheInputs) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Tensor g = random_tensor({37}, dtype, 48), u = random_tensor({37}, dtype, 49), d = random_tensor({37}, dtype, 50);
    Tensor dg = Tensor::empty({37}, dtype), du = Tensor::empty({37}, dtype);
    geglu_tanh_bwd(g, u, d, dg, du);
    geglu_tanh_bwd(g, u, d, g, u);
    EXPECT_TRUE(all_close(g, dg, 0, 0, "geglu_tanh_bwd dgate in place"));
    EXPECT_TRUE(all_close(u, du, 0, 0, "geglu_tanh_bwd dup in place"));
  }
  Tensor a = random_tensor({3, 4}, DType::kFloat32, 51);
  EXPECT_THAT([&] { geglu_tanh_fwd(a, Tensor::empty({5}, DType::kFloat32), a); },
              ThrowsMessage<Error>(HasSubstr("geglu_tanh_fwd: 'gate' float32[3, 4] and 'up' float32[5] differ")));
}

}  // namespace
}  // namespace hspmd::kernels
