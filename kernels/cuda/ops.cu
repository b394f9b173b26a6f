// The element-wise and per-row kernels of the CUDA backend: embedding,
// LayerNorm, bias, GELU, residual/accumulate/scale, sum of squares, RoPE,
// AdamW. Written for clarity: grid-stride loops, one warp per LayerNorm row,
// column blocks for the sums over rows. Contracts: kernels/cuda/cuda_kernels.h.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/attention_spec.h"
#include "kernels/bf16_round.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_syntax.h"
#include "kernels/cuda/reduce.cuh"

namespace gpt::cuda {

namespace {

constexpr int kThreads = 256;
constexpr float kLayerNormEps = 1e-5f;  // as kernels/cpu/layernorm.cpp

#define GPT_GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

// ---- embedding ----------------------------------------------------------------------
// A table element as float32: as it is, or a bf16 bit pattern widened.
__device__ inline float table_value(float x) { return x; }
__device__ inline float table_value(uint16_t bits) { return bf16_bits_to_float(bits); }

// E: how the tables are stored (float, or bf16 bits for run.storage "bf16").
template <typename E>
__global__ void encoder_forward_kernel(float* out, const int32_t* tokens, const E* wte, const E* wpe, int Tn, int C,
                                       size_t total) {
  GPT_GRID_STRIDE(i, total) {
    const size_t bt = i / C, c = i % C;
    float v = table_value(wte[size_t(tokens[bt]) * C + c]);
    if (wpe) v += table_value(wpe[(bt % Tn) * C + c]);
    out[i] = v;
  }
}

// dwte[tokens[bt], c] += dout[bt, c]: repeated tokens collide, hence atomicAdd.
__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout, const int32_t* tokens, int C,
                                            size_t total) {
  GPT_GRID_STRIDE(i, total) {
    const size_t bt = i / C, c = i % C;
    atomicAdd(dwte + size_t(tokens[bt]) * C + c, dout[i]);
  }
}

// dwpe[t, c] += Σ_b dout[b, t, c]: one thread per (t, c), b in order.
__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int Tn, int C) {
  const size_t total = size_t(Tn) * C;
  GPT_GRID_STRIDE(i, total) {
    float s = 0.f;
    for (int b = 0; b < B; ++b) s += dout[size_t(b) * total + i];
    dwpe[i] += s;
  }
}

// ---- LayerNorm: one warp per row ----------------------------------------------------
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                         const float* b, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;  // the whole warp leaves together
  const float* x = inp + size_t(row) * C;
  float* y = out + size_t(row) * C;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += x[c];
  const float m = warp_sum(s) / C;
  float v = 0.f;  // two passes, as the CPU kernel: no E[x²] - E[x]² cancellation
  for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
  const float r = 1.0f / sqrtf(warp_sum(v) / C + kLayerNormEps);
  for (int c = lane; c < C; c += 32) y[c] = (x[c] - m) * r * w[c] + b[c];
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = r;
  }
}

// dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w.
__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                                const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + size_t(row) * C;
  const float* dy = dout + size_t(row) * C;
  float* dx = dinp + size_t(row) * C;
  const float m = mean[row], r = rstd[row];
  float g_sum = 0.f, gx_sum = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float g = dy[c] * w[c];
    g_sum += g;
    gx_sum += g * (x[c] - m) * r;
  }
  const float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (x[c] - m) * r;
    dx[c] += r * (dy[c] * w[c] - g_mean - xhat * gx_mean);
  }
}

// Column sums over rows, shared by the LayerNorm parameters and the bias
// gradient. Block (32, 8): threadIdx.x is the column within a block of 32,
// threadIdx.y and blockIdx.y stride over the rows; the 8 partial sums of a
// column are added in shared memory and the block adds its total with
// atomicAdd (gridDim.y blocks per column).
constexpr int kColRows = 8;
unsigned row_blocks(int N) { return static_cast<unsigned>(std::min(64, std::max(1, N / 256))); }

__global__ void layernorm_backward_params_kernel(float* dw, float* db, const float* dout, const float* inp,
                                                 const float* mean, const float* rstd, int N, int C) {
  GPT_SHARED(float, sw, [kColRows][33]);
  GPT_SHARED(float, sb, [kColRows][33]);
  const int c = blockIdx.x * 32 + threadIdx.x;
  float aw = 0.f, ab = 0.f;
  if (c < C)
    for (int n = blockIdx.y * kColRows + threadIdx.y; n < N; n += gridDim.y * kColRows) {
      const float dy = dout[size_t(n) * C + c];
      aw += dy * (inp[size_t(n) * C + c] - mean[n]) * rstd[n];
      ab += dy;
    }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int k = 1; k < kColRows; ++k) {
      aw += sw[k][threadIdx.x];
      ab += sb[k][threadIdx.x];
    }
    atomicAdd(dw + c, aw);
    atomicAdd(db + c, ab);
  }
}

// dout as float32, or bf16 bit patterns (bf16 storage).
__device__ inline float widen_value(float x) { return x; }
__device__ inline float widen_value(uint16_t b) { return bf16_bits_to_float(b); }

template <typename In>
__global__ void bias_backward_kernel(float* dbias, const In* dout, int N, int OC) {
  GPT_SHARED(float, sb, [kColRows][33]);
  const int o = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.f;
  if (o < OC)
    for (int n = blockIdx.y * kColRows + threadIdx.y; n < N; n += gridDim.y * kColRows)
      acc += widen_value(dout[size_t(n) * OC + o]);
  sb[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && o < OC) {
    for (int k = 1; k < kColRows; ++k) acc += sb[k][threadIdx.x];
    atomicAdd(dbias + o, acc);
  }
}

__global__ void bias_add_kernel(float* out, const float* bias, int OC, size_t total) {
  GPT_GRID_STRIDE(i, total) out[i] += bias[i % OC];
}

// ---- GELU: 0.5 x (1 + tanh u) = x·sigmoid(2u), u = k (x + a x³), as the float
// CPU path (no 1 + tanh cancellation for negative x) ------------------------------------
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kCubic = 0.044715f;

__global__ void gelu_forward_kernel(float* out, const float* inp, size_t n) {
  GPT_GRID_STRIDE(i, n) {
    const float x = inp[i];
    out[i] = x / (1.0f + expf(-2.0f * kSqrt2OverPi * (x + kCubic * x * x * x)));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t n) {
  GPT_GRID_STRIDE(i, n) {
    const float x = inp[i];
    // s = sigmoid(2u); d/dx [x s] = s + 2 x s (1 - s) k (1 + 3 a x²). Past
    // |x| = 100, s (1 - s) is 0 and the clamp keeps x² finite (no 0·inf).
    const float s = 1.0f / (1.0f + expf(-2.0f * kSqrt2OverPi * (x + kCubic * x * x * x)));
    const float xc = fminf(fmaxf(x, -100.f), 100.f);
    const float grad = s + 2.0f * xc * s * (1.0f - s) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * xc * xc);
    dinp[i] += grad * dout[i];
  }
}

// ---- element-wise --------------------------------------------------------------------------
__global__ void residual_kernel(float* out, const float* a, const float* b, size_t n) {
  GPT_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
__global__ void add_kernel(float* dst, const float* src, size_t n) { GPT_GRID_STRIDE(i, n) dst[i] += src[i]; }
__global__ void widen_bf16_kernel(float* dst, const uint16_t* src, size_t n) {
  GPT_GRID_STRIDE(i, n) dst[i] = bf16_bits_to_float(src[i]);
}
__global__ void round_bf16_kernel(uint16_t* dst, const float* src, size_t n) {
  GPT_GRID_STRIDE(i, n) dst[i] = round_to_bf16_bits(src[i]);
}
__global__ void scale_kernel(float* x, float s, size_t n) { GPT_GRID_STRIDE(i, n) x[i] *= s; }
__global__ void sum_squares_kernel(double* partial, const float* x, size_t n) {
  double s = 0.0;
  GPT_GRID_STRIDE(i, n) s += double(x[i]) * double(x[i]);
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// ---- RoPE: one thread per output element of (B,T,3C) -------------------------------------
// sign +1 applies R, -1 its transpose; accumulate adds into dst. The pairs are
// (k, k + d_r/2) over the first d_r channels of a head; the rest pass through.
__global__ void rope_kernel(float* dst, const float* src, int Tn, int C, int NH, RopeSpec rs, int pos0, double sign,
                            bool accumulate, size_t total) {
  const size_t C3 = 3 * size_t(C);
  const int D = C / NH, d_r = rope::dims(rs, D), half = d_r / 2;
  GPT_GRID_STRIDE(i, total) {
    const size_t bt = i / C3, col = i % C3;
    const int j = static_cast<int>(col % D);
    float y;
    if (col >= 2 * size_t(C) || j >= d_r) {
      y = src[i];  // v and the channels past d_r pass through
    } else {
      const int k = j < half ? j : j - half;       // pair (k, k + half)
      const float* x = src + bt * C3 + (col - j);  // this head's D values
      const int t = pos0 + static_cast<int>(bt % Tn);
      // The far copy of a distance remapping rotates q and k at their own positions.
      const double pos = !rs.far_positions ? double(t)
                         : col < size_t(C) ? remap::far_query_pos(rs, t)
                                           : remap::far_key_pos(rs, t);
      const double a = pos * rope::inv_freq(rs, k, d_r, pos0 + Tn);
      double sn, cs;
      sincos(a, &sn, &cs);
      sn *= sign;
      const double x1 = x[k], x2 = x[k + half];
      y = static_cast<float>(j < half ? x1 * cs - x2 * sn : x1 * sn + x2 * cs);
    }
    dst[i] = accumulate ? dst[i] + y : y;
  }
}

// ---- AdamW ---------------------------------------------------------------------------------
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, size_t n, float b1, float b2,
                             float one_m_b1, float one_m_b2, float inv_c1, float inv_c2, float lr, float eps,
                             float wd) {
  GPT_GRID_STRIDE(i, n) {
    const float g = grad[i];
    const float mi = b1 * m[i] + one_m_b1 * g;
    const float vi = b2 * v[i] + one_m_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * inv_c1, vhat = vi * inv_c2;
    param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * param[i]);
  }
}

unsigned warp_rows_grid(int N) { return static_cast<unsigned>((N + kThreads / 32 - 1) / (kThreads / 32)); }

template <typename E>
void encoder_forward_of(float* out, const int32_t* tokens, const E* wte, const E* wpe, int B, int Tn, int C,
                        cudaStream_t stream) {
  const size_t total = size_t(B) * Tn * C;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, encoder_forward_kernel<E>)
  (out, tokens, wte, wpe, Tn, C, total);
  GPT_CUDA_CHECK_LAUNCH("encoder_forward_kernel");
}

}  // namespace

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int Tn, int C,
                     cudaStream_t stream) {
  encoder_forward_of(out, tokens, wte, wpe, B, Tn, C, stream);
}

void encoder_forward(float* out, const int32_t* tokens, const uint16_t* wte, const uint16_t* wpe, int B, int Tn, int C,
                     cudaStream_t stream) {
  encoder_forward_of(out, tokens, wte, wpe, B, Tn, C, stream);
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int Tn, int C,
                      cudaStream_t stream) {
  const size_t total = size_t(B) * Tn * C;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, encoder_backward_wte_kernel)(dwte, dout, tokens, C, total);
  GPT_CUDA_CHECK_LAUNCH("encoder_backward_wte_kernel");
  if (dwpe) {
    GPT_LAUNCH(grid_for(size_t(Tn) * C, kThreads), kThreads, stream, encoder_backward_wpe_kernel)(dwpe, dout, B, Tn, C);
    GPT_CUDA_CHECK_LAUNCH("encoder_backward_wpe_kernel");
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C, cudaStream_t stream) {
  if (N <= 0) return;
  GPT_LAUNCH(warp_rows_grid(N), kThreads, stream, layernorm_forward_kernel)(out, mean, rstd, inp, weight, bias, N, C);
  GPT_CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
  if (N <= 0) return;
  GPT_LAUNCH(warp_rows_grid(N), kThreads, stream, layernorm_backward_input_kernel)
  (dinp, dout, inp, weight, mean, rstd, N, C);
  GPT_CUDA_CHECK_LAUNCH("layernorm_backward_input_kernel");
  const dim3 grid((C + 31) / 32, row_blocks(N)), block(32, kColRows);
  GPT_LAUNCH(grid, block, stream, layernorm_backward_params_kernel)(dweight, dbias, dout, inp, mean, rstd, N, C);
  GPT_CUDA_CHECK_LAUNCH("layernorm_backward_params_kernel");
}

void bias_add(float* out, const float* bias, int N, int OC, cudaStream_t stream) {
  const size_t total = size_t(N) * OC;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, bias_add_kernel)(out, bias, OC, total);
  GPT_CUDA_CHECK_LAUNCH("bias_add_kernel");
}

namespace {
template <typename In>
void bias_backward_of(float* dbias, const In* dout, int N, int OC, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  const dim3 grid((OC + 31) / 32, row_blocks(N)), block(32, kColRows);
  GPT_LAUNCH(grid, block, stream, bias_backward_kernel<In>)(dbias, dout, N, OC);
  GPT_CUDA_CHECK_LAUNCH("bias_backward_kernel");
}
}  // namespace

void bias_backward(float* dbias, const float* dout, int N, int OC, cudaStream_t stream) {
  bias_backward_of(dbias, dout, N, OC, stream);
}

void bias_backward(float* dbias, const uint16_t* dout, int N, int OC, cudaStream_t stream) {
  bias_backward_of(dbias, dout, N, OC, stream);
}

void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, gelu_forward_kernel)(out, inp, n);
  GPT_CUDA_CHECK_LAUNCH("gelu_forward_kernel");
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, gelu_backward_kernel)(dinp, inp, dout, n);
  GPT_CUDA_CHECK_LAUNCH("gelu_backward_kernel");
}

__global__ void sigmoid_gate_forward_kernel(float* out, const float* y, const float* g, size_t n) {
  GPT_GRID_STRIDE(i, n) { out[i] = y[i] * attn::sigmoid(g[i]); }
}
__global__ void sigmoid_gate_backward_kernel(float* dy, float* dg, const float* dout, const float* y, const float* g,
                                             size_t n) {
  GPT_GRID_STRIDE(i, n) {
    const float s = attn::sigmoid(g[i]);
    dy[i] += dout[i] * s;
    dg[i] += dout[i] * y[i] * s * (1.0f - s);
  }
}

void sigmoid_gate_forward(float* out, const float* y, const float* g, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, sigmoid_gate_forward_kernel)(out, y, g, n);
  GPT_CUDA_CHECK_LAUNCH("sigmoid_gate_forward_kernel");
}
void sigmoid_gate_backward(float* dy, float* dg, const float* dout, const float* y, const float* g, size_t n,
                           cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, sigmoid_gate_backward_kernel)(dy, dg, dout, y, g, n);
  GPT_CUDA_CHECK_LAUNCH("sigmoid_gate_backward_kernel");
}

// One thread per (sequence, head): a sequential scan over t in double, as the
// CPU kernel sums.
__global__ void forget_forward_kernel(float* c, const float* g, int B, int Tn, int NH) {
  const int bh = blockIdx.x * blockDim.x + threadIdx.x;
  if (bh >= B * NH) return;
  const int b = bh / NH, h = bh % NH;
  double sum = 0;
  for (int t = 0; t < Tn; ++t) {
    sum += attn::log_sigmoid(static_cast<double>(g[(static_cast<size_t>(b) * Tn + t) * NH + h]));
    c[static_cast<size_t>(bh) * Tn + t] = static_cast<float>(sum);
  }
}

__global__ void forget_backward_kernel(float* dg, const float* dc, const float* g, int B, int Tn, int NH) {
  const int bh = blockIdx.x * blockDim.x + threadIdx.x;
  if (bh >= B * NH) return;
  const int b = bh / NH, h = bh % NH;
  double suffix = 0;
  for (int t = Tn - 1; t >= 0; --t) {
    suffix += static_cast<double>(dc[static_cast<size_t>(bh) * Tn + t]);
    const size_t k = (static_cast<size_t>(b) * Tn + t) * NH + h;
    dg[k] += static_cast<float>(attn::log_sigmoid_grad(static_cast<double>(g[k])) * suffix);
  }
}

// FIRE (attn::fire). The forward: one thread per table entry (i0, Δ), every
// head's bias at once, in double as the CPU kernel evaluates the MLP.
__global__ void fire_forward_kernel(float* table, const float* p, int Tn, int NH, double L0) {
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

__global__ void fire_sum_kernel(double* g, const float* dtable, int B, size_t total) {
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

__global__ void fire_grad_kernel(double* partial, const double* g, const float* p, int Tn, int NH, double L0,
                                 size_t npairs) {
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

__global__ void fire_grad_sum_kernel(float* dp, const double* partial, int nblocks, int np) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= np) return;
  double s = 0;
  for (int b = 0; b < nblocks; ++b) s += partial[size_t(b) * np + k];
  dp[k] += static_cast<float>(s);
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

// Differential attention (attn::diff): the split and its backward one thread
// per element of the wider tensor; the combination one thread per (row,
// head), in double as the CPU kernel; the gain's gradient by column blocks
// as LayerNorm's parameters, λ's by a sum over every (row, head) in one block.
__global__ void diff_split_kernel(float* qkv2, const float* qkv, int N, int C, int NH) {
  const int D = C / NH, d = D / 2;
  const size_t W = 6 * size_t(C), total = size_t(N) * W;
  GPT_GRID_STRIDE(e, total) {
    const size_t n = e / W;
    const int r = static_cast<int>(e % W), part = r / (2 * C), w = r % (2 * C), s = w / d, c = w % d;
    const int h = s / attn::diff::kHeads, m = (s % attn::diff::kHeads) / 2, u = s % 2;
    qkv2[e] = qkv[n * 3 * C + (part == 2 ? 2 * C + h * D + u * d + c : part * C + h * D + m * d + c)];
  }
}

__global__ void diff_split_backward_kernel(float* dqkv, const float* dqkv2, int N, int C, int NH) {
  const int D = C / NH, d = D / 2;
  const size_t W = 3 * size_t(C), total = size_t(N) * W;
  GPT_GRID_STRIDE(e, total) {
    const size_t n = e / W;
    const int r = static_cast<int>(e % W), part = r / C, w = r % C, h = w / D, half = (w % D) / d, c = w % d;
    const float* g = dqkv2 + n * 6 * C + part * 2 * C;
    const int s0 = attn::diff::kHeads * h;
    // q, k half m: kernel heads 4h + 2m + {0, 1}; v half u: 4h + u and 4h + 2 + u
    dqkv[e] += part < 2 ? g[(s0 + 2 * half) * d + c] + g[(s0 + 2 * half + 1) * d + c]
                        : g[(s0 + half) * d + c] + g[(s0 + 2 + half) * d + c];
  }
}

// z of head h of row n into z[0..D) (double), from y2 and λ.
__device__ inline void diff_z(double* z, const float* y, int h, int d, double l) {
  const int s0 = attn::diff::kHeads * h;
  for (int u = 0; u < 2; ++u)
    for (int c = 0; c < d; ++c)
      z[u * d + c] = static_cast<double>(y[(s0 + u) * d + c]) - l * static_cast<double>(y[(s0 + 2 + u) * d + c]);
}
constexpr int kDiffMaxD = 512;  // head sizes the combination kernels hold in registers or local memory

__global__ void diff_combine_kernel(float* out, float* rstd, const float* y2, const float* lam, const float* gain,
                                    int N, int C, int NH, double lambda_init) {
  const int D = C / NH, d = D / 2;
  const double l = attn::diff::lambda(lam, d, lambda_init).value, scale = 1.0 - lambda_init;
  double z[kDiffMaxD];
  GPT_GRID_STRIDE(e, size_t(N) * NH) {
    const size_t n = e / NH;
    const int h = static_cast<int>(e % NH);
    diff_z(z, y2 + n * 2 * C, h, d, l);
    double ss = 0;
    for (int c = 0; c < D; ++c) ss += z[c] * z[c];
    const double r = 1.0 / sqrt(ss / D + attn::diff::kEps);
    rstd[e] = static_cast<float>(r);
    for (int c = 0; c < D; ++c) out[n * C + h * D + c] = static_cast<float>(scale * z[c] * r * gain[c]);
  }
}

// dy2 of each (row, head), and its share of dL/dλ into dl[row·NH + head].
__global__ void diff_combine_backward_kernel(float* dy2, double* dl, const float* dout, const float* y2,
                                             const float* rstd, const float* lam, const float* gain, int N, int C,
                                             int NH, double lambda_init) {
  const int D = C / NH, d = D / 2;
  const double l = attn::diff::lambda(lam, d, lambda_init).value, scale = 1.0 - lambda_init;
  double z[kDiffMaxD];
  GPT_GRID_STRIDE(e, size_t(N) * NH) {
    const size_t n = e / NH;
    const int h = static_cast<int>(e % NH), s0 = attn::diff::kHeads * h;
    const float* y = y2 + n * 2 * C;
    diff_z(z, y, h, d, l);
    const double r = static_cast<double>(rstd[e]);
    double dot = 0;
    for (int c = 0; c < D; ++c) dot += scale * dout[n * C + h * D + c] * static_cast<double>(gain[c]) * (z[c] * r);
    dot /= D;
    double acc = 0;
    for (int u = 0; u < 2; ++u)
      for (int c = 0; c < d; ++c) {
        const int k = u * d + c;
        const double dn = scale * dout[n * C + h * D + k] * static_cast<double>(gain[k]);
        const double dz = r * (dn - z[k] * r * dot);
        dy2[n * 2 * C + (s0 + u) * d + c] = static_cast<float>(dz);
        dy2[n * 2 * C + (s0 + 2 + u) * d + c] = static_cast<float>(-l * dz);
        acc -= dz * static_cast<double>(y[(s0 + 2 + u) * d + c]);
      }
    dl[e] = acc;
  }
}

// dgain[c] += Σ over (row, head) of (1 − λ_init)·dout·z·rstd: blocks (32
// columns × kColRows) striding over the rows, as layernorm_backward_params_kernel.
__global__ void diff_gain_kernel(float* dgain, const float* dout, const float* y2, const float* rstd, const float* lam,
                                 int N, int C, int NH, double lambda_init) {
  GPT_SHARED(double, part, [kColRows][33]);
  const int D = C / NH, d = D / 2, c = blockIdx.x * 32 + threadIdx.x;
  const double l = attn::diff::lambda(lam, d, lambda_init).value, scale = 1.0 - lambda_init;
  double a = 0;
  if (c < D) {
    const int u = c / d, cc = c % d;
    for (size_t e = blockIdx.y * size_t(kColRows) + threadIdx.y; e < size_t(N) * NH;
         e += gridDim.y * size_t(kColRows)) {
      const size_t n = e / NH;
      const int h = static_cast<int>(e % NH), s0 = attn::diff::kHeads * h;
      const float* y = y2 + n * 2 * C;
      const double z = static_cast<double>(y[(s0 + u) * d + cc]) - l * static_cast<double>(y[(s0 + 2 + u) * d + cc]);
      a += scale * dout[n * C + h * D + c] * z * static_cast<double>(rstd[e]);
    }
  }
  part[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y == 0 && c < D) {
    for (int k = 1; k < kColRows; ++k) a += part[k][threadIdx.x];
    atomicAdd(dgain + c, static_cast<float>(a));
  }
}

// One block: Σ dl (each thread a fixed stride, then the block sum), and
// dlam[k] += that times dλ/dp_k.
__global__ void diff_lambda_grad_kernel(float* dlam, const double* dl, size_t rows, const float* lam, int d,
                                        double lambda_init) {
  double s = 0;
  for (size_t e = threadIdx.x; e < rows; e += blockDim.x) s += dl[e];
  s = block_sum(s);
  const attn::diff::Lambda L = attn::diff::lambda(lam, d, lambda_init);
  for (int k = threadIdx.x; k < 4 * d; k += blockDim.x)
    dlam[k] += static_cast<float>(s * attn::diff::lambda_grad(lam, d, L, k));
}

__global__ void head_repeat_kernel(float* dst, const float* src, size_t outer_heads, size_t inner, int group) {
  GPT_GRID_STRIDE(e, outer_heads * group * inner) {
    const size_t i = e % inner, ohk = e / inner;
    dst[e] = src[(ohk / group) * inner + i];
  }
}

__global__ void head_reduce_kernel(float* dst, const float* src, size_t outer_heads, size_t inner, int group) {
  GPT_GRID_STRIDE(e, outer_heads * inner) {
    const size_t i = e % inner, oh = e / inner;
    float acc = dst[e];
    for (int k = 0; k < group; ++k) acc += src[(oh * group + k) * inner + i];
    dst[e] = acc;
  }
}

void diff_split_forward(float* qkv2, const float* qkv, int N, int C, int NH, cudaStream_t stream) {
  const size_t total = size_t(N) * 6 * C;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, diff_split_kernel)(qkv2, qkv, N, C, NH);
  GPT_CUDA_CHECK_LAUNCH("diff_split_kernel");
}

void diff_split_backward(float* dqkv, const float* dqkv2, int N, int C, int NH, cudaStream_t stream) {
  const size_t total = size_t(N) * 3 * C;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, diff_split_backward_kernel)(dqkv, dqkv2, N, C, NH);
  GPT_CUDA_CHECK_LAUNCH("diff_split_backward_kernel");
}

void diff_combine_forward(float* out, float* rstd, const float* y2, const float* lam, const float* gain, int N, int C,
                          int NH, double lambda_init, cudaStream_t stream) {
  const size_t rows = size_t(N) * NH;
  if (rows == 0) return;
  GPT_CHECK(C / NH <= kDiffMaxD, "cuda::diff_combine_forward: head size ", C / NH, " exceeds ", kDiffMaxD);
  GPT_LAUNCH(grid_for(rows, 128), 128, stream, diff_combine_kernel)(out, rstd, y2, lam, gain, N, C, NH, lambda_init);
  GPT_CUDA_CHECK_LAUNCH("diff_combine_kernel");
}

void diff_combine_backward(float* dy2, float* dlam, float* dgain, const float* dout, const float* y2, const float* rstd,
                           const float* lam, const float* gain, int N, int C, int NH, double lambda_init,
                           cudaStream_t stream) {
  const size_t rows = size_t(N) * NH;
  if (rows == 0) return;
  const int D = C / NH;
  GPT_CHECK(D <= kDiffMaxD, "cuda::diff_combine_backward: head size ", D, " exceeds ", kDiffMaxD);
  double* dl = nullptr;
  GPT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&dl), rows * sizeof(double), stream));
  GPT_LAUNCH(grid_for(rows, 128), 128, stream, diff_combine_backward_kernel)
  (dy2, dl, dout, y2, rstd, lam, gain, N, C, NH, lambda_init);
  GPT_CUDA_CHECK_LAUNCH("diff_combine_backward_kernel");
  const dim3 grid((D + 31) / 32, row_blocks(static_cast<int>(std::min<size_t>(rows, 1u << 30)))), block(32, kColRows);
  GPT_LAUNCH(grid, block, stream, diff_gain_kernel)(dgain, dout, y2, rstd, lam, N, C, NH, lambda_init);
  GPT_CUDA_CHECK_LAUNCH("diff_gain_kernel");
  GPT_LAUNCH(1, kThreads, stream, diff_lambda_grad_kernel)(dlam, dl, rows, lam, D / 2, lambda_init);
  GPT_CUDA_CHECK_LAUNCH("diff_lambda_grad_kernel");
  GPT_CUDA_CHECK(cudaFreeAsync(dl, stream));
}

void head_repeat(float* dst, const float* src, size_t outer, int NH, size_t inner, int group, cudaStream_t stream) {
  const size_t total = outer * NH * group * inner;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, head_repeat_kernel)(dst, src, outer * NH, inner, group);
  GPT_CUDA_CHECK_LAUNCH("head_repeat_kernel");
}

void head_reduce(float* dst, const float* src, size_t outer, int NH, size_t inner, int group, cudaStream_t stream) {
  const size_t total = outer * NH * inner;
  if (total == 0) return;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, head_reduce_kernel)(dst, src, outer * NH, inner, group);
  GPT_CUDA_CHECK_LAUNCH("head_reduce_kernel");
}

void forget_forward(float* c, const float* g, int B, int Tn, int NH, cudaStream_t stream) {
  const int n = B * NH;
  if (n == 0 || Tn == 0) return;
  GPT_LAUNCH((n + 127) / 128, 128, stream, forget_forward_kernel)(c, g, B, Tn, NH);
  GPT_CUDA_CHECK_LAUNCH("forget_forward_kernel");
}

void forget_backward(float* dg, const float* dc, const float* g, int B, int Tn, int NH, cudaStream_t stream) {
  const int n = B * NH;
  if (n == 0 || Tn == 0) return;
  GPT_LAUNCH((n + 127) / 128, 128, stream, forget_backward_kernel)(dg, dc, g, B, Tn, NH);
  GPT_CUDA_CHECK_LAUNCH("forget_backward_kernel");
}

void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, residual_kernel)(out, a, b, n);
  GPT_CUDA_CHECK_LAUNCH("residual_kernel");
}

void bf16_to_float(float* dst, const uint16_t* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, widen_bf16_kernel)(dst, src, n);
  GPT_CUDA_CHECK_LAUNCH("widen_bf16_kernel");
}

void float_to_bf16(uint16_t* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, round_bf16_kernel)(dst, src, n);
  GPT_CUDA_CHECK_LAUNCH("round_bf16_kernel");
}

void add_inplace(float* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, add_kernel)(dst, src, n);
  GPT_CUDA_CHECK_LAUNCH("add_kernel");
}

void scale_inplace(float* x, float s, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, scale_kernel)(x, s, n);
  GPT_CUDA_CHECK_LAUNCH("scale_kernel");
}

void sum_squares_partials(double* partial, const float* x, size_t n, cudaStream_t stream) {
  // Always kSumSquaresBlocks blocks (empty ones write 0), so the caller can
  // add a fixed number of partials.
  GPT_LAUNCH(kSumSquaresBlocks, kThreads, stream, sum_squares_kernel)(partial, x, n);
  GPT_CUDA_CHECK_LAUNCH("sum_squares_kernel");
}

namespace {
void rope_apply(float* dst, const float* src, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0, double sign,
                bool accumulate, cudaStream_t stream) {
  GPT_CHECK(B > 0 && Tn > 0 && C > 0 && NH > 0, "rope: B, T, C, NH must be positive, got B=", B, " T=", Tn, " C=", C,
            " NH=", NH);
  GPT_CHECK(C % NH == 0 && (C / NH) % 2 == 0, "rope: the head size C/NH must be an even integer, got C=", C,
            " NH=", NH);
  GPT_CHECK(rs.theta > 0.0, "rope: theta must be positive, got ", rs.theta);
  const int d_r = rope::dims(rs, C / NH);
  GPT_CHECK(d_r >= 2 && d_r % 2 == 0 && d_r <= C / NH,
            "rope: the rotated dimensions must be even and within the head (", C / NH, "), got ", d_r);
  const size_t total = size_t(B) * Tn * 3 * C;
  GPT_LAUNCH(grid_for(total, kThreads), kThreads, stream, rope_kernel)
  (dst, src, Tn, C, NH, rs, pos0, sign, accumulate, total);
  GPT_CUDA_CHECK_LAUNCH("rope_kernel");
}
}  // namespace

void rope_forward(float* out, const float* inp, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,
                  cudaStream_t stream) {
  rope_apply(out, inp, B, Tn, C, NH, rs, pos0, +1.0, false, stream);
}

void rope_backward(float* dinp, const float* dout, int B, int Tn, int C, int NH, const RopeSpec& rs, int pos0,
                   cudaStream_t stream) {
  rope_apply(dinp, dout, B, Tn, C, NH, rs, pos0, -1.0, true, stream);
}

void adamw_update(float* param, const float* grad, float* m, float* v, size_t n, double lr, double beta1, double beta2,
                  double eps, double weight_decay, long t, cudaStream_t stream) {
  GPT_CHECK(t >= 1, "adamw_update: step t must be >= 1 (1-based, for bias correction), got ", t);
  if (n == 0) return;
  const float inv_c1 = float(1.0 / (1.0 - std::pow(beta1, double(t))));
  const float inv_c2 = float(1.0 / (1.0 - std::pow(beta2, double(t))));
  GPT_LAUNCH(grid_for(n, kThreads), kThreads, stream, adamw_kernel)
  (param, grad, m, v, n, float(beta1), float(beta2), float(1.0 - beta1), float(1.0 - beta2), inv_c1, inv_c2, float(lr),
   float(eps), float(weight_decay));
  GPT_CUDA_CHECK_LAUNCH("adamw_kernel");
}

}  // namespace gpt::cuda
