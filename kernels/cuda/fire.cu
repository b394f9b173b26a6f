// FIRE's bias table (one thread per entry, the MLP in double) and its
// gradient (per-entry sums over the batch, per-pair-block sums per
// parameter, then the blocks in order: no atomics).
// Contracts: kernels/cuda/cuda_kernels.h.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/attention_spec.h"
#include "kernels/bf16_round.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/cuda/reduce.cuh"

namespace gpt::cuda {

// FIRE (attn::fire). The forward: one thread per table entry (i0, Δ), every
// head's bias at once, in double as the CPU kernel evaluates the MLP.
__global__ void __launch_bounds__(kThreads)
    fire_forward_kernel(float* table, const float* p, int Tn, int NH, double L0) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t TT = size_t(Tn) * Tn;
  GPT_GRID_STRIDE(e, TT) {
    const int i0 = static_cast<int>(e / Tn), d = static_cast<int>(e % Tn);
    if (d <= i0) {
      attn::fire::biases(p, NH, attn::fire::input_of(p, NH, L0, i0, d).u, table + e, static_cast<long>(TT));
    } else {
      for (int h = 0; h < NH; ++h) table[h * TT + e] = 0.f;
    }
  }
}

// The backward in three steps: g = Σ_b dtable[b] per entry (b in order);
// per block of kFirePairs pairs (i0, Δ <= i0), thread k sums parameter k's
// share (attn::fire::param_grad) over the block's pairs in order; then each
// parameter's block sums, in block order, are added to dp.
constexpr int kFirePairs = 256;

__global__ void __launch_bounds__(kThreads) fire_sum_kernel(double* g, const float* dtable, int B, size_t total) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_GRID_STRIDE(e, total) {
    double s = 0;
    for (int b = 0; b < B; ++b) s += static_cast<double>(dtable[size_t(b) * total + e]);
    g[e] = s;
  }
}

// Pair q of the lower triangle, rows in order: (i0, Δ) with q = i0(i0+1)/2 + Δ.
__device__ inline void fire_pair(size_t q, int* i0, int* d) {
  long r = static_cast<long>((sqrt(8.0 * static_cast<double>(q) + 1.0) - 1.0) / 2.0);
  while (static_cast<size_t>((r + 1) * (r + 2) / 2) <= q) ++r;
  while (static_cast<size_t>(r * (r + 1) / 2) > q) --r;
  *i0 = static_cast<int>(r);
  *d = static_cast<int>(q - static_cast<size_t>(r * (r + 1) / 2));
}

__global__ void __launch_bounds__(kThreads)
    fire_grad_kernel(double* partial, const double* g, const float* p, int Tn, int NH, double L0, size_t npairs) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_SHARED(double, us, [kFirePairs]);  // each pair's attn::fire::Input
  GPT_SHARED(double, dcs, [kFirePairs]);
  GPT_SHARED(double, dms, [kFirePairs]);
  GPT_SHARED(size_t, es, [kFirePairs]);  // its entry i0·T + Δ
  const size_t first = blockIdx.x * size_t(kFirePairs), TT = size_t(Tn) * Tn;
  const int n = static_cast<int>(npairs - first < size_t(kFirePairs) ? npairs - first : kFirePairs);
  for (int q = threadIdx.x; q < n; q += blockDim.x) {
    int i0, d;
    fire_pair(first + q, &i0, &d);
    const attn::fire::Input in = attn::fire::input_of(p, NH, L0, i0, d);
    us[q] = in.u;
    dcs[q] = in.du_dc;
    dms[q] = in.du_dm;
    es[q] = size_t(i0) * Tn + d;
  }
  __syncthreads();
  const int np = attn::fire::count(NH);
  for (int k = threadIdx.x; k < np; k += blockDim.x) {
    double s = 0;
    for (int q = 0; q < n; ++q) {
      attn::fire::Input in;
      in.u = us[q];
      in.du_dc = dcs[q];
      in.du_dm = dms[q];
      s += attn::fire::param_grad(p, NH, k, in, g + es[q], static_cast<long>(TT));
    }
    partial[blockIdx.x * size_t(np) + k] = s;
  }
}

__global__ void __launch_bounds__(kThreads)
    fire_grad_sum_kernel(float* dp, const double* partial, int nblocks, int np) {
  GPT_BLOCK_BOUND(kThreads);
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= np) return;
  double s = 0;
  for (int b = 0; b < nblocks; ++b) s += partial[size_t(b) * np + k];
  dp[k] += static_cast<float>(s);
}

// The distance biases under position ids (attn::position_table): the
// forward one thread per entry (b, i0, Δ), every head at once; the backward
// as FIRE's, over the pairs (b, i0, Δ <= i0) of every sequence (the ids
// differ per sequence, so the batch is not summed first).
__global__ void __launch_bounds__(kThreads) position_table_kernel(float* table, const float* p, const int32_t* pos,
                                                                  int B, int Tn, int NH, AttentionSpec s) {
  GPT_BLOCK_BOUND(kThreads);
  const size_t TT = size_t(Tn) * Tn;
  GPT_GRID_STRIDE(e, size_t(B) * TT) {
    const int b = static_cast<int>(e / TT);
    const size_t r = e % TT;
    const int i0 = static_cast<int>(r / Tn), d = static_cast<int>(r % Tn);
    float* out = table + size_t(b) * NH * TT + r;
    if (d <= i0) {
      const int32_t* row = pos + size_t(b) * Tn;
      attn::position_table::biases(s, p, NH, row[i0], attn::position_table::distance(row[i0], row[i0 - d]), out,
                                   static_cast<long>(TT));
    } else {
      for (int h = 0; h < NH; ++h) out[h * TT] = 0.f;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    position_grad_kernel(double* partial, const float* dtable, const float* p, const int32_t* pos, int Tn, int NH,
                         AttentionSpec s, size_t npairs) {
  GPT_BLOCK_BOUND(kThreads);
  GPT_SHARED(double, us, [kFirePairs]);  // each pair's attn::position_table::Pair
  GPT_SHARED(double, dcs, [kFirePairs]);
  GPT_SHARED(double, dms, [kFirePairs]);
  GPT_SHARED(int, dists, [kFirePairs]);
  GPT_SHARED(size_t, es, [kFirePairs]);  // its entry ((b·NH)·T + i0)·T + Δ
  const size_t first = blockIdx.x * size_t(kFirePairs), TT = size_t(Tn) * Tn, per_seq = size_t(Tn) * (Tn + 1) / 2;
  const int n = static_cast<int>(npairs - first < size_t(kFirePairs) ? npairs - first : kFirePairs);
  for (int q = threadIdx.x; q < n; q += blockDim.x) {
    const size_t g = first + q;
    const int b = static_cast<int>(g / per_seq);
    int i0, d;
    fire_pair(g % per_seq, &i0, &d);
    const int32_t* row = pos + size_t(b) * Tn;
    const attn::position_table::Pair pr =
        attn::position_table::pair(s, p, NH, row[i0], attn::position_table::distance(row[i0], row[i0 - d]));
    us[q] = pr.in.u;
    dcs[q] = pr.in.du_dc;
    dms[q] = pr.in.du_dm;
    dists[q] = pr.dist;
    es[q] = size_t(b) * NH * TT + size_t(i0) * Tn + d;
  }
  __syncthreads();
  const int np = attn::position_table::param_count(s, NH);
  for (int k = threadIdx.x; k < np; k += blockDim.x) {
    const attn::position_table::HeadBias hb =
        s.kerple() ? attn::position_table::head_bias(s, p, NH, k / 2) : attn::position_table::HeadBias{};
    double sum = 0;
    for (int q = 0; q < n; ++q) {
      attn::position_table::Pair pr;
      pr.in.u = us[q];
      pr.in.du_dc = dcs[q];
      pr.in.du_dm = dms[q];
      pr.dist = dists[q];
      sum += attn::position_table::param_grad(s, p, NH, k, pr, hb, dtable + es[q], static_cast<long>(TT));
    }
    partial[blockIdx.x * size_t(np) + k] = sum;
  }
}

void position_table_forward(float* table, const float* p, const int32_t* pos, int B, int Tn, int NH,
                            const AttentionSpec& s, cudaStream_t stream) {
  GPT_CHECK(attn::position_table::applies(s), "cuda::position_table_forward: the layer has no distance bias");
  const size_t n = size_t(B) * Tn * Tn;
  if (n == 0 || NH == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, position_table_kernel)(table, p, pos, B, Tn, NH, s);
  GPT_CUDA_CHECK_LAUNCH("position_table_kernel");
}

void position_table_backward(float* dp, const float* dtable, const float* p, const int32_t* pos, int B, int Tn,
                             int NH, const AttentionSpec& s, cudaStream_t stream) {
  const int np = attn::position_table::param_count(s, NH);
  const size_t npairs = size_t(B) * Tn * (Tn + 1) / 2;
  if (np == 0 || npairs == 0) return;
  const int nblocks = static_cast<int>((npairs + kFirePairs - 1) / kFirePairs);
  double* partial = nullptr;
  GPT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), size_t(nblocks) * np * sizeof(double), stream));
  GPT_LAUNCH(nblocks, kThreads, stream, position_grad_kernel)(partial, dtable, p, pos, Tn, NH, s, npairs);
  GPT_CUDA_CHECK_LAUNCH("position_grad_kernel");
  GPT_LAUNCH((np + kThreads - 1) / kThreads, kThreads, stream, fire_grad_sum_kernel)(dp, partial, nblocks, np);
  GPT_CUDA_CHECK_LAUNCH("fire_grad_sum_kernel");
  GPT_CUDA_CHECK(cudaFreeAsync(partial, stream));
}

void fire_forward(float* table, const float* p, int Tn, int NH, double L0, cudaStream_t stream) {
  const size_t TT = size_t(Tn) * Tn;
  if (TT == 0 || NH == 0) return;
  GPT_LAUNCH(grid_for(TT, kThreads), kThreads, stream, fire_forward_kernel)(table, p, Tn, NH, L0);
  GPT_CUDA_CHECK_LAUNCH("fire_forward_kernel");
}

void fire_backward(float* dp, const float* dtable, const float* p, int B, int Tn, int NH, double L0,
                   cudaStream_t stream) {
  const size_t total = size_t(NH) * Tn * Tn, npairs = size_t(Tn) * (Tn + 1) / 2;
  if (total == 0 || B == 0) return;
  const int np = attn::fire::count(NH), nblocks = static_cast<int>((npairs + kFirePairs - 1) / kFirePairs);
  double* g = nullptr;
  double* partial = nullptr;
  GPT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&g), total * sizeof(double), stream));
  GPT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), size_t(nblocks) * np * sizeof(double), stream));
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, fire_sum_kernel)(g, dtable, B, total);
  GPT_CUDA_CHECK_LAUNCH("fire_sum_kernel");
  GPT_LAUNCH(nblocks, kThreads, stream, fire_grad_kernel)(partial, g, p, Tn, NH, L0, npairs);
  GPT_CUDA_CHECK_LAUNCH("fire_grad_kernel");
  GPT_LAUNCH((np + kThreads - 1) / kThreads, kThreads, stream, fire_grad_sum_kernel)(dp, partial, nblocks, np);
  GPT_CUDA_CHECK_LAUNCH("fire_grad_sum_kernel");
  GPT_CUDA_CHECK(cudaFreeAsync(partial, stream));
  GPT_CUDA_CHECK(cudaFreeAsync(g, stream));
}

}  // namespace gpt::cuda
