// Token + position embedding: forward gathers rows of wte/wpe, backward
// scatters the gradient back into them.
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/parallel.h"

#include <algorithm>

namespace gpt::cpu {

namespace {
// Channels per parallel work item in the backward pass: each item owns a
// disjoint slice of the channels of every dwte/dwpe row, so no two threads
// write the same element.
constexpr int kChannelBlock = 32;

// T: the output's type; S: the tables' (T, or bf16 widened row by row).
template <typename T, typename S>
void forward_impl(T* out, const int32_t* tokens, const S* wte, const S* wpe, int B, int Tn, int C) {
#pragma omp parallel for schedule(static) if (size_t(B) * Tn * C >= kMinParallelWork)
  for (int bt = 0; bt < B * Tn; ++bt) {
    // (B,T,C) row bt; wte (V,C) row tokens[bt]; wpe (maxT,C) row t
    T* o = out + static_cast<size_t>(bt) * C;
    const S* e = wte + static_cast<size_t>(tokens[bt]) * C;
    if (wpe) {
      const S* p = wpe + static_cast<size_t>(bt % Tn) * C;
      for (int c = 0; c < C; ++c) o[c] = stored_value(e[c]) + stored_value(p[c]);
    } else {
      for (int c = 0; c < C; ++c) o[c] = stored_value(e[c]);
    }
  }
}
}  // namespace

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C) {
  forward_impl(out, tokens, wte, wpe, B, Tn, C);
}

void encoder_forward_bf16(float* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B, int Tn, int C) {
  forward_impl(out, tokens, wte, wpe, B, Tn, C);
}

template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tn, int C) {
  // Repeated tokens hit the same dwte row, so rows cannot be split across
  // threads. Splitting channels instead keeps every element's sum in the
  // order of bt whatever the thread count.
  const int nblocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for schedule(static) if (size_t(B) * Tn * C >= kMinParallelWork)
  for (int blk = 0; blk < nblocks; ++blk) {
    const int c0 = blk * kChannelBlock;
    const int c1 = std::min(C, c0 + kChannelBlock);
    for (int bt = 0; bt < B * Tn; ++bt) {
      // (B,T,C) row bt -> dwte row tokens[bt], dwpe row t
      const T* d = dout + static_cast<size_t>(bt) * C;
      T* e = dwte + static_cast<size_t>(tokens[bt]) * C;
      for (int c = c0; c < c1; ++c) e[c] += d[c];
      if (dwpe) {
        T* p = dwpe + static_cast<size_t>(bt % Tn) * C;
        for (int c = c0; c < c1; ++c) p[c] += d[c];
      }
    }
  }
}

template void encoder_forward<float>(float*, const int32_t*, const float*, const float*, int, int, int);
template void encoder_forward<double>(double*, const int32_t*, const double*, const double*, int, int, int);
template void encoder_backward<float>(float*, float*, const float*, const int32_t*, int, int, int);
template void encoder_backward<double>(double*, double*, const double*, const int32_t*, int, int, int);

}  // namespace gpt::cpu
