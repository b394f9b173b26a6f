// Linear layer: forward against a naive triple loop, gradients against finite
// differences, float against double, and bit-identical results for any
// number of OpenMP threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <iostream>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "util/gradcheck.h"

namespace {

using gpt::test::numeric_gradient;
using gpt::test::random_vector;
using gpt::test::weighted_sum;

void expect_gradient(const char* name, const std::vector<double>& analytic, const std::vector<double>& numeric) {
  gpt::test::expect_gradient("matmul", name, analytic, numeric);
}

template <typename T>
std::vector<T> to(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// out (N,OC) = inp (N,C) · weightᵀ + bias, in double whatever the input type.
template <typename T>
std::vector<double> naive_forward(const std::vector<T>& inp, const std::vector<T>& weight, const std::vector<T>& bias,
                                  int N, int C, int OC) {
  std::vector<double> out(static_cast<size_t>(N) * OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = bias[o];
      for (int c = 0; c < C; ++c) s += double(inp[n * C + c]) * double(weight[o * C + c]);
      out[n * OC + o] = s;
    }
  return out;
}

TEST(Matmul, FloatForwardMatchesNaiveLoop) {
  // Odd sizes leave partial register tiles in both dimensions.
  constexpr int N = 67, C = 33, OC = 45;
  const auto inp = to<float>(random_vector(N * C, 1)), weight = to<float>(random_vector(OC * C, 2)),
             bias = to<float>(random_vector(OC, 3));
  std::vector<float> out(N * OC);
  gpt::cpu::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  const auto ref = naive_forward(inp, weight, bias, N, C, OC);
  // Each output sums 34 terms of magnitude <= 1 in float: worst-case rounding
  // is about 34 * 34 * 6e-8 = 7e-5; 1e-4 still catches any wrong term.
  for (int i = 0; i < N * OC; ++i) ASSERT_NEAR(out[i], ref[i], 1e-4) << "index " << i;
}

TEST(Matmul, ForwardWithoutBias) {
  constexpr int N = 5, C = 7, OC = 3;
  const auto inp = random_vector(N * C, 4), weight = random_vector(OC * C, 5);
  std::vector<double> out(N * OC, 123.0), zeros(OC, 0.0);
  gpt::cpu::matmul_forward<double>(out.data(), inp.data(), weight.data(), nullptr, N, C, OC);
  const auto ref = naive_forward(inp, weight, zeros, N, C, OC);
  for (int i = 0; i < N * OC; ++i) EXPECT_NEAR(out[i], ref[i], 1e-14);
}

struct MatmulCase {
  int N, C, OC;
  std::vector<double> inp, weight, bias, w, out;
  MatmulCase(int n, int c, int oc)
      : N(n),
        C(c),
        OC(oc),
        inp(random_vector(n * c, 6)),
        weight(random_vector(oc * c, 7)),
        bias(random_vector(oc, 8)),
        w(random_vector(n * oc, 9)),
        out(n * oc) {}
  double loss() {
    gpt::cpu::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
    return weighted_sum(out, w);  // dL/dout = w
  }
};

TEST(Matmul, GradientMatchesFiniteDifferences) {
  MatmulCase k(5, 7, 3);
  std::vector<double> dinp(5 * 7, 0.0), dweight(3 * 7, 0.0), dbias(3, 0.0);
  gpt::cpu::matmul_backward(dinp.data(), dweight.data(), dbias.data(), k.w.data(), k.inp.data(), k.weight.data(), k.N,
                            k.C, k.OC);
  auto loss = [&] { return k.loss(); };
  expect_gradient("dinp", dinp, numeric_gradient(k.inp, loss));
  expect_gradient("dweight", dweight, numeric_gradient(k.weight, loss));
  expect_gradient("dbias", dbias, numeric_gradient(k.bias, loss));
}

TEST(Matmul, BackwardAccumulatesAndAcceptsNullDinpAndDbias) {
  MatmulCase k(5, 7, 3);
  std::vector<double> dinp1(35, 0.0), dw1(21, 0.0), db1(3, 0.0), dinp2(35, 0.0), dw2(21, 0.0), db2(3, 0.0);
  auto backward = [&](double* dinp, double* dw, double* db) {
    gpt::cpu::matmul_backward(dinp, dw, db, k.w.data(), k.inp.data(), k.weight.data(), k.N, k.C, k.OC);
  };
  backward(dinp1.data(), dw1.data(), db1.data());
  backward(dinp2.data(), dw2.data(), db2.data());
  backward(dinp2.data(), dw2.data(), db2.data());
  for (int i = 0; i < 35; ++i) EXPECT_DOUBLE_EQ(dinp2[i], 2 * dinp1[i]);
  for (int i = 0; i < 21; ++i) EXPECT_DOUBLE_EQ(dw2[i], 2 * dw1[i]);
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(db2[i], 2 * db1[i]);

  std::vector<double> dw3(21, 0.0);
  backward(nullptr, dw3.data(), nullptr);
  for (int i = 0; i < 21; ++i) EXPECT_DOUBLE_EQ(dw3[i], dw1[i]);
}

// Sizes past the GEMM's cache blocks (256 along k, 512 along columns) in
// every one of the three products: forward K=C, dinp K=OC, dweight K=N.
TEST(Matmul, FloatAgreesWithDoubleBeyondCacheBlocks) {
  constexpr int N = 261, C = 263, OC = 517;
  const auto inp = random_vector(N * C, 10), weight = random_vector(OC * C, 11), bias = random_vector(OC, 12),
             dout = random_vector(N * OC, 13);
  std::vector<double> out(N * OC), dinp(N * C, 0.0), dw(OC * C, 0.0), db(OC, 0.0);
  gpt::cpu::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  gpt::cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), weight.data(), N, C, OC);

  // The double kernel against the naive loop (forward; the backward products
  // use the same GEMM with other strides and are checked at small size above).
  const auto ref = naive_forward(inp, weight, bias, N, C, OC);
  for (int i = 0; i < N * OC; ++i) ASSERT_NEAR(out[i], ref[i], 1e-11) << "index " << i;
  // dbias in double is a plain column sum.
  for (int o = 0; o < OC; ++o) {
    double s = 0;
    for (int n = 0; n < N; ++n) s += dout[n * OC + o];
    ASSERT_NEAR(db[o], s, 1e-11);
  }

  const auto inpf = to<float>(inp), weightf = to<float>(weight), biasf = to<float>(bias), doutf = to<float>(dout);
  std::vector<float> outf(N * OC), dinpf(N * C, 0.0f), dwf(OC * C, 0.0f), dbf(OC, 0.0f);
  gpt::cpu::matmul_forward(outf.data(), inpf.data(), weightf.data(), biasf.data(), N, C, OC);
  gpt::cpu::matmul_backward(dinpf.data(), dwf.data(), dbf.data(), doutf.data(), inpf.data(), weightf.data(), N, C, OC);
  // Sums of 263..517 products of magnitude <= 1 have magnitude ~10; float
  // rounding of the inputs and of the sums stays well below 1e-3 absolute.
  auto expect_close = [](const char* name, const std::vector<float>& f, const std::vector<double>& d) {
    double worst = 0;
    for (size_t i = 0; i < d.size(); ++i) worst = std::max(worst, std::abs(double(f[i]) - d[i]));
    std::cout << "[float-vs-double] matmul " << name << " max_abs_err=" << worst << "\n";
    EXPECT_LT(worst, 1e-3) << name;
  };
  expect_close("out", outf, out);
  expect_close("dinp", dinpf, dinp);
  expect_close("dweight", dwf, dw);
  expect_close("dbias", dbf, db);
}

TEST(Matmul, BackwardIsBitIdenticalForAnyThreadCount) {
  // Large enough that every loop of the backward runs multi-threaded, with
  // N > 256 so dweight's k-loop spans several cache blocks.
  constexpr int N = 1000, C = 40, OC = 37;
  const auto inp = to<float>(random_vector(N * C, 14)), weight = to<float>(random_vector(OC * C, 15)),
             dout = to<float>(random_vector(N * OC, 16));
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> dinp(N * C, 0.0f), dw(OC * C, 0.0f), db(OC, 0.0f);
    gpt::cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), weight.data(), N, C, OC);
    dinp.insert(dinp.end(), dw.begin(), dw.end());
    dinp.insert(dinp.end(), db.begin(), db.end());
    return dinp;
  };
  const int saved = omp_get_max_threads();
  const auto one = run(1), two = run(2), three = run(3);
  omp_set_num_threads(saved);
  // EXPECT_EQ on floats is exact comparison: bit-identical (no NaNs here).
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, three);
}

// Every float GEMM kernel this processor can run (the portable one always):
// forward and backward against double at sizes with partial tiles and
// several cache blocks, and bit-identical results for 1, 2 and 3 threads.
TEST(Matmul, EveryFloatKernelIsCorrectAndThreadCountIndependent) {
  constexpr int N = 301, C = 263, OC = 530;
  const auto inp = random_vector(N * C, 17), weight = random_vector(OC * C, 18), bias = random_vector(OC, 19),
             dout = random_vector(N * OC, 20);
  std::vector<double> out(N * OC), dinp(N * C, 0.0), dw(OC * C, 0.0), db(OC, 0.0);
  gpt::cpu::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  gpt::cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), weight.data(), N, C, OC);
  const auto inpf = to<float>(inp), weightf = to<float>(weight), biasf = to<float>(bias), doutf = to<float>(dout);

  const gpt::cpu::GemmKernel saved_kernel = gpt::cpu::gemm_kernel();
  const int saved_threads = omp_get_max_threads();
  int tested = 0;
  for (auto kernel : {gpt::cpu::GemmKernel::Generic, gpt::cpu::GemmKernel::Avx2, gpt::cpu::GemmKernel::Avx512}) {
    if (!gpt::cpu::gemm_kernel_available(kernel)) {
      std::cout << "[gemm] kernel " << gpt::cpu::gemm_kernel_name(kernel) << " not supported here, skipped\n";
      continue;
    }
    ++tested;
    gpt::cpu::set_gemm_kernel(kernel);
    EXPECT_EQ(gpt::cpu::gemm_kernel(), kernel);
    auto run = [&](int threads) {
      omp_set_num_threads(threads);
      std::vector<float> o(N * OC), dx(N * C, 0.0f), dwf(OC * C, 0.0f), dbf(OC, 0.0f);
      gpt::cpu::matmul_forward(o.data(), inpf.data(), weightf.data(), biasf.data(), N, C, OC);
      gpt::cpu::matmul_backward(dx.data(), dwf.data(), dbf.data(), doutf.data(), inpf.data(), weightf.data(), N, C, OC);
      return std::vector<std::vector<float>>{o, dx, dwf, dbf};
    };
    const auto one = run(1), two = run(2), three = run(3);
    const char* name = gpt::cpu::gemm_kernel_name(kernel);
    EXPECT_EQ(one, two) << name;
    EXPECT_EQ(one, three) << name;
    const std::vector<double>* ref[] = {&out, &dinp, &dw, &db};
    for (int t = 0; t < 4; ++t) {
      double worst = 0;
      for (size_t i = 0; i < ref[t]->size(); ++i) worst = std::max(worst, std::abs(double(one[t][i]) - (*ref[t])[i]));
      EXPECT_LT(worst, 1e-3) << name << " tensor " << t;
    }
  }
  omp_set_num_threads(saved_threads);
  gpt::cpu::set_gemm_kernel(saved_kernel);
  EXPECT_GE(tested, 1);
}

// gemm_accumulate_serial (the attention kernel's panel products) against a
// plain loop: strided and transposed views, odd sizes, every float kernel
// and double; it accumulates into C and runs on the calling thread.
TEST(Gemm, SerialProductMatchesPlainLoopOnEveryKernel) {
  const gpt::cpu::GemmKernel saved_kernel = gpt::cpu::gemm_kernel();
  struct Dims {
    int M, N, K;
  };
  for (const Dims d : {Dims{1, 1, 1}, Dims{7, 33, 5}, Dims{32, 77, 64}, Dims{45, 64, 300}, Dims{64, 19, 32}}) {
    const size_t lda = 3 * d.K + 1, ldb = 2 * d.N + 3, ldc = d.N + 5;  // row-major A, B with padding
    const auto a = random_vector(d.M * lda, 31), b = random_vector(d.K * ldb, 32), c0 = random_vector(d.M * ldc, 33);
    // transposed views of the same matrices: A^T stored (K, M), B^T stored (N, K)
    std::vector<double> at(static_cast<size_t>(d.K) * d.M), bt(static_cast<size_t>(d.N) * d.K);
    for (int i = 0; i < d.M; ++i)
      for (int k = 0; k < d.K; ++k) at[k * d.M + i] = a[i * lda + k];
    for (int k = 0; k < d.K; ++k)
      for (int j = 0; j < d.N; ++j) bt[j * d.K + k] = b[k * ldb + j];
    std::vector<double> ref(c0);
    for (int i = 0; i < d.M; ++i)
      for (int j = 0; j < d.N; ++j)
        for (int k = 0; k < d.K; ++k) ref[i * ldc + j] += a[i * lda + k] * b[k * ldb + j];
    auto check = [&](auto tag, const char* name) {
      using T = decltype(tag);
      const auto af = to<T>(a), bf = to<T>(b), atf = to<T>(at), btf = to<T>(bt);
      for (int transposed = 0; transposed < 2; ++transposed) {
        std::vector<T> c = to<T>(c0);
        const gpt::cpu::MatView<T> va =
            transposed ? gpt::cpu::MatView<T>{atf.data(), 1, size_t(d.M)} : gpt::cpu::MatView<T>{af.data(), lda, 1};
        const gpt::cpu::MatView<T> vb =
            transposed ? gpt::cpu::MatView<T>{btf.data(), 1, size_t(d.K)} : gpt::cpu::MatView<T>{bf.data(), ldb, 1};
        gpt::cpu::gemm_accumulate_serial(c.data(), ldc, va, vb, d.M, d.N, d.K);
        double worst = 0;
        for (int i = 0; i < d.M; ++i)
          for (int j = 0; j < d.N; ++j) worst = std::max(worst, std::abs(double(c[i * ldc + j]) - ref[i * ldc + j]));
        EXPECT_LT(worst, sizeof(T) == 4 ? 2e-4 * std::sqrt(double(d.K)) : 1e-12)
            << name << " " << d.M << "x" << d.N << "x" << d.K << (transposed ? " transposed" : "");
        for (int i = 0; i < d.M; ++i)  // the padding of C is untouched
          for (int j = d.N; j < int(ldc); ++j) EXPECT_EQ(c[i * ldc + j], T(c0[i * ldc + j])) << name;
      }
    };
    for (auto kernel : {gpt::cpu::GemmKernel::Generic, gpt::cpu::GemmKernel::Avx2, gpt::cpu::GemmKernel::Avx512}) {
      if (!gpt::cpu::gemm_kernel_available(kernel)) continue;
      gpt::cpu::set_gemm_kernel(kernel);
      check(float{}, gpt::cpu::gemm_kernel_name(kernel));
    }
    check(double{}, "double");
  }
  gpt::cpu::set_gemm_kernel(saved_kernel);
}

}  // namespace
