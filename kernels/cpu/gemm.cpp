// Blocked GEMM, C += A·B, after the Goto/BLIS scheme: the rows of C are
// split among the threads; each packs KC×NC blocks of B into KC×NR column
// panels and MR×KC row panels of A, and runs an MR×NR register-tile kernel
// over them. Every element of C is owned by one thread and summed over k in
// ascending order (within a KC block by the tile kernel, then block after
// block), so results do not depend on the thread count.
//
// Three float tile kernels, picked at run time (kernels/cpu/gemm.h):
//   avx512  8×32 (16 zmm accumulators), compiled with target("avx512f");
//   avx2    6×16 (12 ymm accumulators), compiled with target("avx2,fma");
//   generic 3×16 in portable C++ (SSE2 on baseline x86-64), also for double.
// The whole project stays baseline x86-64; only these two functions use
// newer instructions, and only when the processor reports them.
#include "kernels/cpu/gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

namespace {

// Cache blocking: the MR×KC panel of A stays in L1 while KC×NR panels of B
// stream from the KC×NC block (512 KiB in float) that lives in L2.
constexpr int kKC = 256;
constexpr int kNC = 512;

// ---- packing ------------------------------------------------------------------
// Both packers walk the source along its contiguous direction.

// B[k0..k0+kc, j0..j0+nr) as one kc×NR panel (k-major), zero-padded columns.
template <int NR, typename T, typename S>
void pack_b_panel(T* dst, MatView<S> b, int k0, int kc, int j0, int nr) {
  if (b.col == 1) {
    for (int k = 0; k < kc; ++k) {
      const S* s = b.p + (k0 + k) * b.row + j0;
      T* d = dst + static_cast<size_t>(k) * NR;
      for (int j = 0; j < nr; ++j) d[j] = stored_value(s[j]);
      for (int j = nr; j < NR; ++j) d[j] = T(0);
    }
  } else {
    if (nr < NR)
      for (int k = 0; k < kc; ++k)
        for (int j = nr; j < NR; ++j) dst[static_cast<size_t>(k) * NR + j] = T(0);
    for (int j = 0; j < nr; ++j) {
      const S* s = b.p + (j0 + j) * b.col + k0 * b.row;
      for (int k = 0; k < kc; ++k) dst[static_cast<size_t>(k) * NR + j] = stored_value(s[k * b.row]);
    }
  }
}

// A[i0..i0+mr, k0..k0+kc) as one MR×kc panel (k-major), zero-padded rows.
template <int MR, typename T, typename S>
void pack_a_panel(T* dst, MatView<S> a, int i0, int mr, int k0, int kc) {
  if (a.row == 1) {
    for (int k = 0; k < kc; ++k) {
      const S* s = a.p + (k0 + k) * a.col + i0;
      T* d = dst + static_cast<size_t>(k) * MR;
      for (int i = 0; i < mr; ++i) d[i] = stored_value(s[i]);
      for (int i = mr; i < MR; ++i) d[i] = T(0);
    }
  } else {
    if (mr < MR)
      for (int k = 0; k < kc; ++k)
        for (int i = mr; i < MR; ++i) dst[static_cast<size_t>(k) * MR + i] = T(0);
    for (int i = 0; i < mr; ++i) {
      const S* s = a.p + (i0 + i) * a.row + k0 * a.col;
      for (int k = 0; k < kc; ++k) dst[static_cast<size_t>(k) * MR + i] = stored_value(s[k * a.col]);
    }
  }
}

// ---- tile kernels: C[0..MR, 0..NR) += A·Bpanel over kc --------------------------
// A's element (i, k) is at ap[i*rsa + k*csa]: a packed panel (rsa = 1,
// csa = MR) or, when A is row-major, the matrix itself (rsa = its row
// stride, csa = 1), which saves the transposing copy into a panel.

template <typename T>
struct GenericTile {
  // 3×16 float accumulators are 12 of the 16 SSE2 registers of baseline
  // x86-64, and each broadcast of A feeds four vector multiplies.
  static constexpr int MR = 3, NR = 16;
  static void run(int kc, const T* ap, size_t rsa, size_t csa, const T* bp, T* c, size_t ldc) {
    T acc[MR][NR] = {};
    for (int k = 0; k < kc; ++k) {
      const T* a = ap + k * csa;
      const T* b = bp + static_cast<size_t>(k) * NR;
      for (int i = 0; i < MR; ++i) {
        const T ai = a[i * rsa];
#pragma omp simd
        for (int j = 0; j < NR; ++j) acc[i][j] += ai * b[j];
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) c[i * ldc + j] += acc[i][j];
  }
};

struct Avx2Tile {
  // 12 accumulators + 2 B vectors + 1 broadcast of the 16 ymm registers.
  static constexpr int MR = 6, NR = 16;
  __attribute__((target("avx2,fma"))) static void run(int kc, const float* ap, size_t rsa, size_t csa, const float* bp,
                                                      float* c, size_t ldc) {
    __m256 c0[MR], c1[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm256_setzero_ps();
    for (int k = 0; k < kc; ++k) {
      const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256 a = _mm256_broadcast_ss(ap + i * rsa);
        c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
        c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
      }
      ap += csa;
      bp += NR;
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      float* r = c + i * ldc;
      _mm256_storeu_ps(r, _mm256_add_ps(_mm256_loadu_ps(r), c0[i]));
      _mm256_storeu_ps(r + 8, _mm256_add_ps(_mm256_loadu_ps(r + 8), c1[i]));
    }
  }
};

struct Avx512Tile {
  // 16 accumulators of the 32 zmm registers; 2 vector loads and 8
  // broadcasts feed 16 FMAs per k.
  static constexpr int MR = 8, NR = 32;
  __attribute__((target("avx512f"))) static void run(int kc, const float* ap, size_t rsa, size_t csa, const float* bp,
                                                     float* c, size_t ldc) {
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
    for (int k = 0; k < kc; ++k) {
      const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const __m512 a = _mm512_set1_ps(ap[i * rsa]);
        c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
        c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
      }
      ap += csa;
      bp += NR;
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      float* r = c + i * ldc;
      _mm512_storeu_ps(r, _mm512_add_ps(_mm512_loadu_ps(r), c0[i]));
      _mm512_storeu_ps(r + 16, _mm512_add_ps(_mm512_loadu_ps(r + 16), c1[i]));
    }
  }
};

// ---- driver ------------------------------------------------------------------------

// A 64-byte aligned array of n elements inside storage (grown, never shrunk).
template <typename T>
T* aligned_array(std::vector<T>& storage, size_t n) {
  if (storage.size() < n + 64 / sizeof(T)) storage.resize(n + 64 / sizeof(T));
  auto addr = reinterpret_cast<uintptr_t>(storage.data());
  return reinterpret_cast<T*>((addr + 63) / 64 * 64);
}

// One thread's share: rows [r0, r1) of C, all columns, the whole k range,
// with its own packed copies of A and B (packing B once per thread costs
// K·N against the (r1-r0)·N·K multiply-adds it serves). No barriers: a thread
// delayed by another process on a shared machine holds up the others only at
// the end of the call. Operands stored as bf16 (SA, SB) are widened while
// they are packed, so the tile kernel sees the same float32 values as after
// a whole-tensor conversion and the result is bit-identical to it.
template <class Tile, typename T, typename SA, typename SB>
void gemm_rows(T* c, size_t ldc, MatView<SA> a, MatView<SB> b, int r0, int r1, int N, int K, T* bpack, T* apack) {
  constexpr int MR = Tile::MR, NR = Tile::NR;
  alignas(64) T edge[MR * NR];  // partial tiles at the right and bottom edges
  for (int j0 = 0; j0 < N; j0 += kNC) {
    const int nc = std::min(kNC, N - j0);
    const int npanels = (nc + NR - 1) / NR;
    for (int k0 = 0; k0 < K; k0 += kKC) {
      const int kc = std::min(kKC, K - k0);
      for (int p = 0; p < npanels; ++p)
        pack_b_panel<NR>(bpack + static_cast<size_t>(p) * kc * NR, b, k0, kc, j0 + p * NR, std::min(NR, nc - p * NR));
      for (int i0 = r0; i0 < r1; i0 += MR) {
        const int mr = std::min(MR, r1 - i0);
        // Row-major A of the kernel's type is read in place (whole row
        // blocks); otherwise packed.
        bool in_place = false;
        const T* ap = apack;
        if constexpr (std::is_same_v<SA, T>) {
          in_place = a.col == 1 && mr == MR;
          if (in_place) ap = a.p + i0 * a.row + k0;
        }
        const size_t rsa = in_place ? a.row : 1, csa = in_place ? 1 : MR;
        if (!in_place) pack_a_panel<MR>(apack, a, i0, mr, k0, kc);
        for (int p = 0; p < npanels; ++p) {
          const int jp = j0 + p * NR, nr = std::min(NR, N - jp);
          const T* bp = bpack + static_cast<size_t>(p) * kc * NR;
          T* ct = c + static_cast<size_t>(i0) * ldc + jp;
          if (mr == MR && nr == NR) {
            Tile::run(kc, ap, rsa, csa, bp, ct, ldc);
          } else {
            std::fill(edge, edge + MR * NR, T(0));
            Tile::run(kc, ap, rsa, csa, bp, edge, NR);
            for (int i = 0; i < mr; ++i)
              for (int j = 0; j < nr; ++j) ct[i * ldc + j] += edge[i * NR + j];
          }
        }
      }
    }
  }
}

// gemm_rows with the calling thread's packing buffers, kept between calls
// (OpenMP reuses its threads): a fresh 512 KiB allocation per call cost page
// faults.
template <class Tile, typename T, typename SA, typename SB>
void gemm_rows_buffered(T* c, size_t ldc, MatView<SA> a, MatView<SB> b, int r0, int r1, int N, int K) {
  constexpr int MR = Tile::MR, NR = Tile::NR;
  const size_t bsize = static_cast<size_t>((std::min(N, kNC) + NR - 1) / NR) * kKC * NR;
  thread_local std::vector<T> bstore, astore;
  T* bpack = aligned_array(bstore, bsize);
  T* apack = aligned_array(astore, static_cast<size_t>(MR) * kKC);
  gemm_rows<Tile>(c, ldc, a, b, r0, r1, N, K, bpack, apack);
}

template <class Tile, typename T, typename SA, typename SB>
void gemm_driver(T* c, size_t ldc, MatView<SA> a, MatView<SB> b, int M, int N, int K) {
  constexpr int MR = Tile::MR, NR = Tile::NR;
  static_assert(kNC % NR == 0, "column blocks hold whole panels");
  if (M <= 0 || N <= 0 || K <= 0) return;
  const int mblocks = (M + MR - 1) / MR;
#pragma omp parallel if (size_t(M) * N * K >= kMinParallelWork)
  {
    // Rows split into equal runs of whole MR-row blocks, one run per thread.
    const int nth = omp_get_num_threads(), tid = omp_get_thread_num();
    const int b0 = static_cast<int>(static_cast<long>(mblocks) * tid / nth);
    const int b1 = static_cast<int>(static_cast<long>(mblocks) * (tid + 1) / nth);
    if (b0 < b1) gemm_rows_buffered<Tile>(c, ldc, a, b, b0 * MR, std::min(M, b1 * MR), N, K);
  }
}

template <class Tile, typename T>
void gemm_serial(T* c, size_t ldc, MatView<T> a, MatView<T> b, int M, int N, int K) {
  if (M <= 0 || N <= 0 || K <= 0) return;
  gemm_rows_buffered<Tile>(c, ldc, a, b, 0, M, N, K);
}

// ---- selection ------------------------------------------------------------------------

bool cpu_has(GemmKernel k) {
  switch (k) {
    case GemmKernel::Generic:
      return true;
    case GemmKernel::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemmKernel::Avx512:
      return __builtin_cpu_supports("avx512f");
    case GemmKernel::Auto:
      return true;
  }
  return false;
}

// Preference order when several are available. On Zen 4, which executes a
// 512-bit FMA as two 256-bit halves, both SIMD kernels have the same peak;
// avx512 measured a few percent faster at the trainer's shapes (it loads
// fewer B vectors per FMA), see docs/performance.md.
GemmKernel best_available() {
  if (cpu_has(GemmKernel::Avx512)) return GemmKernel::Avx512;
  if (cpu_has(GemmKernel::Avx2)) return GemmKernel::Avx2;
  return GemmKernel::Generic;
}

GemmKernel initial_kernel() {
  const char* env = std::getenv("GPT_GEMM_KERNEL");
  if (!env || !*env || std::string(env) == "auto") return best_available();
  for (GemmKernel k : {GemmKernel::Generic, GemmKernel::Avx2, GemmKernel::Avx512})
    if (std::string(env) == gemm_kernel_name(k)) {
      GPT_CHECK(cpu_has(k), "GPT_GEMM_KERNEL=", env, ": this processor lacks the instructions for it");
      return k;
    }
  fail("GPT_GEMM_KERNEL=", env, " is not a GEMM kernel; valid: auto, generic, avx2, avx512");
}

std::atomic<GemmKernel>& active() {
  static std::atomic<GemmKernel> k{initial_kernel()};
  return k;
}

}  // namespace

bool gemm_kernel_available(GemmKernel k) { return cpu_has(k); }

void set_gemm_kernel(GemmKernel k) {
  if (k == GemmKernel::Auto) k = best_available();
  GPT_CHECK(cpu_has(k), "GEMM kernel ", gemm_kernel_name(k), " needs instructions this processor lacks");
  active().store(k);
}

GemmKernel gemm_kernel() { return active().load(); }

const char* gemm_kernel_name(GemmKernel k) {
  switch (k) {
    case GemmKernel::Auto:
      return "auto";
    case GemmKernel::Generic:
      return "generic";
    case GemmKernel::Avx2:
      return "avx2";
    case GemmKernel::Avx512:
      return "avx512";
  }
  return "?";
}

namespace {
// The float product on the active tile kernel, for operands stored as S.
template <typename S>
void float_gemm(float* c, size_t ldc, MatView<S> a, MatView<S> b, int M, int N, int K) {
  switch (active().load(std::memory_order_relaxed)) {
    case GemmKernel::Avx512:
      return gemm_driver<Avx512Tile>(c, ldc, a, b, M, N, K);
    case GemmKernel::Avx2:
      return gemm_driver<Avx2Tile>(c, ldc, a, b, M, N, K);
    default:
      return gemm_driver<GenericTile<float>>(c, ldc, a, b, M, N, K);
  }
}
}  // namespace

void gemm_accumulate(float* c, size_t ldc, MatView<float> a, MatView<float> b, int M, int N, int K) {
  float_gemm(c, ldc, a, b, M, N, K);
}

void gemm_accumulate(double* c, size_t ldc, MatView<double> a, MatView<double> b, int M, int N, int K) {
  gemm_driver<GenericTile<double>>(c, ldc, a, b, M, N, K);
}

void gemm_accumulate(float* c, size_t ldc, MatView<bf16> a, MatView<bf16> b, int M, int N, int K) {
  float_gemm(c, ldc, a, b, M, N, K);
}

void gemm_accumulate_serial(float* c, size_t ldc, MatView<float> a, MatView<float> b, int M, int N, int K) {
  switch (active().load(std::memory_order_relaxed)) {
    case GemmKernel::Avx512:
      return gemm_serial<Avx512Tile>(c, ldc, a, b, M, N, K);
    case GemmKernel::Avx2:
      return gemm_serial<Avx2Tile>(c, ldc, a, b, M, N, K);
    default:
      return gemm_serial<GenericTile<float>>(c, ldc, a, b, M, N, K);
  }
}

void gemm_accumulate_serial(double* c, size_t ldc, MatView<double> a, MatView<double> b, int M, int N, int K) {
  gemm_serial<GenericTile<double>>(c, ldc, a, b, M, N, K);
}

}  // namespace gpt::cpu
