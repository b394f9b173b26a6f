// Whole-model tests: finite-difference gradient check in double precision,
// inference vs training forward, float vs double, padding rows, bad tokens.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <tuple>

#include "backend/backend.h"
#include "core/check.h"
#include "config/attention.h"
#include "config/layer_plan.h"
#include "model/gpt.h"
#include "train/optimizer.h"
#include "util/gradcheck.h"
#include "util/tiny_model.h"

namespace gpt {
namespace {

ModelConfig tiny_config(const std::string& position) { return test::tiny_model_config(position); }

std::vector<int32_t> tokens_for(int n, uint64_t seed, int vocab) {
  std::vector<int32_t> t(n);
  uint64_t x = seed;
  for (auto& v : t) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<int32_t>((x >> 33) % vocab);
  }
  return t;
}

AttentionSpec softmax_spec(int context) {
  AttentionSpec s;
  s.trained_context = context;
  return s;
}

// (position encoding, attention preset)
class ModelGradcheck : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

// The whole model's gradient against five-point finite differences, per
// parameter tensor. T = cfg.context, B = 2.
// h: the finite-difference step (0: the preset's, see below).
// adjust (may be null) edits the perturbed parameters before the check.
void check_model_gradient(const ModelConfig& cfg, const AttentionConfig& ac, const ContextConfig& cc,
                          const std::string& label, double h = 0,
                          const std::function<void(std::vector<double>&, const ParamLayout&)>& adjust = nullptr,
                          const std::vector<int32_t>& positions = {}, const std::vector<int32_t>& doc = {}) {
  const std::string& preset = ac.preset;
  auto be = make_cpu_backend<double>();
  GPT<double> model(cfg, resolve_attention(ac, cfg, cc), *be);
  model.init(7);
  // Non-trivial LayerNorm parameters and biases, so their gradients are tested
  // in a general position rather than at the initial ones/zeros.
  std::vector<double> params = model.get_params();
  const auto noise = test::random_vector(params.size(), 11, -0.1, 0.1);
  const ParamSpec& wte = model.layout().find("wte");
  const size_t real_wte = static_cast<size_t>(cfg.vocab_size) * cfg.n_embd;
  for (size_t i = 0; i < params.size(); ++i)
    if (i < wte.offset + real_wte || i >= wte.offset + wte.numel()) params[i] += noise[i];
  if (adjust) adjust(params, model.layout());
  model.set_params(params);

  const int B = 2, T = cfg.context;
  const auto tokens = tokens_for(B * T + 1, 3, cfg.vocab_size);
  std::vector<int32_t> in(tokens.begin(), tokens.begin() + B * T), tg(tokens.begin() + 1, tokens.end());

  const TokenLayout ids{positions.empty() ? nullptr : positions.data(), doc.empty() ? nullptr : doc.data()};
  model.zero_grad();
  model.forward(in.data(), tg.data(), B, T, ids);
  model.backward();
  std::vector<double> analytic(model.num_params());
  be->download(analytic.data(), model.grads(), analytic.size());

  auto loss = [&] {
    model.set_params(params);
    return model.forward(in.data(), tg.data(), B, T, ids);
  };
  // Re-weighting with p = 15 has large high derivatives: the five-point
  // stencil's O(h^4) truncation error at h = 1e-3 reaches 1e-3 relative (and
  // falls by 3^4 with each third of h, as it should for a correct gradient),
  // so lssar and cosine use h = 5e-5. The others keep 1e-3, where rounding noise
  // (~1e-16·loss/h) stays below the floor on entries that are exactly zero
  // (softmax ignores the key bias).
  if (h <= 0) h = preset == "lssar" || preset == "cosine" ? 5e-5 : 1e-3;
  const std::vector<double> numeric = test::numeric_gradient(params, loss, h);

  // Report per tensor, assert on each.
  test::expect_model_gradient(label, model.layout(), analytic, numeric);
  // The zero padding rows of the tied embedding get no gradient.
  for (size_t i = wte.offset + real_wte; i < wte.offset + wte.numel(); ++i) ASSERT_EQ(analytic[i], 0.0);
}

TEST_P(ModelGradcheck, WholeModelMatchesFiniteDifferences) {
  const auto& [position, preset] = GetParam();
  AttentionConfig ac;
  ac.preset = preset;
  // The kernel tests check cosine at the preset's s = 32; here, where every
  // parameter's finite difference goes through several layers, s = 10 keeps
  // the loss smooth enough for a clean five-point estimate.
  if (preset == "cosine") ac.cosine_scale = 10;
  // Softpick has kinks where a logit crosses 0 (relu(e^x − 1), |e^x − 1|), and
  // the small scores of a fresh model all sit near 0, where Σ|e^x − 1| is
  // small too: a stencil across a kink is no estimate of a derivative. A bias
  // of 1 keeps every logit on the positive side here; the kernel test checks
  // both sides on scores kept away from 0.
  if (preset == "softpick") ac.bias = 1.0;
  check_model_gradient(tiny_config(position), ac, ContextConfig{}, position + "," + preset);
}

// PoPE (model.position "pope") through the whole model: every parameter,
// the key phase biases δ included, set inside (−2π, 0) away from the clamp's
// ends (at init they sit on the end 0, where a stencil straddles the kink).
// lssar uses h = 2e-4: at the 5e-5 of the RoPE models the rounding noise of
// PoPE's larger scores reaches 1.2e-6 on qkvw (6e-7 at 2e-4, 1e-8 on δ).
TEST(ModelGradcheckPope, WholeModelMatchesFiniteDifferences) {
  for (const char* preset : {"softmax", "lssar"}) {
    AttentionConfig ac;
    ac.preset = preset;
    check_model_gradient(tiny_config("pope"), ac, ContextConfig{}, std::string("pope,") + preset,
                         std::string(preset) == "lssar" ? 2e-4 : 0,
                         [](std::vector<double>& p, const ParamLayout& layout) {
                           const ParamSpec& d = layout.find("attnpope");
                           const auto v = test::random_vector(d.numel(), 21, -6.0, -0.3);
                           for (size_t i = 0; i < d.numel(); ++i) p[d.offset + i] = v[i];
                         });
  }
}

// HeadScale (context.head_scale; Wang et al. 2024) through the whole model:
// the per-head temperatures τ_h (attnscale) set away from 1, on NoPE (the
// authors' setting) and RoPE with softmax, and NoPE with lssar.
TEST(ModelGradcheck, HeadScale) {
  ContextConfig cc;
  cc.head_scale = 1;
  for (const auto& [position, preset] : {std::pair{"none", "softmax"}, {"rope", "softmax"}, {"none", "lssar"}}) {
    AttentionConfig ac;
    ac.preset = preset;
    check_model_gradient(tiny_config(position), ac, cc, std::string(position) + "," + preset + ",headscale",
                         std::string(preset) == "lssar" ? 5e-5 : 0,
                         [](std::vector<double>& p, const ParamLayout& layout) {
                           const ParamSpec& t = layout.find("attnscale");
                           const auto v = test::random_vector(t.numel(), 23, 0.7, 1.8);
                           for (size_t i = 0; i < t.numel(); ++i) p[t.offset + i] = v[i];
                         });
  }
}

// Keeps every hidden unit of FIRE's blocks at least 0.02 from its ReLU kink
// (w1·u + b1) at every pair of the T-token table, with query positions and
// distances from the ids (B rows of T; empty: 0..T−1), so that the
// finite-difference stencil never crosses one.
std::function<void(std::vector<double>&, const ParamLayout&)> fire_off_kinks(const ModelConfig& cfg,
                                                                             const std::vector<int32_t>& ids = {}) {
  return [cfg, ids](std::vector<double>& p, const ParamLayout& layout) {
    const int NH = cfg.n_head, n = attn::fire::count(NH), T = cfg.context;
    const double L0 = attn::fire::threshold0(cfg.context);
    const int rows = ids.empty() ? 1 : static_cast<int>(ids.size()) / T;
    auto id = [&](int r, int t) { return ids.empty() ? t : ids[r * T + t]; };
    for (int l = 0; l < cfg.n_layer; ++l) {
      double* blk = p.data() + layout.find("attnfire").offset + static_cast<size_t>(l) * n;
      const double c = std::abs(blk[attn::fire::c(NH)]), L = std::abs(blk[attn::fire::m(NH)] * L0);
      for (int k = 0; k < attn::fire::kWidth; ++k)
        for (int tries = 0; tries < 400; ++tries) {
          double closest = 1e9;
          for (int r = 0; r < rows; ++r)
            for (int i0 = 0; i0 < T; ++i0)
              for (int j = 0; j <= i0; ++j) {
                const int pi = id(r, i0), d = pi - id(r, j);
                const double u = std::log(c * d + 1) / (std::log(c * std::max<double>(pi, L) + 1) + 1e-6);
                closest = std::min(closest, std::abs(blk[k] * u + blk[attn::fire::kWidth + k]));
              }
          if (closest >= 0.02) break;
          blk[attn::fire::kWidth + k] += 0.011;
        }
    }
  };
}

// Training-time position ids (PoSE-like jumps; train/position_ids.h) through
// the whole model: RoPE with softmax and lssar, PoPE with softmax.
TEST(ModelGradcheck, PositionIds) {
  const std::vector<int32_t> ids = {0, 1, 9, 10, 11, 0, 6, 7, 8, 40};  // B = 2, T = 5
  for (const char* preset : {"softmax", "lssar"}) {
    AttentionConfig ac;
    ac.preset = preset;
    // lssar at h = 2e-4, as PoPE's check: at the RoPE models' 5e-5 the rounding noise of the
    // stencil reaches 1.5e-6 on fcb here (3e-7 at 2.5e-5, 1e-4 and 2e-4; qkvw 9e-8 at 2e-4).
    check_model_gradient(tiny_config("rope"), ac, ContextConfig{}, std::string("rope ids,") + preset,
                         std::string(preset) == "lssar" ? 2e-4 : 0, nullptr, ids);
  }
  // The distance biases read distances between ids (attn::position_table): ALiBi with softmax
  // and lssar, KERPLE (log and power) and FIRE without another encoding, as their papers run them.
  for (const char* preset : {"softmax", "lssar"}) {
    AttentionConfig ac;
    ac.preset = preset;
    check_model_gradient(tiny_config("alibi"), ac, ContextConfig{}, std::string("alibi ids,") + preset,
                         std::string(preset) == "lssar" ? 2e-4 : 0, nullptr, ids);
  }
  for (const char* bias : {"kerple_log", "kerple_power", "fire"}) {
    AttentionConfig ac;
    ac.position_bias = bias;
    const ModelConfig cfg = tiny_config("none");
    check_model_gradient(cfg, ac, ContextConfig{}, std::string("none ids,") + bias, 0,
                         std::string(bias) == "fire" ? fire_off_kinks(cfg, ids) : nullptr, ids);
  }
  {  // differential attention repeats each sequence's table over a head's two maps
    AttentionConfig ac;
    ac.position_bias = "kerple_log";
    ac.differential = "on";
    check_model_gradient(tiny_config("none"), ac, ContextConfig{}, "none ids,kerple_log+differential", 0, nullptr,
                         ids);
  }
  AttentionConfig ac;
  check_model_gradient(
      tiny_config("pope"), ac, ContextConfig{}, "pope ids,softmax", 0,
      [](std::vector<double>& p, const ParamLayout& layout) {
        const ParamSpec& d = layout.find("attnpope");
        const auto v = test::random_vector(d.numel(), 21, -6.0, -0.3);
        for (size_t i = 0; i < d.numel(); ++i) p[d.offset + i] = v[i];
      },
      ids);
}

// The document mask (train.document_mask) through the whole model, with
// and without position ids restarted per document, RoPE and PoPE.
TEST(ModelGradcheck, DocumentMask) {
  const std::vector<int32_t> doc = {0, 0, 2, 2, 2, 0, 1, 1, 1, 4};  // B = 2, T = 5
  const std::vector<int32_t> restarted = {0, 1, 0, 1, 2, 0, 0, 1, 2, 0};
  for (const char* preset : {"softmax", "lssar"}) {
    AttentionConfig ac;
    ac.preset = preset;
    check_model_gradient(tiny_config("rope"), ac, ContextConfig{}, std::string("rope doc,") + preset,
                         std::string(preset) == "lssar" ? 2e-4 : 0, nullptr, {}, doc);
    check_model_gradient(tiny_config("rope"), ac, ContextConfig{}, std::string("rope doc restart,") + preset,
                         std::string(preset) == "lssar" ? 2e-4 : 0, nullptr, restarted, doc);
  }
  AttentionConfig ac;
  ac.preset = "stick_breaking";
  check_model_gradient(tiny_config("learned"), ac, ContextConfig{}, "learned doc,stick_breaking", 0, nullptr, {}, doc);
}

// One document per sequence is the plain model bit for bit; a document
// mask changes the loss; a malformed one is refused.
TEST(Model, DocumentMaskOfOneDocumentIsThePlainModel) {
  const ModelConfig cfg = tiny_config("rope");
  auto be = make_cpu_backend<float>();
  GPT<float> model(cfg, softmax_spec(cfg.context), *be);
  model.init(5);
  const int B = 2, T = cfg.context;
  const auto tokens = tokens_for(B * T + 1, 9, cfg.vocab_size);
  const std::vector<int32_t> in(tokens.begin(), tokens.begin() + B * T), tg(tokens.begin() + 1, tokens.end());
  const std::vector<int32_t> one(B * T, 0), split = {0, 0, 2, 2, 2, 0, 1, 1, 1, 1};
  const double l0 = model.forward(in.data(), tg.data(), B, T);
  EXPECT_EQ(model.forward(in.data(), tg.data(), B, T, TokenLayout{nullptr, one.data()}), l0);
  EXPECT_NE(model.forward(in.data(), tg.data(), B, T, TokenLayout{nullptr, split.data()}), l0);
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{0, 0, 1, 1, 1, 0, 0, 0, 0, 5}, std::vector<int32_t>{0, 0, 0, 3, 2, 0, 0, 0, 0, 0}}) {
    try {
      model.forward(in.data(), tg.data(), B, T, TokenLayout{nullptr, bad.data()});
      FAIL() << "a malformed document mask must be refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("document mask"), std::string::npos) << e.what();
    }
  }
}

// A float model's loss and gradients on two sequences without ids, with
// ids 0..T−1 and with ids jumping by 50 after the second token.
struct IdRuns {
  double none, plain, jumps;
  std::vector<float> g_none, g_plain;
};
IdRuns run_with_ids(const ModelConfig& cfg, const AttentionSpec& spec) {
  auto be = make_cpu_backend<float>();
  GPT<float> model(cfg, spec, *be);
  model.init(5);
  const int B = 2, T = cfg.context;
  const auto tokens = tokens_for(B * T + 1, 9, cfg.vocab_size);
  const std::vector<int32_t> in(tokens.begin(), tokens.begin() + B * T), tg(tokens.begin() + 1, tokens.end());
  std::vector<int32_t> plain(B * T), jumps(B * T);
  for (int i = 0; i < B * T; ++i) plain[i] = i % T, jumps[i] = i % T + (i % T >= 2 ? 50 : 0);
  auto run = [&](const int32_t* pos, std::vector<float>* grads) {
    model.zero_grad();
    const double loss = model.forward(in.data(), tg.data(), B, T, TokenLayout{pos});
    model.backward();
    grads->resize(model.num_params());
    be->download(grads->data(), model.grads(), grads->size());
    return loss;
  };
  IdRuns r;
  std::vector<float> g_jumps;
  r.none = run(nullptr, &r.g_none);
  r.plain = run(plain.data(), &r.g_plain);
  r.jumps = run(jumps.data(), &g_jumps);
  return r;
}

// Ids 0..T-1 are the plain model bit for bit (loss and every gradient);
// other ids change the loss; a model whose encoding the ids cannot reach
// refuses them, naming why.
TEST(Model, PositionIdsOfTheIndexAreThePlainModel) {
  for (const char* position : {"rope", "pope"}) {
    const ModelConfig cfg = tiny_config(position);
    const IdRuns r = run_with_ids(cfg, softmax_spec(cfg.context));
    EXPECT_EQ(r.none, r.plain) << position;
    EXPECT_EQ(r.g_none, r.g_plain) << position;
    EXPECT_NE(r.none, r.jumps) << position << ": the ids must reach the position encoding";
  }
  // The distance biases (attn::position_table) under ids 0..T−1: the same
  // biases read from a table, so the same loss bit for bit (ALiBi's slopes are
  // powers of two at 2 heads); KERPLE's and FIRE's parameter gradients are
  // summed in another order (per pair in double), the others' identical.
  for (const std::string bias : {"alibi", "kerple_log", "fire", "alibi+differential"}) {
    AttentionConfig ac;
    if (bias == "kerple_log" || bias == "fire") ac.position_bias = bias;
    if (bias == "alibi+differential") ac.differential = "on";
    const ModelConfig cfg = tiny_config(bias.starts_with("alibi") ? "alibi" : "none");
    const IdRuns r = run_with_ids(cfg, resolve_attention(ac, cfg));
    EXPECT_EQ(r.none, r.plain) << bias;
    float largest = 0, diff = 0;
    for (size_t i = 0; i < r.g_none.size(); ++i) {
      largest = std::max(largest, std::abs(r.g_none[i]));
      diff = std::max(diff, std::abs(r.g_none[i] - r.g_plain[i]));
    }
    EXPECT_LE(diff, 1e-5f * largest) << bias;
    EXPECT_NE(r.none, r.jumps) << bias << ": the ids must reach the distance bias";
  }
  for (const char* position : {"learned", "none"}) {
    const ModelConfig cfg = tiny_config(position);
    auto be = make_cpu_backend<float>();
    AttentionConfig ac;
    GPT<float> model(cfg, resolve_attention(ac, cfg), *be);
    model.init(5);
    const std::vector<int32_t> in(5, 1), ids = {0, 3, 4, 8, 9};
    try {
      model.forward(in.data(), in.data(), 1, 5, TokenLayout{ids.data()});
      FAIL() << position << " must refuse position ids";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("position ids"), std::string::npos) << e.what();
    }
  }
}

// KERPLE's learned biases through the whole model, as the paper runs them
// (no other position encoding): their raw parameters (attnkerple) are one of
// the tensors checked.
TEST(ModelGradcheck, KerpleBiasesWithoutPositionEncoding) {
  for (const char* bias : {"kerple_log", "kerple_power"}) {
    AttentionConfig ac;
    ac.preset = "softmax";
    ac.position_bias = bias;
    const ModelConfig cfg = tiny_config("none");
    auto be = make_cpu_backend<double>();
    GPT<double> probe(cfg, resolve_attention(ac, cfg), *be);
    ASSERT_TRUE(probe.layout().has("attnkerple")) << bias;
    EXPECT_EQ(probe.layout().find("attnkerple").numel(), static_cast<size_t>(cfg.n_layer) * cfg.n_head * 2);
    check_model_gradient(cfg, ac, ContextConfig{}, std::string("none,") + bias);
  }
}

// FIRE through the whole model, without RoPE as the paper runs it: its
// block per layer (MLP, c, m: attnfire) is one of the tensors checked.
TEST(ModelGradcheck, FireWithoutPositionEncoding) {
  AttentionConfig ac;
  ac.preset = "softmax";
  ac.position_bias = "fire";
  const ModelConfig cfg = tiny_config("none");
  auto be = make_cpu_backend<double>();
  GPT<double> probe(cfg, resolve_attention(ac, cfg), *be);
  ASSERT_TRUE(probe.layout().has("attnfire"));
  EXPECT_EQ(probe.layout().find("attnfire").numel(), static_cast<size_t>(cfg.n_layer) * attn::fire::count(cfg.n_head));
  check_model_gradient(cfg, ac, ContextConfig{}, "none,fire", 0, fire_off_kinks(cfg));
}

// The Forgetting Transformer's gate through the whole model (gate projection
// and bias, through the prefix sums and the attention bias), without RoPE as
// the paper runs it and with RoPE.
TEST(ModelGradcheck, ForgetGate) {
  for (const char* pos : {"none", "rope"}) {
    AttentionConfig ac;
    ac.preset = "softmax";
    ac.position_bias = "forget";
    const ModelConfig cfg = tiny_config(pos);
    auto be = make_cpu_backend<double>();
    GPT<double> probe(cfg, resolve_attention(ac, cfg), *be);
    ASSERT_TRUE(probe.layout().has("fgatew") && probe.layout().has("fgateb")) << pos;
    check_model_gradient(cfg, ac, ContextConfig{}, std::string(pos) + ",forget");
  }
}

// Differential attention through the whole model (attn::diff: its λ vectors
// attnlambda and gain attnsubln among the tensors checked): RoPE on each half
// of q and k, and the sink, KERPLE, ALiBi, ssmax, the forget gate and FIRE
// (their per-head parameters and inputs shared by a head's two maps), and
// stick-breaking maps.
TEST(ModelGradcheck, Differential) {
  struct Variant {
    const char *position, *preset, *bias;
  };
  for (const Variant& v :
       {Variant{"rope", "softmax", "none"}, Variant{"none", "sink", "kerple_log"}, Variant{"alibi", "ssmax", "none"},
        Variant{"none", "softmax", "forget"}, Variant{"none", "stick_breaking", "fire"}}) {
    AttentionConfig ac;
    ac.preset = v.preset;
    ac.position_bias = v.bias;
    ac.differential = "on";
    const ModelConfig cfg = tiny_config(v.position);
    auto be = make_cpu_backend<double>();
    GPT<double> probe(cfg, resolve_attention(ac, cfg), *be);
    ASSERT_TRUE(probe.layout().has("attnlambda") && probe.layout().has("attnsubln"));
    EXPECT_EQ(probe.layout().find("attnlambda").numel(), 2u * 2 * cfg.n_embd / cfg.n_head);
    check_model_gradient(cfg, ac, ContextConfig{},
                         std::string(v.position) + "," + v.preset + "+" + v.bias + "+differential");
  }
}

// p-RoPE (model.p_rope) through the whole model: the truncated pairs pass
// q and k through unrotated, in the forward and in RoPE's backward; alone,
// with partial RoPE and with YaRN's exact ramp past the training length.
TEST(ModelGradcheck, PRope) {
  for (double keep : {0.5, 0.75}) {
    ModelConfig cfg = tiny_config("rope");
    cfg.n_embd = 16;  // heads of 8: 4 pairs, 2 or 3 of them turning
    cfg.p_rope = keep;
    check_model_gradient(cfg, AttentionConfig{}, ContextConfig{}, "rope,p_rope " + std::to_string(keep));
  }
  ModelConfig cfg = tiny_config("rope");
  cfg.n_embd = 16;
  cfg.p_rope = 0.5;
  cfg.context = 3;  // the check runs at T = context; YaRN acts past it only, so a factor fixed above 1
  ContextConfig cc;
  cc.rope_scaling = "yarn";
  cc.factor = 4;
  cc.yarn_truncate = 0;
  check_model_gradient(cfg, AttentionConfig{}, cc, "rope,p_rope 0.5,yarn exact");
}

// Gated attention's output gate through the whole model (W_g, b_g, and
// through the gate to the attention and ln1), on softmax and on the sink.
TEST(ModelGradcheck, OutputGate) {
  for (const char* preset : {"softmax", "sink"}) {
    AttentionConfig ac;
    ac.preset = preset;
    ac.output_gate = "sigmoid";
    const ModelConfig cfg = tiny_config("rope");
    auto be = make_cpu_backend<double>();
    GPT<double> probe(cfg, resolve_attention(ac, cfg), *be);
    ASSERT_TRUE(probe.layout().has("ogatew") && probe.layout().has("ogateb")) << preset;
    check_model_gradient(cfg, ac, ContextConfig{}, std::string("rope,") + preset + "+gate");
  }
}

// The block options (docs/blocks.md) through the whole model: RMSNorm,
// SwiGLU and ReLU² MLPs, biases none or qkv only, an untied head and the
// parallel residual, in combinations that touch every path; each with the
// parameter tensors its options call for.
TEST(ModelGradcheck, BlockOptions) {
  struct Case {
    const char* label;
    std::function<void(ModelConfig&)> set;
    std::vector<std::string> present, absent;
    double h = 0;  // the finite-difference step (0: check_model_gradient's)
  };
  const std::vector<Case> cases = {
      {"rmsnorm,swiglu,bias none,untied",
       [](ModelConfig& m) {
         m.norm = "rmsnorm";
         m.norm_eps = 1e-6;
         m.mlp = "swiglu";
         m.mlp_hidden = 6;
         m.bias = "none";
         m.head = "untied";
       },
       {"lmhead"},
       {"ln1b", "ln2b", "lnfb", "qkvb", "attprojb", "fcb", "fcprojb"}},
      {"layernorm,relu2,bias qkv,parallel",
       [](ModelConfig& m) {
         m.mlp = "relu2";
         m.bias = "qkv";
         m.residual = "parallel";
       },
       {"ln1b", "qkvb"},
       {"attprojb", "fcb", "fcprojb", "lmhead"},
       // relu² has a kink in its second derivative at 0: a stencil of ±2h
       // that straddles it is off by O(h²), so a smaller step.
       1e-5},
      {"rmsnorm,gelu,parallel,untied",
       [](ModelConfig& m) {
         m.norm = "rmsnorm";
         m.mlp_hidden = 12;
         m.residual = "parallel";
         m.head = "untied";
       },
       {"lmhead", "fcb"},
       {"ln1b", "lnfb"}},
      {"interleaved rope,qk_norm rms,gelu_erf",
       [](ModelConfig& m) {
         m.rope_pairing = "interleaved";
         m.qk_norm = "rms";
         m.mlp = "gelu_erf";
       },
       {"qnormw", "knormw"},
       {}},
  };
  for (const Case& c : cases) {
    ModelConfig cfg = tiny_config("rope");
    c.set(cfg);
    auto be = make_cpu_backend<double>();
    GPT<double> probe(cfg, resolve_attention(AttentionConfig{}, cfg), *be);
    for (const auto& t : c.present) EXPECT_TRUE(probe.layout().has(t)) << c.label << ": " << t;
    for (const auto& t : c.absent) EXPECT_FALSE(probe.layout().has(t)) << c.label << ": " << t;
    const int FI = cfg.mlp == "swiglu" ? 2 * cfg.mlp_width() : cfg.mlp_width();
    EXPECT_EQ(probe.layout().find("fcw").shape, (Shape{cfg.n_layer, FI, cfg.n_embd})) << c.label;
    EXPECT_EQ(probe.layout().find("fcprojw").shape, (Shape{cfg.n_layer, cfg.n_embd, cfg.mlp_width()})) << c.label;
    check_model_gradient(cfg, AttentionConfig{}, ContextConfig{}, c.label, c.h);
  }
}

// Grouped-query attention through the whole model: the gradients of the
// grouped qkv projection, with learned per-head parameters (ssmax's scales,
// sinks: per query head) and on a differential model, against finite
// differences; and the model against the multi-head model whose key and value
// rows of each query head are copies of its group's (Ainslie et al. 2023's
// definition, and what a checkpoint converted by repeating heads computes).
TEST(ModelGradcheck, GroupedQueryAttention) {
  for (const char* preset : {"softmax", "ssmax", "sink"}) {
    ModelConfig cfg = tiny_config("rope");
    cfg.n_kv_head = 1;
    AttentionConfig ac;
    ac.preset = preset;
    auto be = make_cpu_backend<double>();
    GPT<double> probe(cfg, resolve_attention(ac, cfg), *be);
    EXPECT_EQ(probe.layout().find("qkvw").shape, (Shape{cfg.n_layer, cfg.n_embd + 2 * cfg.n_embd / 2, cfg.n_embd}));
    check_model_gradient(cfg, ac, ContextConfig{}, std::string("gqa 2/1,") + preset);
  }
  ModelConfig diff = tiny_config("rope");
  diff.n_kv_head = 1;
  AttentionConfig dac;
  dac.differential = "on";
  check_model_gradient(diff, dac, ContextConfig{}, "gqa 2/1,differential");
}

// QK-norm through the whole model (rms with its gains, l2 without), alone,
// with grouped-query attention and the learned ssmax scales, and with the
// log-n scale (the stage-2 scales act on the normalised logits).
TEST(ModelGradcheck, QkNorm) {
  for (const char* kind : {"rms", "l2", "rms_full"})
    for (const char* preset : {"softmax", "ssmax", "logn"}) {
      ModelConfig cfg = tiny_config("rope");
      cfg.qk_norm = kind;
      cfg.norm_eps = 1e-6;
      const bool per_head = std::string(kind) != "rms_full";  // OLMo 2's form: the whole projection, no GQA
      if (std::string(preset) == "ssmax" && per_head) cfg.n_kv_head = 1;
      // The learned logit scale per head with the stage-2 scales (softmax: without it).
      if (std::string(preset) != "softmax" && per_head) cfg.qk_norm_scale = "learned";
      AttentionConfig ac;
      ac.preset = preset;
      auto be = make_cpu_backend<double>();
      GPT<double> probe(cfg, resolve_attention(ac, cfg), *be);
      EXPECT_EQ(probe.layout().has("qnormw"), std::string(kind) != "l2");
      EXPECT_EQ(probe.layout().has("knormw"), std::string(kind) != "l2");
      if (probe.layout().has("qnormw")) {
        EXPECT_EQ(probe.layout().find("qnormw").shape.back(), per_head ? cfg.n_embd / cfg.n_head : cfg.n_embd);
      }
      EXPECT_EQ(probe.layout().has("qkscale"), cfg.qk_norm_scale == "learned");
      check_model_gradient(cfg, ac, ContextConfig{}, std::string("qk_norm ") + kind + "," + preset);
    }
}

// Heads of model.head_dim channels other than n_embd / n_head (Qwen3-0.6B:
// 16 heads of 128 in 1024): the attention is n_head·D wide, the qkv
// projection (A + 2·NKV·D, C), the output projection (C, A), the output
// gate (A, C); through the whole model against finite differences, wider and
// narrower than C / H, with grouped keys, QK-norm, the output gate,
// differential attention and a distance remapping.
TEST(ModelGradcheck, HeadWidthApartFromResidualWidth) {
  struct Case {
    const char* label;
    int head_dim;
    std::function<void(ModelConfig&, AttentionConfig&, ContextConfig&)> set;
  };
  const std::vector<Case> cases = {
      {"wider, rope, lssar", 6, [](ModelConfig&, AttentionConfig& a, ContextConfig&) { a.preset = "lssar"; }},
      {"narrower, rope", 2, [](ModelConfig&, AttentionConfig&, ContextConfig&) {}},
      {"wider, gqa, qk_norm rms, ssmax", 6,
       [](ModelConfig& m, AttentionConfig& a, ContextConfig&) {
         m.n_kv_head = 1;
         m.qk_norm = "rms";
         m.norm_eps = 1e-6;
         a.preset = "ssmax";
       }},
      {"wider, qk_norm rms_full, output gate", 6,
       [](ModelConfig& m, AttentionConfig& a, ContextConfig&) {
         m.qk_norm = "rms_full";
         m.norm_eps = 1e-6;
         a.output_gate = "sigmoid";
       }},
      {"wider, differential", 8, [](ModelConfig&, AttentionConfig& a, ContextConfig&) { a.differential = "on"; }},
      {"narrower, rerope", 2,
       [](ModelConfig&, AttentionConfig&, ContextConfig& c) {
         c.remap = "rerope";
         c.remap_window = 2;
       }},
  };
  for (const Case& c : cases) {
    ModelConfig cfg = tiny_config("rope");
    cfg.head_dim = c.head_dim;
    AttentionConfig ac;
    ContextConfig cc;
    c.set(cfg, ac, cc);
    const int64_t L = cfg.n_layer, C = cfg.n_embd, D = c.head_dim, A = cfg.n_head * D, KV = cfg.kv_heads() * D;
    auto be = make_cpu_backend<double>();
    GPT<double> probe(cfg, resolve_attention(ac, cfg, cc), *be);
    EXPECT_EQ(probe.layout().find("qkvw").shape, (Shape{L, A + 2 * KV, C})) << c.label;
    EXPECT_EQ(probe.layout().find("qkvw").row_blocks, (std::vector<int64_t>{A, KV, KV})) << c.label;
    EXPECT_EQ(probe.layout().find("attprojw").shape, (Shape{L, C, A})) << c.label;
    if (ac.output_gate == "sigmoid") { EXPECT_EQ(probe.layout().find("ogatew").shape, (Shape{L, A, C})) << c.label; }
    if (cfg.qk_norm == "rms") { EXPECT_EQ(probe.layout().find("qnormw").shape, (Shape{L, D})) << c.label; }
    if (cfg.qk_norm == "rms_full") { EXPECT_EQ(probe.layout().find("qnormw").shape, (Shape{L, A})) << c.label; }
    if (ac.differential == "on") { EXPECT_EQ(probe.layout().find("attnsubln").shape, (Shape{L, D})) << c.label; }
    check_model_gradient(cfg, ac, cc, std::string("head_dim ") + c.label);
  }
}

TEST(Model, GroupedQueryAttentionIsMultiHeadWithRepeatedKeyValueHeads) {
  ModelConfig g = tiny_config("rope");
  g.n_head = 4;
  g.n_embd = 16;
  g.n_kv_head = 2;
  ModelConfig m = g;
  m.n_kv_head = 0;
  auto be = make_cpu_backend<double>();
  GPT<double> mg(g, resolve_attention(AttentionConfig{}, g), *be), mm(m, resolve_attention(AttentionConfig{}, m), *be);
  mg.init(3);
  const std::vector<double> pg = mg.get_params();
  std::vector<double> pm(mm.num_params(), 0.0);
  const int C = g.n_embd, D = C / g.n_head, group = g.n_head / g.n_kv_head, W = C + 2 * g.n_kv_head * D;
  for (const ParamSpec& s : mm.layout().specs) {
    const ParamSpec& t = mg.layout().find(s.name);
    if (s.name != "qkvw" && s.name != "qkvb") {
      ASSERT_EQ(s.numel(), t.numel()) << s.name;
      std::copy(pg.begin() + t.offset, pg.begin() + t.offset + t.numel(), pm.begin() + s.offset);
      continue;
    }
    const int cols = s.name == "qkvw" ? C : 1;
    for (int l = 0; l < g.n_layer; ++l)
      for (int r = 0; r < 3 * C; ++r) {
        // Row r of the multi-head projection: q rows as they are, the k and v
        // rows of head h from the grouped rows of its key/value head.
        const int part = r / C, h = (r % C) / D, d = r % D;
        const int src = part == 0 ? r : C + (part - 1) * g.n_kv_head * D + (h / group) * D + d;
        for (int c = 0; c < cols; ++c)
          pm[s.offset + (static_cast<size_t>(l) * 3 * C + r) * cols + c] =
              pg[t.offset + (static_cast<size_t>(l) * W + src) * cols + c];
      }
  }
  mm.set_params(pm);
  const auto tokens = tokens_for(2 * g.context + 1, 4, g.vocab_size);
  std::vector<int32_t> in(tokens.begin(), tokens.end() - 1), tg(tokens.begin() + 1, tokens.end());
  EXPECT_NEAR(mg.forward(in.data(), tg.data(), 2, g.context), mm.forward(in.data(), tg.data(), 2, g.context), 1e-12);
}

// The parallel residual is x + attn(ln1 x) + mlp(ln2 x): with the attention
// branch's output projection zeroed, the block is x + mlp(ln2 x) either way,
// so sequential and parallel models give the same loss; with it non-zero they
// differ.
TEST(Model, ParallelResidualFeedsBothBranchesTheBlockInput) {
  ModelConfig seq = tiny_config("rope"), par = seq;
  par.residual = "parallel";
  auto be = make_cpu_backend<double>();
  GPT<double> ms(seq, resolve_attention(AttentionConfig{}, seq), *be),
      mp(par, resolve_attention(AttentionConfig{}, par), *be);
  ms.init(5);
  std::vector<double> params = ms.get_params();
  const auto tokens = tokens_for(2 * seq.context + 1, 9, seq.vocab_size);
  std::vector<int32_t> in(tokens.begin(), tokens.end() - 1), tg(tokens.begin() + 1, tokens.end());
  mp.set_params(params);
  const double differ_s = ms.forward(in.data(), tg.data(), 2, seq.context);
  const double differ_p = mp.forward(in.data(), tg.data(), 2, seq.context);
  EXPECT_GT(std::abs(differ_s - differ_p), 1e-6);
  for (const char* t : {"attprojw", "attprojb"}) {
    const ParamSpec& s = ms.layout().find(t);
    std::fill(params.begin() + s.offset, params.begin() + s.offset + s.numel(), 0.0);
  }
  ms.set_params(params);
  mp.set_params(params);
  EXPECT_NEAR(ms.forward(in.data(), tg.data(), 2, seq.context), mp.forward(in.data(), tg.data(), 2, seq.context),
              1e-13);
}

// The logit soft-cap through the whole model, at c = 0.5, where it bends
// the logits of this model (init_std 0.3 gives logits of order 1: the loss
// moves by more than 1e-3 against the uncapped model), with RoPE and
// softmax, with the learned scales of ssmax, and with stick-breaking and the
// forget gate (the cap's derivative reaches c's inputs too).
TEST(ModelGradcheck, LogitSoftcap) {
  struct V {
    const char* preset;
    const char* bias;
    const char* position;
  };
  for (const V& v : {V{"softmax", "none", "rope"}, V{"ssmax", "none", "rope"}, V{"stick_breaking", "forget", "none"}}) {
    AttentionConfig ac;
    ac.preset = v.preset;
    ac.position_bias = v.bias;
    const ModelConfig cfg = tiny_config(v.position);
    const auto tokens = tokens_for(2 * cfg.context + 1, 3, cfg.vocab_size);
    std::vector<int32_t> in(tokens.begin(), tokens.end() - 1), tg(tokens.begin() + 1, tokens.end());
    auto loss_with_cap = [&](double cap) {
      AttentionConfig a = ac;
      a.softcap = cap;
      auto be = make_cpu_backend<double>();
      GPT<double> model(cfg, resolve_attention(a, cfg), *be);
      model.init(7);
      return model.forward(in.data(), tg.data(), 2, cfg.context);
    };
    const double capped = loss_with_cap(0.5), plain = loss_with_cap(0.0);
    std::printf("[softcap] %s: loss %.6f capped at 0.5, %.6f without\n", v.preset, capped, plain);
    EXPECT_GT(std::abs(capped - plain), 1e-3) << v.preset << ": the cap should act at this scale";
    ac.softcap = 0.5;
    check_model_gradient(cfg, ac, ContextConfig{},
                         std::string(v.position) + "," + v.preset + "+" + v.bias + "+softcap");
  }
}

// A per-layer plan through the whole model: layer 0 RoPE with a sliding
// window, layer 1 NoPE with full attention, ssmax scales, the forget gate and
// the output gate (their tensors hold an unused slice for layer 0, whose
// gradient must be exactly zero, as finite differences find it).
TEST(ModelGradcheck, PerLayerPlan) {
  ModelConfig cfg = tiny_config("rope");
  cfg.layer_pattern = "LG";
  cfg.layer_kinds = nlohmann::json::parse(R"({"L": {"window": 3},
      "G": {"position": "none", "window": 0,
            "attention": {"preset": "ssmax", "position_bias": "forget", "output_gate": "sigmoid"}}})");
  auto be = make_cpu_backend<double>();
  GPT<double> probe(cfg, resolve_attention(AttentionConfig{}, cfg), *be);
  const auto& layers = probe.per_layer_attention();
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_TRUE(layers[0].rope && layers[0].spec.window == 3 && !layers[0].spec.forget());
  EXPECT_TRUE(!layers[1].rope && layers[1].spec.window == 0 && layers[1].spec.forget() && layers[1].spec.output_gate);
  for (const char* t : {"attnscale", "fgatew", "fgateb", "ogatew", "ogateb"}) ASSERT_TRUE(probe.layout().has(t)) << t;
  check_model_gradient(cfg, AttentionConfig{}, ContextConfig{}, "plan LG");
  // Inference in the training buffers runs every layer in slot 0, which
  // must then hold what any layer needs (here layer 1's gates).
  probe.init(2);
  const int B = 2, T = cfg.context;
  const auto t = tokens_for(B * T + 1, 4, cfg.vocab_size);
  std::vector<int32_t> in(t.begin(), t.begin() + B * T), tg(t.begin() + 1, t.end());
  const double mean = probe.forward(in.data(), tg.data(), B, T);
  std::vector<double> losses;
  probe.forward_losses(in.data(), tg.data(), B, T, losses);
  double sum = 0;
  for (double l : losses) sum += l;
  EXPECT_NEAR(sum / losses.size(), mean, 1e-12);
}

// Forward losses and gradients of a model with a plan, against the same
// parameters in a model without one.
void expect_same_model(const ModelConfig& a_cfg, const AttentionSpec& a_spec, const ModelConfig& b_cfg,
                       const AttentionSpec& b_spec, const char* what) {
  auto be = make_cpu_backend<double>();
  GPT<double> a(a_cfg, a_spec, *be), b(b_cfg, b_spec, *be);
  ASSERT_EQ(a.num_params(), b.num_params()) << what;
  a.init(3);
  b.set_params(a.get_params());
  const int B = 2, T = a_cfg.context;
  const auto t = tokens_for(B * T + 1, 5, a_cfg.vocab_size);
  std::vector<int32_t> in(t.begin(), t.begin() + B * T), tg(t.begin() + 1, t.end());
  std::vector<double> ga(a.num_params()), gb(b.num_params());
  for (GPT<double>* m : {&a, &b}) {
    m->zero_grad();
    m->forward(in.data(), tg.data(), B, T);
    m->backward();
  }
  be->download(ga.data(), a.grads(), ga.size());
  be->download(gb.data(), b.grads(), gb.size());
  EXPECT_EQ(ga, gb) << what;
  const auto longer = tokens_for(4 * T + 1, 8, a_cfg.vocab_size);
  std::vector<double> la, lb;
  a.forward_losses(longer.data(), longer.data() + 1, 1, 4 * T, la);
  b.forward_losses(longer.data(), longer.data() + 1, 1, 4 * T, lb);
  EXPECT_EQ(la, lb) << what;
}

// A plan whose every layer is one kind is the model that kind describes, bit
// for bit: an empty kind is the plain model, a NoPE kind is model.position
// none, a window kind is the context's mask window, an attention kind is that
// attention section.
TEST(Model, PlanOfOneKindIsThePlainModel) {
  const ModelConfig plain = tiny_config("rope");
  const AttentionSpec softmax = resolve_attention(AttentionConfig{}, plain);
  auto with_kind = [&](const char* kind) {
    ModelConfig m = plain;
    m.layer_pattern = "A";
    m.layer_kinds = {{"A", nlohmann::json::parse(kind)}};
    return m;
  };
  expect_same_model(with_kind("{}"), softmax, plain, softmax, "empty kind");
  const ModelConfig nope = tiny_config("none");
  expect_same_model(with_kind(R"({"position": "none"})"), softmax, nope, resolve_attention(AttentionConfig{}, nope),
                    "NoPE kind");
  ContextConfig window;
  window.mask = "window";
  window.window = 3;
  expect_same_model(with_kind(R"({"window": 3})"), softmax, plain, resolve_attention(AttentionConfig{}, plain, window),
                    "window kind");
  AttentionConfig lssar;
  lssar.preset = "lssar";
  expect_same_model(with_kind(R"({"attention": {"preset": "lssar"}})"), softmax, plain, resolve_attention(lssar, plain),
                    "attention kind");
  ModelConfig base500 = plain;  // a layer's RoPE base: the model with that base
  base500.rope_theta = 500;
  expect_same_model(with_kind(R"({"rope_theta": 500})"), softmax, base500,
                    resolve_attention(AttentionConfig{}, base500), "rope_theta kind");
}

// A kind's rope_theta changes its layers only (the other kind's base stays),
// and is refused without RoPE.
TEST(Model, PerLayerRopeBase) {
  ModelConfig m = tiny_config("rope");
  m.layer_pattern = "LG";
  m.layer_kinds = {{"L", nlohmann::json::object()}, {"G", {{"rope_theta", 1e6}}}};
  const AttentionSpec softmax = resolve_attention(AttentionConfig{}, m);
  auto be = make_cpu_backend<double>();
  GPT<double> model(m, softmax, *be);
  EXPECT_EQ(model.per_layer_attention()[0].spec.rope.theta, m.rope_theta);
  EXPECT_EQ(model.per_layer_attention()[1].spec.rope.theta, 1e6);
  ModelConfig learned = tiny_config("learned");
  learned.layer_pattern = "L";
  learned.layer_kinds = {{"L", {{"rope_theta", 1e6}}}};
  EXPECT_THROW(resolve_layer_plan(learned), Error);
  m.layer_kinds = {{"L", nlohmann::json::object()}, {"G", {{"rope_theta", -1}}}};
  EXPECT_THROW(resolve_layer_plan(m), Error);
}

// set_attention (evaluation-time variants) changes the run's attention and
// re-applies the kinds; it refuses what would change a layer's parameters.
TEST(Model, SetAttentionReappliesThePlan) {
  ModelConfig cfg = tiny_config("rope");
  cfg.layer_plan = "swan";
  cfg.n_layer = 4;
  auto be = make_cpu_backend<double>();
  GPT<double> model(cfg, resolve_attention(AttentionConfig{}, cfg), *be);
  ContextConfig yarn;
  yarn.rope_scaling = "yarn";
  model.set_attention(resolve_attention(AttentionConfig{}, cfg, yarn));
  const auto& layers = model.per_layer_attention();
  EXPECT_EQ(layers[0].spec.rope.scaling, RopeScaling::Yarn);
  EXPECT_EQ(layers[0].spec.window, 2);                        // the kind's window stays
  EXPECT_EQ(layers[3].spec.rope.scaling, RopeScaling::None);  // NoPE layer: nothing to rescale
  AttentionConfig ssmax;
  ssmax.preset = "ssmax";
  EXPECT_THROW(model.set_attention(resolve_attention(ssmax, cfg)), Error);
}

// The context-extension methods a model can be trained with (partial RoPE,
// window, sinks, the temperatures), through the whole model. T = 7 with a
// window of 3 (sinks 1 + 2) and F = 2, so every rule acts inside the
// training window.
struct ContextGradCase {
  const char* label;
  const char* position;
  const char* preset;
  double rope_fraction;
  void (*edit)(ContextConfig&);
  double h = 0;
};

std::vector<ContextGradCase> context_grad_cases() {
  return {
      {"rope f=0.5,window,llama4", "rope", "softmax", 0.5,
       [](ContextConfig& c) { c.mask = "window", c.window = 3, c.temperature = "llama4", c.temp_floor = 2; }},
      {"rope,lssar,sinks,keys", "rope", "lssar", 1.0,
       [](ContextConfig& c) { c.mask = "sinks", c.sinks = 1, c.window = 2, c.row_index = "keys"; },
       // Rounding noise (~1e-16·loss/h) dominates this case's estimate at
       // the lssar step of 5e-5: measured max error 8e-6 at h = 1e-5,
       // 3.9e-6 at 5e-5, 6.5e-7 at 2e-4 (falling with larger h, as noise does).
       2e-4},
      {"rope,ssmax,yarn factor 2", "rope", "ssmax", 1.0,
       [](ContextConfig& c) { c.rope_scaling = "yarn", c.factor = 2; }},
      {"alibi,window,yarn_temp", "alibi", "softmax", 1.0,
       [](ContextConfig& c) { c.mask = "window", c.window = 3, c.temperature = "yarn", c.factor = 3; }},
      // The distance remappings: the far copy of q and k and its RoPE backward.
      {"rope,rerope w=3", "rope", "softmax", 1.0, [](ContextConfig& c) { c.remap = "rerope", c.remap_window = 3; }},
      {"rope f=0.5,rerope leaky+yarn", "rope", "softmax", 0.5,
       [](ContextConfig& c) {
         c.remap = "rerope", c.remap_window = 2, c.rerope_kappa = 3, c.rope_scaling = "yarn", c.factor = 2;
       }},
      {"rope,self_extend", "rope", "softmax", 1.0,
       [](ContextConfig& c) { c.remap = "self_extend", c.remap_window = 2, c.group = 2; }},
      {"rope,string+llama3", "rope", "softmax", 1.0,
       [](ContextConfig& c) {
         c.remap = "string", c.remap_window = 3, c.remap_local = 1, c.rope_scaling = "llama3", c.factor = 2;
       }},
      {"rope,lambda", "rope", "softmax", 1.0, [](ContextConfig& c) { c.mask = "lambda", c.sinks = 1, c.window = 3; }},
      {"rope,streaming_llm", "rope", "softmax", 1.0,
       [](ContextConfig& c) { c.mask = "sinks", c.sinks = 1, c.window = 3, c.sink_positions = "cache"; }},
  };
}

class ModelContextGradcheck : public ::testing::TestWithParam<int> {};

TEST_P(ModelContextGradcheck, TrainableContextMethodsMatchFiniteDifferences) {
  const ContextGradCase c = context_grad_cases()[GetParam()];
  ModelConfig cfg = tiny_config(c.position);
  cfg.context = 7;
  cfg.n_embd = 16;  // head size 8: partial RoPE rotates 4 of 8 channels
  cfg.rope_fraction = c.rope_fraction;
  AttentionConfig ac;
  ac.preset = c.preset;
  ContextConfig cc;
  c.edit(cc);
  check_model_gradient(cfg, ac, cc, c.label, c.h);
}

INSTANTIATE_TEST_SUITE_P(ContextMethods, ModelContextGradcheck,
                         ::testing::Range(0, static_cast<int>(context_grad_cases().size())),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string name = context_grad_cases()[info.param].label;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

// A context-extension rule acts past the training length only: at 1x a
// model with any RoPE rule, and YaRN's temperature, gives the plain model's
// losses bit for bit; at 4x they differ.
TEST(Model, RopeRulesAreThePlainModelAtTheTrainingLength) {
  ModelConfig cfg = tiny_config("rope");
  cfg.n_embd = 16;
  auto be = make_cpu_backend<float>();
  GPT<float> plain(cfg, resolve_attention(AttentionConfig{}, cfg), *be);
  plain.init(3);
  const auto t = tokens_for(4 * cfg.context + 1, 5, cfg.vocab_size);
  std::vector<float> base1, base4, l1, l4;
  plain.forward_losses(t.data(), t.data() + 1, 1, cfg.context, base1);
  plain.forward_losses(t.data(), t.data() + 1, 1, 4 * cfg.context, base4);
  for (const char* rule : {"pi", "ntk", "dynamic_ntk", "yarn", "llama3"}) {
    ContextConfig cc;
    cc.rope_scaling = rule;
    GPT<float> m(cfg, resolve_attention(AttentionConfig{}, cfg, cc), *be);
    m.set_params(plain.get_params());
    m.forward_losses(t.data(), t.data() + 1, 1, cfg.context, l1);
    m.forward_losses(t.data(), t.data() + 1, 1, 4 * cfg.context, l4);
    EXPECT_EQ(l1, base1) << rule;
    EXPECT_NE(l4, base4) << rule;
  }
}

std::vector<std::pair<std::string, std::string>> model_cases() {
  std::vector<std::pair<std::string, std::string>> v;
  for (const char* pos : {"learned", "rope", "none", "alibi"}) v.emplace_back(pos, "softmax");
  for (const auto& p : kAttentionPresets)
    if (std::string(p.name) != "softmax") v.emplace_back("rope", p.name);
  v.emplace_back("alibi", "lssar");
  return v;
}

INSTANTIATE_TEST_SUITE_P(PositionsAndPresets, ModelGradcheck, ::testing::ValuesIn(model_cases()),
                         [](const ::testing::TestParamInfo<std::pair<std::string, std::string>>& i) {
                           return i.param.first + "_" + i.param.second;
                         });

TEST(Model, InferenceLossesEqualTrainingLosses) {
  ModelConfig cfg = tiny_config("rope");
  cfg.n_layer = 3;
  auto be = make_cpu_backend<double>();
  GPT<double> model(cfg, softmax_spec(cfg.context), *be);
  model.init(1);
  const int B = 3, T = 5;
  const auto t = tokens_for(B * T + 1, 9, cfg.vocab_size);
  std::vector<int32_t> in(t.begin(), t.begin() + B * T), tg(t.begin() + 1, t.end());
  const double mean = model.forward(in.data(), tg.data(), B, T);
  std::vector<double> losses;
  model.forward_losses(in.data(), tg.data(), B, T, losses);
  double sum = 0;
  for (double l : losses) sum += l;
  EXPECT_NEAR(sum / losses.size(), mean, 1e-12);
  // Longer than the training context is fine for rope.
  std::vector<int32_t> longer = tokens_for(4 * T, 2, cfg.vocab_size);
  model.forward_losses(longer.data(), longer.data(), 1, 4 * T, losses);
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
}

// Loss masks: targets of kIgnoreTarget leave the mean. forward() is the mean
// of the per-position losses of the scored targets (from forward_losses on
// the unmasked targets), and backward() its gradient (five-point finite
// differences in double); a batch with no scored target has loss 0 and a
// zero gradient.
TEST(Model, MaskedLossIsTheMeanOverScoredTargets) {
  const ModelConfig cfg = tiny_config("rope");
  auto be = make_cpu_backend<double>();
  GPT<double> model(cfg, softmax_spec(cfg.context), *be);
  model.init(3);
  const int B = 2, T = cfg.context;
  const auto t = tokens_for(B * T + 1, 5, cfg.vocab_size);
  std::vector<int32_t> in(t.begin(), t.begin() + B * T), tg(t.begin() + 1, t.end()), masked = tg;
  for (int i : {0, 1, 4, 6, 7, 9}) masked[i] = kIgnoreTarget;
  std::vector<double> losses;
  model.forward_losses(in.data(), tg.data(), B, T, losses);
  double sum = 0;
  int n = 0;
  for (int i = 0; i < B * T; ++i)
    if (masked[i] != kIgnoreTarget) sum += losses[i], ++n;
  ASSERT_EQ(n, 4);
  model.zero_grad();
  EXPECT_NEAR(model.forward(in.data(), masked.data(), B, T), sum / n, 1e-13);
  model.backward();
  std::vector<double> analytic(model.num_params());
  be->download(analytic.data(), model.grads(), analytic.size());
  std::vector<double> params = model.get_params();
  auto loss = [&] {
    model.set_params(params);
    return model.forward(in.data(), masked.data(), B, T);
  };
  const std::vector<double> numeric = test::numeric_gradient(params, loss, 1e-3);
  model.set_params(params);
  double largest = 0;
  for (double x : numeric) largest = std::max(largest, std::abs(x));
  const double err = test::max_rel_error(analytic, numeric, std::max(1e-5 * largest, 1e-6));
  std::printf("[gradcheck] model with a loss mask max_rel_err=%.2e\n", err);
  EXPECT_LT(err, 1e-6);
  // The gradient is not the unmasked one.
  model.zero_grad();
  model.forward(in.data(), tg.data(), B, T);
  model.backward();
  std::vector<double> plain(model.num_params());
  be->download(plain.data(), model.grads(), plain.size());
  EXPECT_GT(test::max_rel_error(plain, analytic, 1e-6), 1e-2);
  // Nothing scored.
  std::vector<int32_t> none(B * T, kIgnoreTarget);
  model.zero_grad();
  EXPECT_EQ(model.forward(in.data(), none.data(), B, T), 0.0);
  model.backward();
  be->download(analytic.data(), model.grads(), analytic.size());
  for (size_t i = 0; i < analytic.size(); ++i) ASSERT_EQ(analytic[i], 0.0) << i;
  // -1 is the only negative target allowed, and never an input.
  std::vector<int32_t> bad = tg;
  bad[3] = -2;
  EXPECT_THROW(model.forward(in.data(), bad.data(), B, T), Error);
  std::vector<int32_t> bad_in = in;
  bad_in[2] = kIgnoreTarget;
  EXPECT_THROW(model.forward(bad_in.data(), tg.data(), B, T), Error);
}

TEST(Model, FloatAgreesWithDouble) {
  const ModelConfig cfg = tiny_config("rope");
  auto bd = make_cpu_backend<double>();
  auto bf = make_cpu_backend<float>();
  GPT<double> md(cfg, softmax_spec(cfg.context), *bd);
  GPT<float> mf(cfg, softmax_spec(cfg.context), *bf);
  md.init(5);
  mf.init(5);
  const auto t = tokens_for(11, 4, cfg.vocab_size);
  const double ld = md.forward(t.data(), t.data() + 1, 2, 5);
  const double lf = mf.forward(t.data(), t.data() + 1, 2, 5);
  EXPECT_NEAR(ld, lf, 1e-5 * std::abs(ld));
}

// run.storage "bf16": bf16 activations and working parameters over float32
// master parameters, gradients and AdamW state.
TEST(Model, Bf16StorageTracksFloat32) {
  ModelConfig cfg = tiny_config("rope");
  cfg.n_embd = 16;
  auto bf = make_cpu_backend<float>();
  auto bb = make_bf16_backend(make_cpu_backend<float>());
  GPT<float> mf(cfg, softmax_spec(cfg.context), *bf);
  GPT<bf16> mb(cfg, softmax_spec(cfg.context), *bb);
  EXPECT_EQ(mb.storage_bytes(), 2u);
  mf.init(5);
  mb.init(5);
  // The master parameters are float32: the initialisation is not rounded.
  const std::vector<float> p0 = mb.get_params();
  EXPECT_EQ(p0, mf.get_params());
  size_t unrounded = 0;
  for (float x : p0) unrounded += round_to_bf16(x) != x;
  EXPECT_GT(unrounded, p0.size() / 2);

  const int B = 2, T = 5;
  const auto t = tokens_for(B * T + 1, 4, cfg.vocab_size);
  const double lf = mf.forward(t.data(), t.data() + 1, B, T), lb = mb.forward(t.data(), t.data() + 1, B, T);
  EXPECT_NEAR(lb, lf, 1e-2 * lf);
  EXPECT_NE(lb, lf);  // bf16 rounding did happen
  mf.zero_grad();
  mb.zero_grad();
  mf.backward();
  mb.backward();
  std::vector<float> gf(mf.num_params()), gb(mb.num_params());
  bf->download(gf.data(), mf.grads(), gf.size());
  bb->download(gb.data(), mb.grads(), gb.size());
  double dot = 0, nf = 0, nb = 0;
  for (size_t i = 0; i < gf.size(); ++i) {
    dot += double(gf[i]) * gb[i];
    nf += double(gf[i]) * gf[i];
    nb += double(gb[i]) * gb[i];
  }
  EXPECT_GT(dot / std::sqrt(nf * nb), 0.999);
  EXPECT_NEAR(std::sqrt(nb), std::sqrt(nf), 0.02 * std::sqrt(nf));

  // The working copy follows the master parameters, however they change.
  std::vector<float> half = p0;
  for (float& x : half) x *= 0.5f;
  mf.set_params(half);
  mb.set_params(half);
  const double hf = mf.forward(t.data(), t.data() + 1, B, T), hb = mb.forward(t.data(), t.data() + 1, B, T);
  EXPECT_NE(hb, lb);
  EXPECT_NEAR(hb, hf, 1e-2 * hf);

  // Training on one batch: both fit it, alike; the master parameters keep
  // float32 updates smaller than a bf16 step.
  TrainConfig tc;
  tc.lr = 1e-2;
  tc.weight_decay = 0.0;
  Optimizer<float> of(mf, tc), ob(mb, tc);
  double last_f = 0, last_b = 0;
  for (int step = 0; step < 30; ++step) {
    for (auto [m, o, last] : {std::tuple<Model<float>*, Optimizer<float>*, double*>{&mf, &of, &last_f},
                              std::tuple<Model<float>*, Optimizer<float>*, double*>{&mb, &ob, &last_b}}) {
      *last = m->forward(t.data(), t.data() + 1, B, T);
      m->zero_grad();
      m->backward();
      o->step(tc.lr);
    }
  }
  EXPECT_LT(last_b, 0.5 * hb);
  EXPECT_NEAR(last_b, last_f, 0.05 * last_f + 0.02);
  size_t still_unrounded = 0;
  for (float x : mb.get_params()) still_unrounded += round_to_bf16(x) != x;
  EXPECT_GT(still_unrounded, p0.size() / 2);
}

// bf16 storage in chunks (issue 19): the loss, every parameter gradient and
// the parameters after AdamW steps are bit for bit those of whole-tensor
// conversion, with learned positions or RoPE, softmax or ssmax (whose
// dhead_scale runs whole) or differential stick-breaking, for chunks down to
// one row.
TEST(Model, Bf16ChunkedConversionIsBitIdentical) {
  for (auto [position, preset] : {std::pair{"learned", "softmax"},
                                  {"rope", "lssar"},
                                  {"rope", "ssmax"},
                                  {"rope", "stick_breaking+diff"},
                                  {"rope", "softmax+layout"},
                                  {"pope", "softmax+layout"},
                                  {"alibi", "softmax+layout"}}) {
    ModelConfig cfg = tiny_config(position);
    // "+layout": position ids and a document mask that differ per sequence,
    // so a chunk of sequences must get its own rows of both (and, for ALiBi,
    // its own slice of the per-sequence bias table).
    const bool with_layout = std::string(preset) == "softmax+layout";
    const std::vector<int32_t> ids = {0, 1, 9, 10, 11, 0, 6, 7, 8, 40, 2, 3, 4, 30, 31},
                               docs = {0, 0, 2, 2, 2, 0, 1, 1, 1, 4, 0, 0, 0, 0, 0};
    const TokenLayout layout{with_layout ? ids.data() : nullptr, with_layout ? docs.data() : nullptr};
    cfg.n_embd = 16;
    AttentionConfig ac;
    ac.preset = preset;
    if (std::string(preset) == "stick_breaking+diff") {  // differential attention's ops (its backward runs whole)
      ac.preset = "stick_breaking";
      ac.differential = "on";
    }
    if (with_layout) ac.preset = "softmax";
    const AttentionSpec spec = resolve_attention(ac, cfg);
    const int B = 3, T = cfg.context;
    const auto t = tokens_for(B * T + 1, 9, cfg.vocab_size);
    struct Run {
      std::vector<double> losses;
      std::vector<float> grads, params;
    };
    auto run = [&](size_t chunk) {
      auto be = make_bf16_backend(make_cpu_backend<float>(), chunk);
      GPT<bf16> m(cfg, spec, *be);
      m.init(3);
      TrainConfig tc;
      tc.lr = 1e-2;
      Optimizer<float> opt(m, tc);
      Run r;
      for (int step = 0; step < 3; ++step) {
        r.losses.push_back(m.forward(t.data(), t.data() + 1, B, T, layout));
        m.zero_grad();
        m.backward();
        if (step == 0) {
          r.grads.resize(m.num_params());
          be->download(r.grads.data(), m.grads(), r.grads.size());
        }
        opt.step(tc.lr);
      }
      r.params = m.get_params();
      return r;
    };
    const Run whole = run(0);
    for (size_t chunk : {size_t(1), size_t(40), kBf16ChunkFloats}) {
      const Run c = run(chunk);
      EXPECT_EQ(c.losses, whole.losses) << position << "," << preset << " chunk " << chunk;
      if (std::string(position) == "pope") {
        // PoPE's phase-bias gradient is added chunk by chunk in float32 (the
        // adapter's pope_backward), so only it, and the parameters it moves,
        // may differ in the last bits; everything else is bit for bit.
        auto wide = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
        EXPECT_LT(test::max_abs_diff(c.grads, wide(whole.grads)), 1e-6) << preset << " chunk " << chunk;
        EXPECT_LT(test::max_abs_diff(c.params, wide(whole.params)), 1e-6) << preset << " chunk " << chunk;
        continue;
      }
      EXPECT_EQ(c.grads, whole.grads) << position << "," << preset << " chunk " << chunk;
      EXPECT_EQ(c.params, whole.params) << position << "," << preset << " chunk " << chunk;
    }
  }
}

// Under bf16 storage each sequence reads its own slice of the per-sequence
// bias table (ALiBi under position ids), whole and chunk by chunk: the loss
// of three sequences is the mean of their losses run alone.
TEST(Model, Bf16PerSequenceBiasTableFollowsEachSequence) {
  ModelConfig cfg = tiny_config("alibi");
  cfg.n_embd = 16;
  const AttentionSpec spec = resolve_attention(AttentionConfig{}, cfg);
  const int B = 3, T = cfg.context;
  const std::vector<int32_t> ids = {0, 1, 9, 10, 11, 0, 6, 7, 8, 40, 2, 3, 4, 30, 31};
  const auto t = tokens_for(B * T + 1, 9, cfg.vocab_size);
  for (size_t chunk : {size_t(0), size_t(1)}) {
    auto be = make_bf16_backend(make_cpu_backend<float>(), chunk);
    GPT<bf16> m(cfg, spec, *be);
    m.init(3);
    const double all = m.forward(t.data(), t.data() + 1, B, T, TokenLayout{ids.data()});
    double alone = 0;
    for (int b = 0; b < B; ++b)
      alone += m.forward(t.data() + b * T, t.data() + b * T + 1, 1, T, TokenLayout{ids.data() + b * T});
    EXPECT_NEAR(all, alone / B, 1e-6) << "chunk " << chunk;
  }
}

// Evaluation during training runs in the training activations when they
// hold its tokens, else frees them for its own (issue 19). Either way the
// losses are those of a model that never trained a step, training after it
// gives the same gradients as training without it, and a backward() after
// such a pass (whose activations it overwrote) is refused.
TEST(Model, EvaluationSharesTheTrainingActivations) {
  ModelConfig cfg = tiny_config("learned");
  cfg.n_embd = 16;
  cfg.max_position = 4 * cfg.context;
  const int B = 2, T = cfg.context;
  const auto t = tokens_for(4 * T + 1, 21, cfg.vocab_size);
  auto be = make_cpu_backend<float>();
  GPT<float> a(cfg, softmax_spec(cfg.context), *be), fresh(cfg, softmax_spec(cfg.context), *be),
      plain(cfg, softmax_spec(cfg.context), *be);
  for (GPT<float>* m : {&a, &fresh, &plain}) m->init(4);
  auto grads = [&](GPT<float>& m) {
    std::vector<float> g(m.num_params());
    be->download(g.data(), m.grads(), g.size());
    return g;
  };
  // (rows, length) of the evaluation: within the training tokens, then past them.
  for (auto [rows, len] : {std::pair{1, T}, {2, T}, {1, 2 * T - 1}, {1, 4 * T}}) {
    a.zero_grad();
    plain.zero_grad();
    EXPECT_EQ(a.forward(t.data(), t.data() + 1, B, T), plain.forward(t.data(), t.data() + 1, B, T));
    std::vector<float> la, lf;
    a.forward_losses(t.data(), t.data() + 1, rows, len, la);
    fresh.forward_losses(t.data(), t.data() + 1, rows, len, lf);
    EXPECT_EQ(la, lf) << rows << " x " << len;
    try {
      a.backward();
      FAIL() << "backward after an inference pass in the training activations was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("run the training forward() again"), std::string::npos) << e.what();
    }
    EXPECT_EQ(a.forward(t.data(), t.data() + 1, B, T), plain.forward(t.data(), t.data() + 1, B, T));
    a.backward();
    plain.backward();
    EXPECT_EQ(grads(a), grads(plain));
  }
}

TEST(Model, MakeModelChoosesTheStorage) {
  ModelConfig cfg = tiny_config("rope");
  cfg.n_embd = 16;
  auto f = make_model(cfg, softmax_spec(cfg.context), "cpu", "fp32", "fp32");
  auto b = make_model(cfg, softmax_spec(cfg.context), "cpu", "fp32", "bf16");
  EXPECT_EQ(f->storage_bytes(), 4u);
  EXPECT_EQ(b->storage_bytes(), 2u);
  EXPECT_EQ(f->backend().name(), "cpu");
  EXPECT_EQ(b->backend().name(), "cpu, bf16 storage");
  try {
    make_model(cfg, softmax_spec(cfg.context), "cpu", "fp32", "fp16");
    ADD_FAILURE() << "fp16 storage accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("run.storage \"fp16\" is not a storage type; valid: fp32, bf16"),
              std::string::npos)
        << e.what();
  }
}

TEST(Model, SameSeedSameWeights) {
  const ModelConfig cfg = tiny_config("learned");
  auto be = make_cpu_backend<float>();
  GPT<float> a(cfg, softmax_spec(5), *be), b(cfg, softmax_spec(5), *be), c(cfg, softmax_spec(5), *be);
  a.init(42);
  b.init(42);
  c.init(43);
  EXPECT_EQ(a.get_params(), b.get_params());
  EXPECT_NE(a.get_params(), c.get_params());
}

// The model initialises through a bounded staging buffer: the pieces, of
// any size, assemble into exactly the whole-buffer initialisation, the
// padding rows of wte stay zero, and GPT::init uploads those values.
TEST(Model, InitialisationInPiecesIsTheWholeOne) {
  ModelConfig cfg = tiny_config("learned");
  cfg.vocab_size = 250;  // padded to 256 or more: padding rows exist
  const ParamLayout layout(cfg);
  std::vector<float> whole(layout.total);
  init_params(layout, cfg, 11, whole.data());
  for (size_t piece : {size_t{1}, size_t{7}, size_t{1000}, layout.total}) {
    std::vector<float> joined(layout.total, -1.0f);
    size_t next = 0;
    init_params_in_pieces<float>(layout, cfg, 11, piece, [&](size_t offset, size_t n, const float* v) {
      EXPECT_EQ(offset, next);
      EXPECT_LE(n, piece);
      std::copy(v, v + n, joined.begin() + offset);
      next = offset + n;
    });
    EXPECT_EQ(next, layout.total);
    EXPECT_EQ(joined, whole) << "piece " << piece;
  }
  const ParamSpec& wte = layout.find("wte");
  ASSERT_GT(wte.numel(), static_cast<size_t>(cfg.vocab_size) * cfg.n_embd);
  for (size_t i = static_cast<size_t>(cfg.vocab_size) * cfg.n_embd; i < wte.numel(); ++i)
    ASSERT_EQ(whole[wte.offset + i], 0.0f);
  auto be = make_cpu_backend<float>();
  GPT<float> model(cfg, softmax_spec(5), *be);
  model.init(11);
  EXPECT_EQ(model.get_params(), whole);
}

TEST(Model, InitialisationFollowsGpt2) {
  ModelConfig cfg = tiny_config("learned");
  cfg.n_embd = 64;
  cfg.n_layer = 4;
  cfg.init_std = 0.02;
  auto be = make_cpu_backend<double>();
  GPT<double> model(cfg, softmax_spec(5), *be);
  model.init(3);
  const auto p = model.get_params();
  auto stddev = [&](const std::string& name) {
    const ParamSpec& s = model.layout().find(name);
    double sum = 0, sq = 0;
    for (size_t i = s.offset; i < s.offset + s.numel(); ++i) sum += p[i], sq += p[i] * p[i];
    const double n = static_cast<double>(s.numel());
    return std::sqrt(sq / n - (sum / n) * (sum / n));
  };
  EXPECT_NEAR(stddev("fcw"), 0.02, 0.002);
  EXPECT_NEAR(stddev("fcprojw"), 0.02 / std::sqrt(8.0), 0.0005);
  EXPECT_EQ(stddev("ln1w"), 0.0);
  EXPECT_EQ(p[model.layout().find("ln1w").offset], 1.0);
  EXPECT_EQ(p[model.layout().find("qkvb").offset], 0.0);
  EXPECT_FALSE(model.layout().find("ln1w").decay);
  EXPECT_TRUE(model.layout().find("qkvw").decay);
}

// The overlapped gradient reduction relies on two promises: the ranges of
// layers L-1..0 and -1 cover the flat buffer exactly once, and when
// backward() reports layer l the gradients in its ranges are final (nothing
// later in the pass writes them). Learned positions and ssmax's learned
// scales make every kind of tensor present.
TEST(Model, BackwardReportsEachLayersGradientsWhenFinal) {
  ModelConfig cfg = tiny_config("learned");
  cfg.n_layer = 3;
  AttentionConfig ac;
  ac.preset = "ssmax";
  auto be = make_cpu_backend<double>();
  GPT<double> model(cfg, resolve_attention(ac, cfg), *be);
  ASSERT_TRUE(model.layout().has("attnscale"));
  ASSERT_TRUE(model.layout().has("wpe"));
  model.init(3);

  std::vector<int> covered(model.num_params(), 0);
  for (int l = -1; l < cfg.n_layer; ++l)
    for (const auto& [offset, count] : model.layout().ranges_of_layer(l)) {
      ASSERT_LE(offset + count, model.num_params());
      for (size_t i = offset; i < offset + count; ++i) covered[i] += 1;
    }
  for (size_t i = 0; i < covered.size(); ++i) ASSERT_EQ(covered[i], 1) << "flat index " << i;
  EXPECT_THROW(model.layout().ranges_of_layer(cfg.n_layer), Error);

  const auto t = tokens_for(2 * 5 + 1, 7, cfg.vocab_size);
  model.zero_grad();
  model.forward(t.data(), t.data() + 1, 2, 5);
  std::vector<int> order;
  std::vector<double> at_report(model.num_params(), std::nan(""));
  model.backward(1.0, [&](int layer) {
    order.push_back(layer);
    for (const auto& [offset, count] : model.layout().ranges_of_layer(layer))
      for (size_t i = offset; i < offset + count; ++i) at_report[i] = model.grads()[i];
  });
  EXPECT_EQ(order, (std::vector<int>{2, 1, 0, -1}));
  size_t nonzero = 0;
  for (size_t i = 0; i < at_report.size(); ++i) {
    ASSERT_EQ(at_report[i], model.grads()[i]) << "flat index " << i << " changed after its layer was reported";
    nonzero += model.grads()[i] != 0.0;
  }
  EXPECT_GT(nonzero, model.num_params() / 2);  // the comparison is not between zeros

  // The callback changes nothing: the same gradients without it.
  const std::vector<double> with_hook(model.grads(), model.grads() + model.num_params());
  model.zero_grad();
  model.forward(t.data(), t.data() + 1, 2, 5);
  model.backward(1.0);
  EXPECT_EQ(std::vector<double>(model.grads(), model.grads() + model.num_params()), with_hook);
}

// Whether a checkpoint can run another attention follows from the parameter
// tensors the two would have: added, dropped or exchanged ones are refused,
// named; stages without parameters (the soft-cap, re-weighting, masks)
// compose with any checkpoint.
TEST(Model, AttentionChangesAreJudgedByTheirParameterTensors) {
  const ModelConfig m = tiny_config("rope");
  auto spec = [&](void (*edit)(AttentionConfig&)) {
    AttentionConfig a;
    edit(a);
    return resolve_attention(a, m);
  };
  auto error = [&](const AttentionSpec& trained, const AttentionSpec& wanted) -> std::string {
    try {
      check_attention_compatible(m, trained, wanted, "T", "W");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const AttentionSpec softmax = spec([](AttentionConfig&) {});
  const AttentionSpec ssmax = spec([](AttentionConfig& a) { a.preset = "ssmax"; });
  const AttentionSpec sink = spec([](AttentionConfig& a) { a.preset = "sink"; });
  const AttentionSpec klog = spec([](AttentionConfig& a) { a.position_bias = "kerple_log"; });
  const AttentionSpec kpow = spec([](AttentionConfig& a) { a.position_bias = "kerple_power"; });
  EXPECT_NE(error(softmax, ssmax).find("needs the learned per-head scales (ssmax s_h, HeadScale tau_h) (attnscale), which the checkpoint"),
            std::string::npos);
  EXPECT_NE(error(sink, softmax).find("would drop the learned sink logits ζ_h (attnsink)"), std::string::npos);
  EXPECT_NE(error(klog, kpow).find("reads KERPLE's learned bias parameters r1, r2 (attnkerple) otherwise"),
            std::string::npos);
  EXPECT_NE(error(softmax, spec([](AttentionConfig& a) { a.preset = "lssa"; })).find("score type cannot change"),
            std::string::npos);
  const ParamDifference d = param_difference(ParamLayout(m, softmax), ParamLayout(m, spec([](AttentionConfig& a) {
                                                                                    a.position_bias = "forget";
                                                                                    a.output_gate = "sigmoid";
                                                                                  })));
  ASSERT_EQ(d.added.size(), 4u);
  EXPECT_TRUE(d.dropped.empty() && d.changed.empty());
  for (auto edit : {+[](AttentionConfig& a) { a.softcap = 30; }, +[](AttentionConfig& a) { a.p = 15; },
                    +[](AttentionConfig& a) { a.preset = "softmax1"; }, +[](AttentionConfig& a) { a.preset = "logn"; }})
    EXPECT_EQ(error(softmax, spec(edit)), "");
  EXPECT_EQ(error(ssmax, spec([](AttentionConfig& a) { a.preset = "ssmax", a.softcap = 50, a.p = 4; })), "");
}

TEST(Model, ParameterCountMatchesGpt2Formula) {
  // docs/formats.md: Vp·C + T·C + L·(12C² + 13C) + 2C.
  ModelConfig cfg;
  cfg.n_layer = 12;
  cfg.n_head = 12;
  cfg.n_embd = 768;
  cfg.vocab_size = 50257;
  cfg.vocab_pad_multiple = 128;
  cfg.context = 1024;
  cfg.position = "learned";
  ParamLayout layout(cfg);
  EXPECT_EQ(layout.total, 124475904u);
  cfg.position = "rope";  // no position table
  EXPECT_EQ(ParamLayout(cfg).total, 124475904u - 1024u * 768u);
}

TEST(Model, RejectsTokensOutsideVocabulary) {
  const ModelConfig cfg = tiny_config("rope");
  auto be = make_cpu_backend<float>();
  GPT<float> model(cfg, softmax_spec(5), *be);
  model.init(1);
  std::vector<int32_t> in = {1, 2, 3, 11, 4}, tg = {2, 3, 4, 5, 6};
  try {
    model.forward(in.data(), tg.data(), 1, 5);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("id 11"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[0, 11)"), std::string::npos) << e.what();
  }
}

TEST(Model, LearnedPositionsRefuseLongerContexts) {
  const ModelConfig cfg = tiny_config("learned");
  auto be = make_cpu_backend<float>();
  GPT<float> model(cfg, softmax_spec(5), *be);
  model.init(1);
  std::vector<int32_t> t(10, 1);
  std::vector<float> losses;
  try {
    model.forward_losses(t.data(), t.data(), 1, 10, losses);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("learned position table"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpt
