// cuDNN's fused scaled-dot-product attention (causal softmax, scale
// 1/sqrt(D)) as the reference row of `gpt bench --only cuda-attention`
// (bench/cuda_attention_bench.cpp). cuDNN's fused attention takes bf16 (or
// fp16) Q, K, V and O only: these run bf16 with float32 softmax statistics
// and accumulation, while our kernels run float32.
//
// The only translation unit that sees cuDNN and NVIDIA's header-only
// cudnn-frontend (scripts/fetch_cudnn_frontend.sh): CMake compiles it apart
// and defines GPT_HAVE_CUDNN when cudnn.h, libcudnn and the frontend headers
// are found; otherwise every function here says "not in this build".
// Nothing here throws: failures come back as a message.
#pragma once
#include <string>

namespace gpt {

// Whether this build has cuDNN's fused attention, and its versions
// ("cuDNN 9.19.0 (built with 9.19.0), cudnn-frontend 1.32.0") or why not
// ("not in this build (...)").
bool cudnn_sdpa_in_build();
std::string cudnn_sdpa_description();

struct CudnnSdpaTimes {
  double fwd_s = 0;      // best seconds of one forward (with the softmax statistics the backward needs)
  double fwd_bwd_s = 0;  // best seconds of one forward plus one backward
  std::string error;     // empty on success; else what failed (times are then 0)
};

// Times cuDNN's causal attention on the current CUDA device for B sequences
// of T tokens, NH heads of size D, in the layout of our kernels: Q, K, V
// interleaved in one (B,T,3·NH·D) buffer, O and dO (B,T,NH·D). Inputs are
// random (converted to bf16 once, outside the timed region). Each time is
// the best of repeated calls after a warm-up: at least 3, and more until
// min_seconds of GPU time have passed. Enqueues on the default stream.
CudnnSdpaTimes time_cudnn_sdpa(int B, int T, int NH, int D, double min_seconds);

struct CudnnSdpaCheck {
  double max_abs_error = 0;  // |O_cudnn - O_reference| over all outputs
  std::string error;         // empty on success
};

// Runs cuDNN's forward once on random inputs in the layout above and compares
// O with a double-precision causal softmax attention on the host, computed
// from the same bf16-rounded inputs. For tests: small shapes only.
CudnnSdpaCheck check_cudnn_sdpa_forward(int B, int T, int NH, int D);

}  // namespace gpt
