// Grouped-query attention (Ainslie et al. 2023; Llama 2 70B, Llama 3,
// Mistral, Qwen): NKV key/value heads, each shared by the NH/NKV query heads
// of its group (query head h reads key/value head h / (NH/NKV)). The model
// projects the grouped qkv (q: NH heads, k and v: NKV heads each) and
// repeats each key/value head over its group before attention, as Hugging
// Face's repeat_kv does, so every attention stage, bias, mask and kernel
// runs unchanged; the backward sums the repeated heads' gradients.
// docs/blocks.md.
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {

template <typename T>
void gqa_expand(T* qkv, const T* grouped, int N, int NH, int NKV, int D) {
  const size_t C = static_cast<size_t>(NH) * D, KV = static_cast<size_t>(NKV) * D;
  const int group = NH / NKV;
#pragma omp parallel for schedule(static) if (size_t(N) * 3 * C >= kMinParallelWork)
  for (int n = 0; n < N; ++n) {
    const T* g = grouped + n * (C + 2 * KV);
    T* o = qkv + n * 3 * C;
    for (size_t c = 0; c < C; ++c) o[c] = g[c];  // q
    for (int part = 1; part <= 2; ++part)        // k, v
      for (int h = 0; h < NH; ++h) {
        const T* src = g + C + (part - 1) * KV + static_cast<size_t>(h / group) * D;
        T* dst = o + part * C + static_cast<size_t>(h) * D;
        for (int d = 0; d < D; ++d) dst[d] = src[d];
      }
  }
}

template <typename T>
void gqa_reduce(T* dgrouped, const T* dqkv, int N, int NH, int NKV, int D) {
  const size_t C = static_cast<size_t>(NH) * D, KV = static_cast<size_t>(NKV) * D;
  const int group = NH / NKV;
#pragma omp parallel for schedule(static) if (size_t(N) * 3 * C >= kMinParallelWork)
  for (int n = 0; n < N; ++n) {
    T* g = dgrouped + n * (C + 2 * KV);
    const T* o = dqkv + n * 3 * C;
    for (size_t c = 0; c < C; ++c) g[c] += o[c];
    // Each key/value head sums its group's query heads in order.
    for (int part = 1; part <= 2; ++part)
      for (int h = 0; h < NH; ++h) {
        T* dst = g + C + (part - 1) * KV + static_cast<size_t>(h / group) * D;
        const T* src = o + part * C + static_cast<size_t>(h) * D;
        for (int d = 0; d < D; ++d) dst[d] += src[d];
      }
  }
}

template void gqa_expand<float>(float*, const float*, int, int, int, int);
template void gqa_expand<double>(double*, const double*, int, int, int, int);
template void gqa_reduce<float>(float*, const float*, int, int, int, int);
template void gqa_reduce<double>(double*, const double*, int, int, int, int);

}  // namespace gpt::cpu
