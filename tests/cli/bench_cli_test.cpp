// `gpt bench` on a tiny model with every part and the shortest settings:
// it runs, prints its table rows, the peak and the attention grid, and
// rejects bad options. No timing is asserted.
#include <gtest/gtest.h>

#include <string>

#include "util/run_binary.h"

namespace {

using gpt::test::run;

TEST(BenchCli, TinyRunPrintsEveryPart) {
  const auto r =
      run("bench --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.context=16 "
          "--set train.batch_size=2 --square 64 --steps 1 --min-seconds 0 --contexts 16,32 --presets softmax,lssar "
          "--threads 1");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* want :
       {"gpt bench", "GEMM kernel", "gemm      square 64^3", "qkv fwd 32x32->96", "lm head bwd 32x32->320",
        "peak      best GEMM above", "train     step fwd+bwd+AdamW B=2 T=16", "eval      forward losses B=2 T=16",
        "memory    eval 16x: 1 sequence of 256", "peak RSS", "attention forward+backward", "T=16", "T=32", "softmax",
        "lssar", "of peak", "total"})
    EXPECT_NE(r.output.find(want), std::string::npos) << "missing \"" << want << "\" in\n" << r.output;
}

TEST(BenchCli, OnlySelectsPartsAndStillReportsPeak) {
  const auto r =
      run("bench --set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2 --set model.context=16 "
          "--set train.batch_size=2 --square 64 --min-seconds 0 --only eval --gemm-kernel generic --threads 1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("GEMM kernel generic"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("square 64^3 GEMM"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("eval      forward losses"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("train     step"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("attention forward+backward"), std::string::npos) << r.output;
}

TEST(BenchCli, BadOptionsAreErrors) {
  struct Case {
    const char* args;
    const char* message;
  } cases[] = {
      {"bench --only gemm,speed", "unknown part \"speed\""},
      {"bench --contexts 256,x", "\"x\" is not a positive integer"},
      {"bench --presets softmax,nope", "unknown attention preset \"nope\""},
      {"bench --gemm-kernel sse9", "\"sse9\" is not a kernel"},
      {"bench --set model.n_head=3", "model.n_embd"},
      {"bench --precision bf16 --only gemm", "run.precision \"bf16\" with run.device \"cpu\""},
  };
  for (const Case& c : cases) {
    const auto r = run(c.args);
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << "\n" << r.output;
  }
}

}  // namespace
