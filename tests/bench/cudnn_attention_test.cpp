// bench/cudnn_attention.h, cuDNN's fused attention as the reference of
// `gpt bench --only cuda-attention`: failures come back as messages, never
// as exceptions or crashes (bad shapes, no device, no cuDNN in the build);
// on a GPU (CudaCudnnSdpa.*, run by scripts/gpu_check.sh) cuDNN's output
// in our layout matches a double-precision causal softmax attention, which
// checks the strides and the causal mask the bench times, and both times
// are measured.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "bench/cudnn_attention.h"

#ifdef GPT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace gpt {
namespace {

bool have_device() {
#ifdef GPT_HAVE_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

TEST(CudnnSdpa, DescriptionSaysWhatTheBuildHas) {
  const std::string d = cudnn_sdpa_description();
  if (cudnn_sdpa_in_build()) {
    EXPECT_EQ(d.rfind("cuDNN ", 0), 0u) << d;
    EXPECT_NE(d.find("cudnn-frontend "), std::string::npos) << d;
  } else {
    EXPECT_EQ(d.rfind("not in this build (", 0), 0u) << d;
  }
}

TEST(CudnnSdpa, BadShapeIsAMessageNotAnException) {
  for (int bad : {0, -3}) {
    CudnnSdpaTimes t;
    EXPECT_NO_THROW(t = time_cudnn_sdpa(bad, 1024, 12, 64, 0.0));
    EXPECT_FALSE(t.error.empty());
    EXPECT_EQ(t.fwd_s, 0.0);
    EXPECT_EQ(t.fwd_bwd_s, 0.0);
    CudnnSdpaCheck c;
    EXPECT_NO_THROW(c = check_cudnn_sdpa_forward(2, 128, bad, 64));
    EXPECT_FALSE(c.error.empty());
    if (cudnn_sdpa_in_build()) {
      EXPECT_NE(t.error.find("bad shape"), std::string::npos) << t.error;
      EXPECT_NE(c.error.find("bad shape"), std::string::npos) << c.error;
    }
  }
}

TEST(CudnnSdpa, NoDeviceIsAMessageNotACrash) {
  if (have_device()) GTEST_SKIP() << "a CUDA device is present";
  CudnnSdpaTimes t;
  EXPECT_NO_THROW(t = time_cudnn_sdpa(1, 256, 2, 64, 0.0));
  EXPECT_FALSE(t.error.empty());
  if (cudnn_sdpa_in_build()) {
    EXPECT_NE(t.error.find("no CUDA device"), std::string::npos) << t.error;
  }
}

TEST(CudaCudnnSdpa, ForwardMatchesADoublePrecisionReference) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  if (!cudnn_sdpa_in_build()) GTEST_SKIP() << "cuDNN: " << cudnn_sdpa_description();
  // 2 sequences, 3 heads of 64 in the interleaved (B,T,3C) layout. Inputs are
  // uniform in [-1, 1], so |O| <= 1; bf16 O and bf16 probabilities in cuDNN's
  // P·V cost a few 2^-9; a wrong stride or mask costs ~0.1 or more.
  const CudnnSdpaCheck c = check_cudnn_sdpa_forward(2, 128, 3, 64);
  ASSERT_TRUE(c.error.empty()) << c.error;
  EXPECT_LT(c.max_abs_error, 1e-2);
}

TEST(CudaCudnnSdpa, BenchShapeIsTimed) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  if (!cudnn_sdpa_in_build()) GTEST_SKIP() << "cuDNN: " << cudnn_sdpa_description();
  // GPT-2 small's heads at a short context; no speed is asserted.
  const CudnnSdpaTimes t = time_cudnn_sdpa(4, 1024, 12, 64, 0.0);
  ASSERT_TRUE(t.error.empty()) << t.error;
  EXPECT_TRUE(std::isfinite(t.fwd_s) && t.fwd_s > 0) << t.fwd_s;
  EXPECT_TRUE(std::isfinite(t.fwd_bwd_s) && t.fwd_bwd_s > 0) << t.fwd_bwd_s;
}

}  // namespace
}  // namespace gpt
