// The tensor-core layer's probes (kernels/cuda/mma_probe.h): one warp each.
#include "kernels/cuda/mma_probe.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/mma.cuh"

namespace gpt::cuda::mma_probe {
namespace {

using namespace gpt::cuda::mma;

__global__ void __launch_bounds__(32)
    mma_by_table_kernel(const uint16_t* A, const uint16_t* B, const float* C, const int* a_at, const int* b_at,
                        const int* c_at, float* d_raw) {
  GPT_BLOCK_BOUND(32);
  const int l = lane_id();
  FragA a;
  FragB b;
  FragC c, d;
  for (int j = 0; j < 4; ++j) a.r[j] = pack_bf16x2(A[a_at[8 * l + 2 * j]], A[a_at[8 * l + 2 * j + 1]]);
  for (int j = 0; j < 2; ++j) b.r[j] = pack_bf16x2(B[b_at[4 * l + 2 * j]], B[b_at[4 * l + 2 * j + 1]]);
  for (int i = 0; i < 4; ++i) c.x[i] = C[c_at[4 * l + i]];
  mma_bf16(d, a, b, c);
  for (int i = 0; i < 4; ++i) d_raw[4 * l + i] = d.x[i];
}

template <int Num, bool Trans>
__global__ void __launch_bounds__(32) ldmatrix_kernel(const uint16_t* M, uint32_t* out) {
  GPT_BLOCK_BOUND(32);
  GPT_SHARED(float4, tile_v, [32]);  // 32 rows of 8 bf16, 16-byte aligned
  uint16_t* tile = reinterpret_cast<uint16_t*>(&tile_v[0]);
  const int l = lane_id(), m = ld_address_matrix(l), r = ld_address_row(l);
  for (int c = 0; c < 8; ++c) tile[(4 * r + m) * 8 + c] = M[64 * m + 8 * r + c];
  __syncthreads();
  uint32_t reg[Num];
  ldmatrix<Num, Trans>(reg, tile + (4 * r + m) * 8);
  for (int k = 0; k < Num; ++k) out[4 * l + k] = reg[k];
}

__global__ void __launch_bounds__(32)
    attention_tile_kernel(const uint16_t* Q, const uint16_t* K, const uint16_t* V, float* S, float* O) {
  GPT_BLOCK_BOUND(32);
  GPT_SHARED(float4, q_v, [32]);  // 16x16
  GPT_SHARED(float4, k_v, [16]);  // 8x16
  GPT_SHARED(float4, v_v, [16]);  // 16x8
  uint16_t* q = reinterpret_cast<uint16_t*>(&q_v[0]);
  uint16_t* k = reinterpret_cast<uint16_t*>(&k_v[0]);
  uint16_t* v = reinterpret_cast<uint16_t*>(&v_v[0]);
  const int l = lane_id();
  for (int e = l; e < 256; e += 32) q[e] = Q[e];
  for (int e = l; e < 128; e += 32) k[e] = K[e], v[e] = V[e];
  __syncthreads();
  // A = Q: matrix m (lanes 8m..8m+7) is rows 8(m % 2).., columns 8(m / 2)..,
  // so that registers 0..3 hold a0a1, a2a3, a4a5, a6a7.
  FragA a;
  {
    const int m = ld_address_matrix(l), r = ld_address_row(l);
    ldmatrix<4, false>(a.r, q + (r + 8 * (m % 2)) * 16 + 8 * (m / 2));
  }
  // B = Kᵀ (B[k][n] = K[n][k]): K's rows are B's columns, so the plain load
  // gives b0b1 (k 0..7) from matrix 0 and b2b3 (k 8..15) from matrix 1.
  FragB bk;
  {
    const int m = ld_address_matrix(l) % 2, r = ld_address_row(l);
    ldmatrix<2, false>(bk.r, k + r * 16 + 8 * m);
  }
  // B = V (row = k): the transposed load of rows 0..7 and 8..15.
  FragB bv;
  ldmatrix<2, true>(bv.r, v + (l % 16) * 8);
  const FragC zero = {{0.f, 0.f, 0.f, 0.f}};
  FragC s, o;
  mma_bf16(s, a, bk, zero);
  mma_bf16(o, a, bv, zero);
  for (int i = 0; i < 4; ++i) {
    S[c_row(l, i) * 8 + c_col(l, i)] = s.x[i];
    O[c_row(l, i) * 8 + c_col(l, i)] = o.x[i];
  }
}

template <typename T>
T* to_device(const T* host, size_t n) {
  T* p = nullptr;
  GPT_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  if (host) GPT_CUDA_CHECK(cudaMemcpy(p, host, n * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}
template <typename T>
void to_host(T* host, const T* dev, size_t n) {
  GPT_CUDA_CHECK(cudaMemcpy(host, dev, n * sizeof(T), cudaMemcpyDeviceToHost));
}

}  // namespace

void mma_by_table(const uint16_t* A, const uint16_t* B, const float* C, const int* a_at, const int* b_at,
                  const int* c_at, float* d_raw) {
  uint16_t* dA = to_device(A, 256);
  uint16_t* dB = to_device(B, 128);
  float* dC = to_device(C, 128);
  int* da = to_device(a_at, 256);
  int* db = to_device(b_at, 128);
  int* dc = to_device(c_at, 128);
  float* dd = to_device<float>(nullptr, 128);
  GPT_LAUNCH(1, 32, cudaStream_t{}, mma_by_table_kernel)(dA, dB, dC, da, db, dc, dd);
  GPT_CUDA_CHECK_LAUNCH("mma_by_table_kernel");
  GPT_CUDA_CHECK(cudaDeviceSynchronize());
  to_host(d_raw, dd, 128);
  for (void* p : {static_cast<void*>(dA), static_cast<void*>(dB), static_cast<void*>(dC), static_cast<void*>(da),
                  static_cast<void*>(db), static_cast<void*>(dc), static_cast<void*>(dd)})
    GPT_CUDA_CHECK(cudaFree(p));
}

void ldmatrix_raw(const uint16_t* M, int num, bool trans, uint32_t* out) {
  uint16_t* dM = to_device(M, 256);
  uint32_t* dout = to_device<uint32_t>(nullptr, 128);
  GPT_CUDA_CHECK(cudaMemset(dout, 0, 128 * sizeof(uint32_t)));
  const dim3 grid(1), block(32);
  const cudaStream_t s{};
  if (num == 1 && !trans) GPT_LAUNCH(grid, block, s, ldmatrix_kernel<1, false>)(dM, dout);
  if (num == 1 && trans) GPT_LAUNCH(grid, block, s, ldmatrix_kernel<1, true>)(dM, dout);
  if (num == 2 && !trans) GPT_LAUNCH(grid, block, s, ldmatrix_kernel<2, false>)(dM, dout);
  if (num == 2 && trans) GPT_LAUNCH(grid, block, s, ldmatrix_kernel<2, true>)(dM, dout);
  if (num == 4 && !trans) GPT_LAUNCH(grid, block, s, ldmatrix_kernel<4, false>)(dM, dout);
  if (num == 4 && trans) GPT_LAUNCH(grid, block, s, ldmatrix_kernel<4, true>)(dM, dout);
  GPT_CUDA_CHECK_LAUNCH("ldmatrix_kernel");
  GPT_CUDA_CHECK(cudaDeviceSynchronize());
  to_host(out, dout, 128);
  GPT_CUDA_CHECK(cudaFree(dM));
  GPT_CUDA_CHECK(cudaFree(dout));
}

void attention_tile(const uint16_t* Q, const uint16_t* K, const uint16_t* V, float* S, float* O) {
  uint16_t* dQ = to_device(Q, 256);
  uint16_t* dK = to_device(K, 128);
  uint16_t* dV = to_device(V, 128);
  float* dS = to_device<float>(nullptr, 128);
  float* dO = to_device<float>(nullptr, 128);
  GPT_LAUNCH(1, 32, cudaStream_t{}, attention_tile_kernel)(dQ, dK, dV, dS, dO);
  GPT_CUDA_CHECK_LAUNCH("attention_tile_kernel");
  GPT_CUDA_CHECK(cudaDeviceSynchronize());
  to_host(S, dS, 128);
  to_host(O, dO, 128);
  for (void* p : {static_cast<void*>(dQ), static_cast<void*>(dK), static_cast<void*>(dV), static_cast<void*>(dS),
                  static_cast<void*>(dO)})
    GPT_CUDA_CHECK(cudaFree(p));
}

}  // namespace gpt::cuda::mma_probe
