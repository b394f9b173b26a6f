// The CUDA attention kernels (kernels/cuda/attention.cu) against the CPU
// kernel on the same random inputs: every preset of kernels/attention_spec.h
// and the stage combinations that exercise the kernel's separate paths
// (online maximum, bounded φ without a maximum, the two-pass re-weighting,
// cosine normalisation, ALiBi, all-zero relu rows, uniform rows under
// re-weighting), at head sizes 16, 32, 64, 128 and T not a multiple of the
// tiles, up to T = 2048. Compared: out, the four statistics per row, the
// diagnostics, dqkv (accumulated onto non-zero values), dhead_scale and the
// sink logits' gradient.
//
// Without a CUDA device (this build machine, CI) the parity tests skip; the
// argument checks run everywhere, since they fail before any CUDA call.
// Without GPT_HAVE_CUDA (nvcc not found) the file compiles to nothing.
#ifdef GPT_HAVE_CUDA

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "config/attention.h"
#include "core/check.h"
#include "kernels/bf16_round.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/attention.h"
#include "util/gradcheck.h"

namespace gpt::cuda {
namespace {

constexpr int kStats = AttentionSpec::kStatsPerRow;

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void cuda_ok(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e); }

// A device copy of a host vector, freed on scope exit.
template <typename T>
class DeviceVec {
 public:
  explicit DeviceVec(const std::vector<T>& h) : n_(h.size()) {
    cuda_ok(cudaMalloc(&p_, std::max<size_t>(n_, 1) * sizeof(T)), "cudaMalloc");
    if (n_) cuda_ok(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  ~DeviceVec() { cudaFree(p_); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  T* get() const { return p_; }
  std::vector<T> host() const {
    std::vector<T> h(n_);
    if (n_) cuda_ok(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

struct Case {
  std::string name;
  AttentionSpec spec;
  int B, T, C, NH;
  // Largest |GPU − CPU| allowed, relative to the largest magnitude of the
  // compared quantity (per statistic column for the stats).
  double tol = 1e-4;
  // Inputs: q rows drawn from [-1,1]·q_scale; "negative" makes every other
  // query row's scores all negative (q < 0, k > 0: relu rows of zeros);
  // "zero_q" sets every third query row to 0 (uniform rows).
  double q_scale = 1.0;
  bool negative = false;
  bool zero_q = false;
  double sink_base = -0.4;  // the sink logits ζ_h = sink_base + 0.7·h
  bool doc = false;         // a document mask (doc_starts below)
  bool fire_per_sequence = false;  // FIRE's table one per sequence (B,NH,T,T; HeadParams::fire_per_sequence)
  bool forward_only = false;       // the forward alone (dual_chunk: the CUDA backward refuses it)
};

// The document mask's (B, T) starts: sequence 0 opens a document every 23
// tokens, the others at 1, 64, 65 (a one-token document) and 190.
std::vector<int32_t> doc_starts(int B, int T) {
  std::vector<int32_t> doc(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; ++b) {
    int begin = 0;
    for (int t = 0; t < T; ++t) {
      if (b == 0 ? t % 23 == 0 : (t == 1 || t == 64 || t == 65 || t == 190)) begin = t;
      doc[static_cast<size_t>(b) * T + t] = begin;
    }
  }
  return doc;
}

AttentionSpec preset_spec(const std::string& name, int N, void (*edit)(AttentionConfig&) = nullptr) {
  AttentionConfig a;
  a.preset = name;
  if (edit) edit(a);
  ModelConfig m;
  m.context = N;
  return resolve_attention(a, m);
}

std::vector<float> uniform(size_t n, uint64_t seed, double lo, double hi) {
  const std::vector<double> d = gpt::test::random_vector(n, seed, lo, hi);
  return std::vector<float>(d.begin(), d.end());
}

std::vector<float> make_qkv(const Case& c, uint64_t seed) {
  const size_t rows = static_cast<size_t>(c.B) * c.T;
  std::vector<float> qkv = uniform(rows * 3 * c.C, seed, -1, 1);
  for (size_t r = 0; r < rows; ++r) {
    float* q = &qkv[r * 3 * c.C];
    const int t = static_cast<int>(r % c.T);
    for (int x = 0; x < c.C; ++x) {
      q[x] *= static_cast<float>(c.q_scale);
      if (c.negative) {
        q[c.C + x] = std::fabs(q[c.C + x]) + 0.05f;       // k > 0
        if (t % 2 == 0) q[x] = -std::fabs(q[x]) - 0.05f;  // q < 0: every score < 0
      }
      if (c.zero_q && t % 3 == 1) q[x] = 0.f;
    }
  }
  return qkv;
}

double max_abs(const std::vector<float>& v, size_t start = 0, size_t step = 1) {
  double m = 0;
  for (size_t i = start; i < v.size(); i += step) m = std::max(m, std::fabs(static_cast<double>(v[i])));
  return m;
}

// max |a − b| / max(max |b|, floor) over elements start, start+step, …
double rel_diff(const std::vector<float>& a, const std::vector<float>& b, size_t start = 0, size_t step = 1,
                double floor = 1e-6) {
  double worst = 0;
  for (size_t i = start; i < a.size(); i += step)
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return worst / std::max(max_abs(b, start, step), floor);
}

// The learned per-head inputs of a case, the far copy and the document starts.
struct HeadInputs {
  std::vector<float> head_scale, sink, kerple, fcum, fire_tab, qkv_far;
  std::vector<int32_t> doc;
};
HeadInputs head_inputs(const Case& c) {
  HeadInputs in;
  in.head_scale.resize(c.NH), in.sink.resize(c.NH), in.kerple.resize(2 * c.NH);
  for (int h = 0; h < c.NH; ++h) {
    in.head_scale[h] = c.spec.head_temperature  // HeadScale's τ_h around 1, else ssmax's s_h
                           ? static_cast<float>(0.8 + 0.45 * h)
                           : static_cast<float>(attn::ssmax_init(c.spec.trained_context) * (1.0 + 0.2 * h));
    in.sink[h] = static_cast<float>(c.sink_base + 0.7 * h);  // ignored unless normalisation sink
    in.kerple[2 * h] = static_cast<float>(-1.0 + 0.6 * h);   // KERPLE's raw ρ₁, ρ₂ (ignored without it)
    in.kerple[2 * h + 1] = static_cast<float>(-0.8 + 0.5 * h);
  }
  // The forget gate's c (B,NH,T) from gate logits g in [−1, 4] (read only under forget).
  const size_t nf = static_cast<size_t>(c.B) * c.NH * c.T;
  in.fcum.resize(nf);
  cpu::forget_forward(in.fcum.data(), uniform(nf, 9, -1, 4).data(), c.B, c.T, c.NH);
  // FIRE's table (NH,T,T), b in [−2, 1] on and below the diagonal (read only
  // under fire).
  const bool fire = c.spec.fire();
  const int tables = c.fire_per_sequence ? c.B * c.NH : c.NH;
  in.fire_tab = uniform(fire ? static_cast<size_t>(tables) * c.T * c.T : 1, 11, -2, 1);
  if (fire)
    for (int h = 0; h < tables; ++h)
      for (int i0 = 0; i0 < c.T; ++i0)
        for (int d = i0 + 1; d < c.T; ++d) in.fire_tab[(static_cast<size_t>(h) * c.T + i0) * c.T + d] = 0.f;
  // A distance remapping's far copy: other random q and k (the kernels do
  // not care how they were rotated).
  if (remap::on(c.spec.rope)) in.qkv_far = make_qkv(c, 7);
  in.doc = c.doc ? doc_starts(c.B, c.T) : std::vector<int32_t>(1);
  return in;
}

void run_case(const Case& c) {
  SCOPED_TRACE(c.name + " B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " C=" + std::to_string(c.C) +
               " NH=" + std::to_string(c.NH));
  const size_t n3 = static_cast<size_t>(c.B) * c.T * 3 * c.C, n1 = static_cast<size_t>(c.B) * c.T * c.C;
  const size_t ns = static_cast<size_t>(c.B) * c.NH * c.T * kStats,
               nd = static_cast<size_t>(c.NH) * kAttentionDiagStats;
  const std::vector<float> qkv = make_qkv(c, 1), dout = uniform(n1, 2, -1, 1);
  // Start values of the accumulated outputs: the kernels must add to them.
  const std::vector<float> dqkv0 = uniform(n3, 3, -1e-3, 1e-3);
  const HeadInputs hi = head_inputs(c);
  const std::vector<float>&head_scale = hi.head_scale, &sink = hi.sink, &kerple = hi.kerple, &fcum = hi.fcum,
                         &fire_tab = hi.fire_tab, &qkv_far = hi.qkv_far;
  const std::vector<int32_t>& doc = hi.doc;
  const std::vector<float> dhead0(c.NH, 0.25f), dsink0(c.NH, -0.5f), dkerple0(2 * c.NH, 0.125f);
  const std::vector<double> diag0(nd, 0.5);
  const size_t nf = static_cast<size_t>(c.B) * c.NH * c.T;
  const std::vector<float> dfcum0 = uniform(nf, 10, -1e-3, 1e-3);
  // The gradients of FIRE's table per sequence and of the far copy,
  // accumulated onto noise too.
  const bool fire = c.spec.fire();
  const size_t ndt = fire ? c.B * static_cast<size_t>(c.NH) * c.T * c.T : 1;
  const std::vector<float> dfire0 = uniform(ndt, 12, -1e-3, 1e-3);
  const bool far = remap::on(c.spec.rope);
  const std::vector<float> dfar0 = far ? uniform(n3, 8, -1e-3, 1e-3) : std::vector<float>{};

  // CPU
  std::vector<float> out_c(n1), stats_c(ns), dqkv_c = dqkv0, dhead_c = dhead0, dsink_c = dsink0, dkerple_c = dkerple0,
                                             dfar_c = dfar0, dfcum_c = dfcum0, dfire_c = dfire0;
  std::vector<double> diag_c = diag0;
  HeadParams<float> hp_c(head_scale.data(), sink.data(), kerple.data(), fcum.data(), fire_tab.data());
  hp_c.doc = c.doc ? doc.data() : nullptr;
  hp_c.fire_per_sequence = c.fire_per_sequence;
  cpu::attention_forward(out_c.data(), stats_c.data(), qkv.data(), c.B, c.T, c.C, c.NH, c.spec, hp_c, diag_c.data(),
                         far ? qkv_far.data() : nullptr);
  cpu::attention_backward(dqkv_c.data(),
                          {dhead_c.data(), dsink_c.data(), dkerple_c.data(), dfcum_c.data(), dfire_c.data()},
                          dout.data(), out_c.data(), stats_c.data(), qkv.data(), c.B, c.T, c.C, c.NH, c.spec, hp_c,
                          far ? dfar_c.data() : nullptr, far ? qkv_far.data() : nullptr);

  // GPU
  DeviceVec<float> d_qkv(qkv), d_dout(dout), d_out(std::vector<float>(n1, 0.f)), d_stats(std::vector<float>(ns, 0.f)),
      d_dqkv(dqkv0), d_hs(head_scale), d_dhead(dhead0), d_sink(sink), d_dsink(dsink0), d_kerple(kerple),
      d_dkerple(dkerple0), d_fcum(fcum), d_dfcum(dfcum0), d_fire(fire_tab), d_dfire(dfire0);
  DeviceVec<double> d_diag(diag0);
  DeviceVec<float> d_far(far ? qkv_far : std::vector<float>(1)), d_dfar(far ? dfar0 : std::vector<float>(1));
  DeviceVec<int32_t> d_doc(doc);
  HeadParams<float> hp_g(d_hs.get(), d_sink.get(), d_kerple.get(), d_fcum.get(), d_fire.get());
  hp_g.doc = c.doc ? d_doc.get() : nullptr;
  hp_g.fire_per_sequence = c.fire_per_sequence;
  attention_forward(d_out.get(), d_stats.get(), d_qkv.get(), c.B, c.T, c.C, c.NH, c.spec, hp_g, d_diag.get(), nullptr,
                    far ? d_far.get() : nullptr);
  if (!c.forward_only)
    attention_backward(d_dqkv.get(), {d_dhead.get(), d_dsink.get(), d_dkerple.get(), d_dfcum.get(), d_dfire.get()},
                       d_dout.get(), d_out.get(), d_stats.get(), d_qkv.get(), c.B, c.T, c.C, c.NH, c.spec, hp_g,
                       nullptr, far ? d_dfar.get() : nullptr, far ? d_far.get() : nullptr);
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const std::vector<float> out_g = d_out.host(), stats_g = d_stats.host(), dqkv_g = d_dqkv.host(),
                           dhead_g = d_dhead.host(), dsink_g = d_dsink.host(), dkerple_g = d_dkerple.host(),
                           dfcum_g = d_dfcum.host(), dfire_g = d_dfire.host();
  const std::vector<double> diag_g = d_diag.host();

  // The measured errors, for the record (as the gradient checks print theirs).
  double stats_err = 0, diag_err = 0;
  for (int k = 0; k < kStats; ++k) stats_err = std::max(stats_err, rel_diff(stats_g, stats_c, k, kStats));
  for (size_t k = 0; k < nd; ++k)
    diag_err = std::max(diag_err, std::fabs(diag_g[k] - diag_c[k]) / std::max(1.0, std::fabs(diag_c[k])));
  std::cout << "[parity] " << c.name << " T=" << c.T << " D=" << c.C / c.NH << " out=" << rel_diff(out_g, out_c)
            << " stats=" << stats_err << " diag=" << diag_err;
  if (c.forward_only) std::cout << " (forward only; tol " << c.tol << ")\n";
  else
    std::cout << " dqkv=" << rel_diff(dqkv_g, dqkv_c)
            << " dhead=" << (c.spec.learned_scale() ? rel_diff(dhead_g, dhead_c) : 0.0)
            << " dsink=" << (c.spec.learned_sink() ? rel_diff(dsink_g, dsink_c) : 0.0)
            << " dkerple=" << (c.spec.kerple() ? rel_diff(dkerple_g, dkerple_c) : 0.0)
            << " dc=" << (c.spec.forget() ? rel_diff(dfcum_g, dfcum_c) : 0.0)
            << " db=" << (fire ? rel_diff(dfire_g, dfire_c) : 0.0) << " (tol " << c.tol << ")\n";
  EXPECT_LE(rel_diff(out_g, out_c), c.tol) << "out";
  const char* stat_names[kStats] = {"shift", "Z", "a_max", "R"};
  for (int k = 0; k < kStats; ++k) EXPECT_LE(rel_diff(stats_g, stats_c, k, kStats), c.tol) << "stats " << stat_names[k];
  // Diagnostics: sums over rows of quantities of size ~1 (entropy ~ln T):
  // each relative to its own magnitude.
  for (size_t k = 0; k < nd; ++k)
    EXPECT_LE(std::fabs(diag_g[k] - diag_c[k]), c.tol * std::max(1.0, std::fabs(diag_c[k])))
        << "diag head " << k / kAttentionDiagStats << " stat " << k % kAttentionDiagStats;
  if (c.forward_only) return;
  EXPECT_LE(rel_diff(dqkv_g, dqkv_c), c.tol) << "dqkv";
  if (far) {
    const std::vector<float> dfar_g = d_dfar.host();
    std::cout << "[parity] " << c.name << " dqkv_far=" << rel_diff(dfar_g, dfar_c) << "\n";
    EXPECT_LE(rel_diff(dfar_g, dfar_c), c.tol) << "dqkv_far";
  }
  if (c.spec.learned_scale()) {
    EXPECT_LE(rel_diff(dhead_g, dhead_c), c.tol) << "dhead_scale";
  }
  if (c.spec.learned_sink()) {
    EXPECT_LE(rel_diff(dsink_g, dsink_c), c.tol) << "dsink";
    // (A sink far above or below every score has a share, and a gradient,
    // below float's resolution of the start value.)
    if (std::fabs(c.sink_base) < 10) {
      EXPECT_NE(dsink_c[0], dsink0[0]) << "the sink logit should get a gradient";
    }
  } else {
    EXPECT_EQ(dsink_g, dsink0) << "no learned sink, no gradient";
  }
  if (c.spec.kerple()) {
    EXPECT_LE(rel_diff(dkerple_g, dkerple_c), c.tol) << "dkerple";
    // Heads of parameters: NH / head_group; the entries past them are no head's.
    for (int k = 0; k < 2 * c.NH; ++k) {
      if (k < 2 * c.NH / c.spec.head_group) {
        EXPECT_NE(dkerple_c[k], dkerple0[k]) << "KERPLE parameter " << k;
      } else {
        EXPECT_EQ(dkerple_g[k], dkerple0[k]) << "KERPLE parameter " << k << " of no head";
      }
    }
  } else {
    EXPECT_EQ(dkerple_g, dkerple0) << "no KERPLE bias, no gradient";
  }
  if (c.spec.forget()) {
    EXPECT_LE(rel_diff(dfcum_g, dfcum_c), c.tol) << "dc";
  } else {
    EXPECT_EQ(dfcum_g, dfcum0) << "no forget gate, no gradient";
  }
  if (fire) {
    EXPECT_LE(rel_diff(dfire_g, dfire_c), c.tol) << "db (FIRE)";
    EXPECT_NE(dfire_c, dfire0) << "the table should get a gradient";
  } else {
    EXPECT_EQ(dfire_g, dfire0) << "no FIRE table, no gradient";
  }
  EXPECT_GT(max_abs(out_c), 0.0) << "the case should produce some output";
}

// Trained context 32: every case runs past N, where the i-dependent scales
// keep changing.
constexpr int kN = 32;

// float32, ~1e-4 of the largest magnitude: rounding differs between the two
// kernels only in the order of sums (dot products of D terms, row sums of up
// to T terms, the online maximum's rescaling).
constexpr double kTol = 1e-4;
// Re-weighting with p: the weights are (t/t_max)^p, so a relative rounding
// difference ε in a (and t = i·a − 1, which cancels when i·a ~ 1) becomes
// ~p·ε·i·a/t in w: p = 15 needs a looser bound.
constexpr double kTolSharp = 2e-3;

class CudaAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
  }
};

AttentionSpec context_spec(const std::string& preset, int N, void (*edit)(ContextConfig&));

TEST_F(CudaAttention, EveryPresetHeadSize32) {
  for (const AttentionPreset& p : kAttentionPresets) {
    const AttentionSpec s = preset_spec(p.name, kN);
    run_case({p.name, s, 2, 77, 64, 2, s.sharpened() ? kTolSharp : kTol});
  }
}

TEST_F(CudaAttention, EveryPresetHeadSize64) {
  for (const AttentionPreset& p : kAttentionPresets) {
    const AttentionSpec s = preset_spec(p.name, kN);
    run_case({p.name, s, 1, 130, 128, 2, s.sharpened() ? kTolSharp : kTol});
  }
}

TEST_F(CudaAttention, HeadSizes16And128) {
  run_case({"softmax D=16", preset_spec("softmax", kN), 2, 45, 64, 4, kTol});
  run_case({"lssar D=16", preset_spec("lssar", kN), 1, 45, 32, 2, kTolSharp});
  run_case({"ssmax D=128", preset_spec("ssmax", kN), 1, 100, 256, 2, kTol});
  run_case({"lssar D=128", preset_spec("lssar", kN), 1, 100, 256, 2, kTolSharp});
}

TEST_F(CudaAttention, StageCombinations) {
  run_case({"cosine+infoscale", preset_spec("cosine", kN, [](AttentionConfig& a) { a.scale = "infoscale"; }), 2, 70, 64,
            2, kTol});
  run_case({"lssa p=15 offset_rows=5", preset_spec("lssa", kN, [](AttentionConfig& a) { a.p = 15, a.offset_rows = 5; }),
            2, 70, 64, 2, kTolSharp});
  run_case({"softmax+reweight15", preset_spec("softmax", kN, [](AttentionConfig& a) { a.p = 15; }), 1, 90, 64, 2,
            kTolSharp});
  run_case({"sigmoid+l1+reweight", preset_spec("sigmoid", kN, [](AttentionConfig& a) { a.normalize = "l1", a.p = 15; }),
            1, 90, 64, 2, kTolSharp});
  run_case({"ssmax+softplus+reweight4",
            preset_spec("ssmax", kN, [](AttentionConfig& a) { a.positivity = "softplus", a.p = 4; }), 1, 90, 64, 2,
            kTolSharp});
  run_case(
      {"lssa-no-l1", preset_spec("lssa", kN, [](AttentionConfig& a) { a.normalize = "none"; }), 1, 90, 64, 2, kTol});
  run_case({"fixed scale",
            preset_spec("softmax", kN, [](AttentionConfig& a) { a.scale = "fixed", a.scale_value = 0.7; }), 1, 90, 64,
            2, kTol});
  run_case({"lssa+exp", preset_spec("lssa", kN, [](AttentionConfig& a) { a.positivity = "exp"; }), 1, 90, 64, 2, kTol});
  run_case({"logn sharp scores", preset_spec("logn", kN), 1, 90, 64, 2, kTol, 4.0});
}

// The sink and softpick normalisations (docs/contenders.md) on the kernel's paths:
// the online maximum starting at the sink's logit or at 0, bounded φ, ALiBi,
// windows, and sinks far above and below every score (the sink's share near
// 1 and near 0). Re-weighting is refused with them (attn::sharpen_refused).
TEST_F(CudaAttention, SinksAndSoftpick) {
  auto sig_l1 = [](AttentionConfig& a) { a.positivity = "sigmoid", a.bias = -1.0; };
  for (const char* norm : {"off_by_one", "sink", "softpick"}) {
    const std::string n = norm;
    AttentionConfig a;
    a.preset = "softmax";
    a.normalize = n;
    ModelConfig m;
    m.context = kN;
    const AttentionSpec s = resolve_attention(a, m);
    run_case({n, s, 2, 77, 64, 2, kTol});
    run_case({n + " D=16", s, 1, 45, 64, 4, kTol});
    a.positivity = "softplus";
    run_case({n + "+softplus", resolve_attention(a, m), 1, 90, 64, 2, kTol});
    sig_l1(a);
    run_case({n + "+sigmoid", resolve_attention(a, m), 1, 90, 64, 2, kTol});
    AttentionSpec al = s;
    al.position_bias = PositionBias::Alibi;
    run_case({n + "+alibi", al, 1, 66, 96, 3, kTol});
    ContextConfig ctx;
    ctx.mask = "sinks", ctx.sinks = 4, ctx.window = 29;
    a = AttentionConfig{};
    a.preset = "softmax";
    a.normalize = n;
    run_case({n + "+sinks4+29", for_length(resolve_attention(a, m, ctx), 8 * kN), 1, 300, 64, 2, kTol});
    Case sharp{n + " sharp scores", s, 1, 200, 64, 2, kTol, 4.0};
    run_case(sharp);
    Case neg{n + " all-negative rows", s, 1, 75, 64, 2, kTol};
    neg.negative = true;
    run_case(neg);
  }
  const AttentionSpec sink = preset_spec("sink", kN);
  for (double base : {-30.0, 6.0, 40.0}) {
    Case c{"sink logit " + std::to_string(base), sink, 1, 100, 64, 2, kTol};
    c.sink_base = base;
    run_case(c);
  }
  run_case({"sink T=2048", preset_spec("sink", 1024), 1, 2048, 64, 1, kTol});
  run_case({"softpick T=1500", preset_spec("softpick", 1024), 1, 1500, 64, 1, kTol});
}

// A preset with a position bias (attention.position_bias), trained context N.
AttentionSpec with_bias(const char* preset, const char* bias, int N = kN) {
  AttentionConfig a;
  a.preset = preset;
  a.position_bias = bias;
  ModelConfig m;
  m.context = N;
  return resolve_attention(a, m);
}

// KERPLE's learned biases (docs/contenders.md): computed in the kernels per pair
// (the CPU reads per-call tables), with the stages they compose with, a
// window and sinks, and a long row.
// HeadScale's τ_h (context.head_scale): the per-head temperature in the
// scale slot, its gradient through dhead, on several variants and rules.
TEST_F(CudaAttention, HeadScale) {
  const auto head_scale = [](ContextConfig& c) { c.head_scale = 1; };
  const auto with_llama4 = [](ContextConfig& c) { c.head_scale = 1, c.temperature = "llama4"; };
  run_case({"softmax+headscale", context_spec("softmax", kN, head_scale), 2, 77, 64, 2, kTol});
  run_case({"softmax+headscale D=16", context_spec("softmax", kN, head_scale), 1, 45, 64, 4, kTol});
  run_case({"lssar+headscale", context_spec("lssar", kN, head_scale), 1, 90, 64, 2, kTolSharp});
  run_case({"stick_breaking+headscale", context_spec("stick_breaking", kN, head_scale), 1, 90, 64, 2, kTol});
  run_case({"cosine+headscale+llama4", context_spec("cosine", kN, with_llama4), 1, 200, 64, 2, kTol});
}

TEST_F(CudaAttention, KerpleBiases) {
  auto with = [](const char* preset, const char* bias, int N = kN) { return with_bias(preset, bias, N); };
  for (const char* bias : {"kerple_log", "kerple_power"}) {
    const std::string b = bias;
    run_case({"softmax+" + b, with("softmax", bias), 2, 77, 64, 2, kTol});
    run_case({"softmax+" + b + " D=16", with("softmax", bias), 1, 45, 64, 4, kTol});
    run_case({"lssar+" + b, with("lssar", bias), 1, 90, 64, 2, kTolSharp});
    run_case({"sigmoid+" + b, with("sigmoid", bias), 1, 90, 64, 2, kTol});
    run_case({"sink+" + b, with("sink", bias), 1, 90, 64, 2, kTol});
    run_case({"ssmax+" + b, with("ssmax", bias), 1, 90, 64, 2, kTol});
    ContextConfig ctx;
    ctx.mask = "sinks", ctx.sinks = 4, ctx.window = 29;
    AttentionConfig a;
    a.preset = "softmax";
    a.position_bias = bias;
    ModelConfig m;
    m.context = kN;
    run_case({"softmax+" + b + "+sinks4+29", for_length(resolve_attention(a, m, ctx), 8 * kN), 1, 300, 64, 2, kTol});
  }
  run_case({"softmax+kerple_log T=2048", with("softmax", "kerple_log", 1024), 1, 2048, 64, 1, kTol});
}

// The forget gate's bias c_i − c_j (its c made by the test): both kernels
// read c per row and key, and dL/dc comes from the dq (rows) and dkdv (keys)
// kernels.
TEST_F(CudaAttention, ForgetGate) {
  run_case({"softmax+forget", with_bias("softmax", "forget"), 2, 77, 64, 2, kTol});
  run_case({"softmax+forget D=16", with_bias("softmax", "forget"), 1, 45, 64, 4, kTol});
  run_case({"lssa+forget", with_bias("lssa", "forget"), 1, 90, 64, 2, kTol});
  run_case({"lssar+forget", with_bias("lssar", "forget"), 1, 90, 64, 2, kTolSharp});
  run_case({"sigmoid+forget", with_bias("sigmoid", "forget"), 1, 90, 64, 2, kTol});
  run_case({"sink+forget", with_bias("sink", "forget"), 1, 90, 64, 2, kTol});
  ContextConfig ctx;
  ctx.mask = "sinks", ctx.sinks = 4, ctx.window = 29;
  AttentionConfig a;
  a.preset = "softmax";
  a.position_bias = "forget";
  ModelConfig m;
  m.context = kN;
  run_case({"softmax+forget+sinks4+29", for_length(resolve_attention(a, m, ctx), 8 * kN), 1, 300, 64, 2, kTol});
  run_case({"softmax+forget T=2048", with_bias("softmax", "forget", 1024), 1, 2048, 64, 1, kTol});
}

// Stick-breaking (docs/contenders.md; attn::sb_*): every row walks its keys from
// its own back, which the forward, dq and the key-major dkdv (from the sums
// dq records at each key block's last key) must do alike: with the stages
// and biases it composes with, windows and sinks (skipped key tiles and
// blocks), distance remappings (the near part, then the far one), head sizes
// 16 and 128, logits far below 0 (the own key keeps almost everything) and
// above (it keeps almost nothing), short and long rows.
TEST_F(CudaAttention, StickBreaking) {
  auto with = [](void (*edit)(AttentionConfig&), int N = kN) { return preset_spec("stick_breaking", N, edit); };
  const AttentionSpec sb = with(nullptr);
  run_case({"stick_breaking D=16", sb, 2, 45, 64, 4, kTol});
  run_case({"stick_breaking D=128", sb, 1, 100, 256, 2, kTol});
  run_case({"stick_breaking+logn", with([](AttentionConfig& a) { a.scale = "logn"; }), 1, 150, 64, 2, kTol});
  run_case({"stick_breaking+ssmax", with([](AttentionConfig& a) { a.scale = "ssmax"; }), 1, 150, 64, 2, kTol});
  run_case({"stick_breaking+cosine", with([](AttentionConfig& a) { a.score = "cosine", a.cosine_scale = 8.0; }), 2, 70,
            64, 2, kTol});
  run_case({"stick_breaking+kerple_log", with([](AttentionConfig& a) { a.position_bias = "kerple_log"; }), 1, 150, 64,
            2, kTol});
  run_case({"stick_breaking+forget", with([](AttentionConfig& a) { a.position_bias = "forget"; }), 2, 77, 64, 2, kTol});
  AttentionSpec alibi = sb;
  alibi.position_bias = PositionBias::Alibi;
  run_case({"stick_breaking+alibi", alibi, 1, 66, 96, 3, kTol});
  Case low{"stick_breaking bias -6", with([](AttentionConfig& a) { a.bias = -6.0; }), 1, 200, 64, 2, kTol};
  run_case(low);
  Case high{"stick_breaking sharp scores", sb, 1, 200, 64, 2, kTol, 4.0};
  run_case(high);
  for (int T : {1, 3, 64, 65}) run_case({"stick_breaking T=" + std::to_string(T), sb, 2, T, 64, 2, kTol});
  auto window = [](ContextConfig& c) { c.mask = "window", c.window = 40; };
  auto sinks = [](ContextConfig& c) { c.mask = "sinks", c.sinks = 4, c.window = 29; };
  auto rerope = [](ContextConfig& c) { c.remap = "rerope", c.remap_window = 40; };
  auto selfext = [](ContextConfig& c) { c.remap = "self_extend", c.remap_window = 20, c.group = 5; };
  auto lambda = [](ContextConfig& c) { c.mask = "lambda", c.sinks = 3, c.window = 50; };
  // With a bias of −4 (β ≈ 0.02) the far keys keep a visible share.
  auto far = [](void (*edit)(ContextConfig&)) {
    AttentionSpec s = context_spec("stick_breaking", kN, edit);
    s.bias = -4.0;
    return s;
  };
  run_case({"stick_breaking+window40", far(window), 2, 300, 64, 2, kTol});
  run_case({"stick_breaking+sinks4+29", far(sinks), 1, 300, 64, 2, kTol});
  run_case({"stick_breaking+rerope", far(rerope), 1, 200, 64, 2, kTol});
  run_case({"stick_breaking+rerope no bias", context_spec("stick_breaking", kN, rerope), 1, 200, 64, 2, kTol});
  run_case({"stick_breaking+self_extend D=16", far(selfext), 1, 200, 64, 4, kTol});
  run_case({"stick_breaking+lambda", far(lambda), 1, 300, 64, 2, kTol});
  run_case({"stick_breaking T=2048", with(nullptr, 1024), 1, 2048, 64, 1, kTol});
}


// FIRE's table b_h(i0, Δ) (made by the test; the MLP ops are checked in
// cuda_ops_parity_test.cpp): read per pair by every kernel, its gradient
// written per pair by the dq kernels.
TEST_F(CudaAttention, FireTable) {
  run_case({"softmax+fire", with_bias("softmax", "fire"), 2, 77, 64, 2, kTol});
  run_case({"softmax+fire D=16", with_bias("softmax", "fire"), 1, 45, 64, 4, kTol});
  run_case({"lssar+fire", with_bias("lssar", "fire"), 1, 90, 64, 2, kTolSharp});
  run_case({"sink+fire", with_bias("sink", "fire"), 1, 90, 64, 2, kTol});
  run_case({"ssmax+fire", with_bias("ssmax", "fire"), 1, 90, 64, 2, kTol});
  run_case({"stick_breaking+fire", with_bias("stick_breaking", "fire"), 2, 77, 64, 2, kTol});
  ContextConfig ctx;
  ctx.mask = "sinks", ctx.sinks = 4, ctx.window = 29;
  AttentionConfig a;
  a.preset = "softmax";
  a.position_bias = "fire";
  ModelConfig m;
  m.context = kN;
  run_case({"softmax+fire+sinks4+29", for_length(resolve_attention(a, m, ctx), 8 * kN), 1, 300, 64, 2, kTol});
  run_case({"softmax+fire T=1024", with_bias("softmax", "fire", 512), 1, 1024, 64, 1, kTol});
}

// One table per sequence (the distance biases under position ids,
// attn::position_table): each sequence's rows read their own table.
TEST_F(CudaAttention, FireTablePerSequence) {
  for (const char* preset : {"softmax", "lssar", "stick_breaking"}) {
    Case c{std::string(preset) + "+table per sequence", with_bias(preset, "fire"), 3, 77, 64, 2,
           std::string(preset) == "lssar" ? kTolSharp : kTol};
    c.fire_per_sequence = true;
    run_case(c);
  }
}

// The logit soft-cap (attn::softcap, Gemma 2): every kernel caps the logit
// it forms and takes each dx back through the cap, on every path: the
// normalisation families, learned biases and scales, stick-breaking's
// forward, dq and dkdv, a mask that skips tiles, a distance remapping (near
// and far logits), head sizes 16 and 64, sharp scores that saturate the cap,
// and a long row.
TEST_F(CudaAttention, LogitSoftcap) {
  auto capped = [](const char* preset, const char* bias = "none", int N = kN) {
    AttentionConfig a;
    a.preset = preset;
    a.position_bias = bias;
    a.softcap = 2.0;
    ModelConfig m;
    m.context = N;
    return resolve_attention(a, m);
  };
  run_case({"softmax+softcap", capped("softmax"), 2, 77, 64, 2, kTol});
  run_case({"softmax+softcap D=16", capped("softmax"), 1, 45, 64, 4, kTol});
  run_case({"softmax+softcap sharp scores", capped("softmax"), 1, 120, 64, 2, kTol, 4.0});
  run_case({"lssar+softcap", capped("lssar"), 1, 90, 64, 2, kTolSharp});
  run_case({"ssmax+kerple_log+softcap", capped("ssmax", "kerple_log"), 1, 90, 64, 2, kTol});
  run_case({"sink+forget+softcap", capped("sink", "forget"), 1, 90, 64, 2, kTol});
  run_case({"sigmoid+softcap", capped("sigmoid"), 1, 90, 64, 2, kTol});
  run_case({"softpick+softcap", capped("softpick"), 1, 90, 64, 2, kTol});
  run_case({"stick_breaking+softcap", capped("stick_breaking"), 2, 77, 64, 2, kTol});
  run_case({"stick_breaking+fire+softcap", capped("stick_breaking", "fire"), 1, 90, 64, 2, kTol});
  AttentionSpec sinks =
      context_spec("softmax", kN, [](ContextConfig& c) { c.mask = "sinks", c.sinks = 4, c.window = 29; });
  sinks.softcap = 2.0;
  run_case({"softmax+sinks4+29+softcap", sinks, 1, 300, 64, 2, kTol});
  AttentionSpec rerope = context_spec("softmax", kN, [](ContextConfig& c) { c.remap = "rerope", c.remap_window = 40; });
  rerope.softcap = 2.0;
  run_case({"softmax+rerope+softcap", rerope, 1, 200, 64, 2, kTol});
  AttentionSpec sb_rerope =
      context_spec("stick_breaking", kN, [](ContextConfig& c) { c.remap = "rerope", c.remap_window = 40; });
  sb_rerope.softcap = 2.0;
  sb_rerope.bias = -4.0;
  run_case({"stick_breaking+rerope+softcap", sb_rerope, 1, 200, 64, 2, kTol});
  run_case({"softmax+softcap T=2048", capped("softmax", "none", 1024), 1, 2048, 64, 1, kTol});
}

// Head groups (differential attention's kernel heads, AttentionSpec::
// head_group = 4): the learned per-head parameters and ALiBi's slope of
// kernel head h are those of head h / 4, their gradients summed there.
TEST_F(CudaAttention, HeadGroups) {
  for (const char* preset : {"ssmax", "sink", "stick_breaking"}) {
    AttentionSpec s = preset_spec(preset, kN);
    s.head_group = attn::diff::kHeads;
    run_case({std::string(preset) + " head_group 4", s, 2, 77, 128, 8, kTol});
  }
  AttentionSpec k = preset_spec("softmax", kN, [](AttentionConfig& a) { a.position_bias = "kerple_log"; });
  k.head_group = attn::diff::kHeads;
  run_case({"softmax+kerple_log head_group 4", k, 1, 90, 128, 8, kTol});
  AttentionSpec al = preset_spec("softmax", kN);
  al.position_bias = PositionBias::Alibi;
  al.head_group = attn::diff::kHeads;
  run_case({"softmax+alibi head_group 4", al, 1, 66, 192, 12, kTol});
}

TEST_F(CudaAttention, ShortSequences) {
  // T = 1 (one key per row, a single partial tile) and T = 3 (every row
  // within offset_rows of the re-weighting).
  for (int T : {1, 3}) {
    run_case({"softmax", preset_spec("softmax", kN), 2, T, 64, 2, kTol});
    run_case({"lssar", preset_spec("lssar", kN), 2, T, 64, 2, kTolSharp});
    run_case({"ssmax", preset_spec("ssmax", kN), 2, T, 64, 2, kTol});
  }
}

TEST_F(CudaAttention, Alibi) {
  for (const char* name : {"softmax", "lssar", "sigmoid"}) {
    AttentionSpec s = preset_spec(name, kN);
    s.position_bias = PositionBias::Alibi;
    // NH = 3 (not a power of two) exercises the interleaved slopes.
    run_case({std::string(name) + "+alibi", s, 2, 66, 96, 3, s.sharpened() ? kTolSharp : kTol});
  }
}

TEST_F(CudaAttention, ReluAllNegativeRows) {
  Case c{"relu all-negative rows", preset_spec("relu", kN), 2, 75, 64, 2, kTol};
  c.negative = true;
  run_case(c);
  c.name = "relu+l1 all-negative rows";
  c.spec = preset_spec("relu", kN, [](AttentionConfig& a) { a.normalize = "l1"; });
  run_case(c);
}

TEST_F(CudaAttention, UniformRowsUnderReweighting) {
  Case c{"lssar uniform rows", preset_spec("lssar", kN), 1, 80, 64, 2, kTolSharp};
  c.zero_q = true;
  run_case(c);
  c.name = "softmax+reweight uniform rows";
  c.spec = preset_spec("softmax", kN, [](AttentionConfig& a) { a.p = 15; });
  run_case(c);
}

TEST_F(CudaAttention, LongContext) {
  // T = 2048: many key tiles, the online maximum moving across them, and
  // re-weighting rows of up to 2048 keys (t reaches ~2047).
  run_case({"lssar T=2048", preset_spec("lssar", 1024), 1, 2048, 64, 1, kTolSharp});
  run_case({"softmax T=1500", preset_spec("softmax", 1024), 1, 1500, 64, 1, kTol});
}

// Context extension (docs/context_extension.md §3–4): windows and sinks, whose
// skipped key tiles must be skipped alike by every kernel (forward, diag,
// dq and the key-major dkdv), the row index "keys", and the temperatures.
AttentionSpec context_spec(const std::string& preset, int N, void (*edit)(ContextConfig&)) {
  AttentionConfig a;
  a.preset = preset;
  ModelConfig m;
  m.context = N;
  ContextConfig c;
  edit(c);
  return for_length(resolve_attention(a, m, c), 8 * N);
}

TEST_F(CudaAttention, ContextMasksAndTemperatures) {
  auto window = [](ContextConfig& c) { c.mask = "window", c.window = 40; };
  auto sinks = [](ContextConfig& c) { c.mask = "sinks", c.sinks = 4, c.window = 29; };
  auto keys = [](ContextConfig& c) { c.mask = "sinks", c.sinks = 3, c.window = 50, c.row_index = "keys"; };
  auto llama4 = [](ContextConfig& c) { c.temperature = "llama4", c.temp_floor = 16, c.temp_beta = 0.3; };
  auto yarn_t = [](ContextConfig& c) { c.temperature = "yarn"; };
  for (const char* p : {"softmax", "lssar", "sigmoid", "relu", "ssmax"}) {
    const double tol = std::string(p) == "lssar" ? kTolSharp : kTol;
    run_case({std::string(p) + "+window40", context_spec(p, kN, window), 2, 300, 64, 2, tol});
    run_case({std::string(p) + "+sinks4+29", context_spec(p, kN, sinks), 1, 300, 64, 2, tol});
  }
  // Llama 4's chunked local attention: chunks of 37, rows crossing tile edges.
  auto chunked = [](ContextConfig& c) { c.mask = "chunked", c.window = 37; };
  run_case({"softmax+chunked37", context_spec("softmax", kN, chunked), 1, 300, 64, 2, kTol});
  run_case({"lssar+chunked37", context_spec("lssar", kN, chunked), 1, 300, 64, 2, kTolSharp});
  run_case({"stick_breaking+chunked37", context_spec("stick_breaking", kN, chunked), 1, 200, 64, 2, kTol});
  // Scale-invariant attention (attn::si_*): a_t·σ + m_t per pair, alone, with a
  // window, under stick-breaking and with re-weighting.
  for (const char* p : {"softmax", "lssar", "stick_breaking"}) {
    AttentionSpec si = context_spec(p, kN, [](ContextConfig&) {});
    si.scale = Scale::ScaleInvariant, si.tau = 3.0;
    run_case({std::string(p) + "+scale_invariant", si, 1, 200, 64, 2, std::string(p) == "lssar" ? kTolSharp : kTol});
  }
  AttentionSpec si_window = context_spec("softmax", kN, window);
  si_window.scale = Scale::ScaleInvariant;
  run_case({"softmax+scale_invariant+window40", si_window, 2, 300, 64, 2, kTol});
  run_case({"lssar+sinks+keys", context_spec("lssar", kN, keys), 1, 200, 64, 2, kTolSharp});
  run_case({"ssmax+sinks+keys", context_spec("ssmax", kN, keys), 1, 200, 64, 2, kTol});
  run_case({"softmax+llama4", context_spec("softmax", kN, llama4), 1, 200, 64, 2, kTol});
  run_case({"ssmax+llama4", context_spec("ssmax", kN, llama4), 1, 200, 64, 2, kTol});
  auto swan = [](ContextConfig& c) { c.temperature = "swan", c.temp_base = 5.0; };
  run_case({"softmax+swan", context_spec("softmax", kN, swan), 1, 200, 64, 2, kTol});
  run_case({"lssar+swan", context_spec("lssar", kN, swan), 1, 200, 64, 2, kTolSharp});
  run_case({"cosine+yarn_temp", context_spec("cosine", kN, yarn_t), 1, 200, 64, 2, kTol});
  AttentionSpec alibi = context_spec("softmax", kN, sinks);
  alibi.position_bias = PositionBias::Alibi;
  run_case({"softmax+alibi+sinks", alibi, 1, 300, 96, 3, kTol});
  // A window of one key: every row sees only itself.
  run_case({"softmax+window1", context_spec("softmax", kN, [](ContextConfig& c) { c.mask = "window", c.window = 1; }),
            1, 70, 64, 2, kTol});
}

// The document mask (train.document_mask; docs/training_for_length.md):
// documents of 23 tokens and irregular ones across the tiles, alone and with
// a window, a chunked mask, stick-breaking, re-weighting and the forget gate.
TEST_F(CudaAttention, DocumentMask) {
  auto none = [](ContextConfig&) {};
  auto window = [](ContextConfig& c) { c.mask = "window", c.window = 40; };
  auto chunked = [](ContextConfig& c) { c.mask = "chunked", c.window = 37; };
  auto keys = [](ContextConfig& c) { c.mask = "window", c.window = 50, c.row_index = "keys"; };
  for (const char* p : {"softmax", "lssar", "sigmoid", "ssmax", "stick_breaking"}) {
    Case c{std::string(p) + "+doc",
           context_spec(p, kN, none),
           2,
           300,
           64,
           2,
           std::string(p) == "lssar" ? kTolSharp : kTol};
    c.doc = true;
    run_case(c);
  }
  for (auto [name, edit] : {std::pair{"softmax+doc+window40", +window}, std::pair{"softmax+doc+chunked37", +chunked},
                            std::pair{"ssmax+doc+window+keys", +keys}}) {
    Case c{name, context_spec(std::string(name).substr(0, 5) == "ssmax" ? "ssmax" : "softmax", kN, edit), 2, 300, 64, 2,
           kTol};
    c.doc = true;
    run_case(c);
  }
  AttentionSpec forget = context_spec("softmax", kN, none);
  forget.position_bias = PositionBias::Forget;
  Case f{"softmax+forget+doc", forget, 2, 200, 32, 2, kTol};
  f.doc = true;
  run_case(f);
  Case small{"softmax+doc D16", context_spec("softmax", kN, none), 2, 100, 32, 2, kTol};
  small.doc = true;
  run_case(small);
}

// The distance remappings (docs/context_extension.md §2): every kernel splits its
// key loop into the near pairs (q, k) and the far ones (the far copy), with
// whole tiles of one part skipped; head sizes 16 and 64, T past several tiles.
TEST_F(CudaAttention, ContextDistanceRemappings) {
  auto rerope = [](ContextConfig& c) { c.remap = "rerope", c.remap_window = 40; };
  auto leaky = [](ContextConfig& c) { c.remap = "rerope", c.remap_window = 7, c.rerope_kappa = 3; };
  auto selfext = [](ContextConfig& c) { c.remap = "self_extend", c.remap_window = 20, c.group = 5; };
  auto lambda = [](ContextConfig& c) { c.mask = "lambda", c.sinks = 3, c.window = 50; };
  auto cache = [](ContextConfig& c) { c.mask = "sinks", c.sinks = 4, c.window = 45, c.sink_positions = "cache"; };
  auto shifted = [](ContextConfig& c) { c.remap = "string", c.remap_window = 60, c.remap_local = 5; };
  run_case({"softmax+string", context_spec("softmax", kN, shifted), 1, 200, 64, 2, kTol});
  run_case({"lssar+string D=16", context_spec("lssar", kN, shifted), 2, 150, 64, 4, kTolSharp});

  for (const char* p : {"softmax", "lssar", "ssmax", "cosine", "sigmoid"}) {
    const double tol = std::string(p) == "lssar" ? kTolSharp : kTol;
    run_case({std::string(p) + "+rerope", context_spec(p, kN, rerope), 1, 200, 64, 2, tol});
    run_case({std::string(p) + "+self_extend", context_spec(p, kN, selfext), 1, 200, 64, 2, tol});
  }
  run_case({"softmax+rerope_leaky D=16", context_spec("softmax", kN, leaky), 2, 150, 64, 4, kTol});
  run_case({"softmax+lambda", context_spec("softmax", kN, lambda), 1, 300, 64, 2, kTol});
  run_case({"lssar+lambda", context_spec("lssar", kN, lambda), 1, 300, 64, 2, kTolSharp});
  run_case({"softmax+streaming_llm D=64", context_spec("softmax", kN, cache), 1, 300, 128, 2, kTol});
}

// Dual Chunk Attention (docs/context_extension.md §2): each row's far
// boundary remap::far_end(m) read from the table the host fills
// (Inputs::far_end) by the forward kernels; chunks of s = 38 keys with w = 7
// that fall across the key tiles, every family of positivity,
// stick-breaking, head sizes 32 and 64, with a document mask and a window;
// the output, statistics and diagnostics against the CPU kernel. The CUDA
// backward and head size 16 refuse it (common.cuh says why).
TEST_F(CudaAttention, DualChunk) {
  auto dca = [](ContextConfig& c) { c.remap = "dual_chunk", c.remap_window = 45, c.remap_local = 7; };
  auto forward = [](Case c) {
    c.forward_only = true;
    run_case(c);
  };
  for (const char* p : {"softmax", "lssar", "ssmax", "cosine", "sigmoid", "relu", "stick_breaking"}) {
    const double tol = std::string(p) == "lssar" ? kTolSharp : kTol;
    forward({std::string(p) + "+dual_chunk", context_spec(p, kN, dca), 1, 200, 64, 2, tol});
  }
  forward({"softmax+dual_chunk D=64", context_spec("softmax", kN, dca), 1, 200, 128, 2, kTol});
  forward({"lssar+dual_chunk D=64", context_spec("lssar", kN, dca), 1, 200, 128, 2, kTolSharp});
  forward({"lssar+dual_chunk+window50", context_spec("lssar", kN, [](ContextConfig& c) {
             c.remap = "dual_chunk", c.remap_window = 45, c.remap_local = 7, c.mask = "window", c.window = 50;
           }), 1, 200, 64, 2, kTolSharp});
  Case doc{"softmax+dual_chunk+doc", context_spec("softmax", kN, dca), 2, 300, 64, 2, kTol};
  doc.doc = true;
  forward(doc);
}

TEST_F(CudaAttention, DualChunkBackwardAndHeadSize16AreRefusedWithTheReason) {
  const AttentionSpec spec = context_spec("softmax", kN, [](ContextConfig& c) {
    c.remap = "dual_chunk", c.remap_window = 45, c.remap_local = 7;
  });
  const int B = 1, T = 70, C = 64, NH = 2;
  const size_t n3 = size_t(B) * T * 3 * C, n1 = size_t(B) * T * C, ns = size_t(B) * NH * T * kStats;
  DeviceVec<float> qkv(uniform(n3, 1, -1, 1)), far(uniform(n3, 2, -1, 1)), out(std::vector<float>(n1, 0.f)),
      stats(std::vector<float>(ns, 0.f)), dout(uniform(n1, 3, -1, 1)), dqkv(std::vector<float>(n3, 0.f)),
      dfar(std::vector<float>(n3, 0.f));
  const HeadParams<float> hp(nullptr);
  attention_forward(out.get(), stats.get(), qkv.get(), B, T, C, NH, spec, hp, nullptr, nullptr, far.get());
  try {
    attention_backward(dqkv.get(), {}, dout.get(), out.get(), stats.get(), qkv.get(), B, T, C, NH, spec, hp, nullptr,
                       dfar.get(), far.get());
    ADD_FAILURE() << "attention_backward accepted dual_chunk";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("dual_chunk"), std::string::npos) << m;
    EXPECT_NE(m.find("--device cpu"), std::string::npos) << m;
  }
  // Head size 16 (C = 64, NH = 4): the forward refuses it too.
  try {
    attention_forward(out.get(), stats.get(), qkv.get(), B, T, C, 4, spec, hp, nullptr, nullptr, far.get());
    ADD_FAILURE() << "attention_forward accepted dual_chunk at head size 16";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("head size 16"), std::string::npos) << m;
    EXPECT_NE(m.find("--device cpu"), std::string::npos) << m;
  }
}

TEST_F(CudaAttention, InferenceWithoutStatsStillGivesDiagnostics) {
  // stats == nullptr: the diagnostics use scratch statistics of their own.
  const AttentionSpec s = preset_spec("lssar", kN);
  const int B = 1, T = 50, C = 64, NH = 2;
  const std::vector<float> qkv = uniform(static_cast<size_t>(B) * T * 3 * C, 5, -1, 1);
  std::vector<float> out_c(static_cast<size_t>(B) * T * C);
  std::vector<double> diag_c(NH * kAttentionDiagStats, 0.0);
  cpu::attention_forward(out_c.data(), static_cast<float*>(nullptr), qkv.data(), B, T, C, NH, s,
                         static_cast<const float*>(nullptr), diag_c.data());
  DeviceVec<float> d_qkv(qkv), d_out(std::vector<float>(out_c.size(), 0.f));
  DeviceVec<double> d_diag(std::vector<double>(diag_c.size(), 0.0));
  attention_forward(d_out.get(), nullptr, d_qkv.get(), B, T, C, NH, s, nullptr, d_diag.get(), nullptr);
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  EXPECT_LE(rel_diff(d_out.host(), out_c), kTolSharp);
  const std::vector<double> diag_g = d_diag.host();
  for (size_t k = 0; k < diag_c.size(); ++k) EXPECT_NEAR(diag_g[k], diag_c[k], kTolSharp * std::max(1.0, diag_c[k]));
  EXPECT_EQ(diag_g[4], T);  // rows counted
}

// ---- the forward on tensor cores (attention_forward_tc) -----------------------------------
// Against the float32 CUDA forward on the same inputs, rounded to bf16 on the
// host first, so that both score the same q·k (the products of bf16 values
// are exact in float32; only the order of the sums differs). The tensor-core
// kernel then differs by rounding each weight to bf16 before the weighted
// sum of values: |Δy_i| <= 2^-9·Σ_j |w_ij|·|v_j|, so out is held to 1e-2 of
// its largest magnitude (kTolTc). The statistics (shift, Z, max a, Σr) are
// float sums of float stage math over the same scores: the float tolerance
// of the case (1e-4, or 2e-3 under sharpening).
// Cosine scores (cosine, lssa, lssar) score the normalised copies q̂, k̂,
// which are not bf16 values: the kernel splits each into bf16 hi + lo and
// forms q·k from three products (forward_tc.cuh), so they are held to the
// same bounds. (With q̂, k̂ rounded to bf16 once, the logits moved by up to
// λ_i·f·2^-8, and outputs by up to 10%: measured before the split.) Their
// stage math is also run on dot scores of exact inputs (" on dot scores").
constexpr double kTolTc = 1e-2;

std::vector<float> bf16_values(std::vector<float> v) {
  for (float& x : v) x = round_to_bf16(x);
  return v;
}

// Returns max |out_tc − out| / max |out| (printed too).
double run_tc_case(const Case& c) {
  SCOPED_TRACE(c.name + " (tensor cores) B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) +
               " D=" + std::to_string(c.C / c.NH));
  const size_t n1 = static_cast<size_t>(c.B) * c.T * c.C, ns = static_cast<size_t>(c.B) * c.NH * c.T * kStats;
  const std::vector<float> qkv = bf16_values(make_qkv(c, 1));
  HeadInputs hi = head_inputs(c);
  const bool far = remap::on(c.spec.rope);
  if (far) hi.qkv_far = bf16_values(hi.qkv_far);
  DeviceVec<float> d_qkv(qkv), d_hs(hi.head_scale), d_sink(hi.sink), d_kerple(hi.kerple), d_fcum(hi.fcum),
      d_fire(hi.fire_tab), d_far(far ? hi.qkv_far : std::vector<float>(1));
  DeviceVec<int32_t> d_doc(hi.doc);
  HeadParams<float> hp(d_hs.get(), d_sink.get(), d_kerple.get(), d_fcum.get(), d_fire.get());
  hp.doc = c.doc ? d_doc.get() : nullptr;
  DeviceVec<float> d_out(std::vector<float>(n1, 0.f)), d_stats(std::vector<float>(ns, 0.f)),
      d_out_tc(std::vector<float>(n1, 0.f)), d_stats_tc(std::vector<float>(ns, 0.f));
  attention_forward(d_out.get(), d_stats.get(), d_qkv.get(), c.B, c.T, c.C, c.NH, c.spec, hp, nullptr, nullptr,
                    far ? d_far.get() : nullptr);
  attention_forward_tc(d_out_tc.get(), d_stats_tc.get(), d_qkv.get(), c.B, c.T, c.C, c.NH, c.spec, hp, nullptr,
                       nullptr, far ? d_far.get() : nullptr);
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const std::vector<float> out = d_out.host(), stats = d_stats.host(), out_tc = d_out_tc.host(),
                           stats_tc = d_stats_tc.host();
  double stats_err = 0;
  for (int k = 0; k < kStats; ++k) stats_err = std::max(stats_err, rel_diff(stats_tc, stats, k, kStats));
  const double out_err = rel_diff(out_tc, out);
  const bool cosine = c.spec.score == Score::Cosine;
  std::cout << "[tensor cores] " << c.name << " T=" << c.T << " D=" << c.C / c.NH << " out=" << out_err
            << " stats=" << stats_err << " (tol " << kTolTc << ", " << c.tol << (cosine ? "; q̂·k̂ split" : "")
            << ")\n";
  EXPECT_LE(out_err, kTolTc) << "out";
  const char* stat_names[kStats] = {"shift", "Z", "a_max", "R"};
  for (int k = 0; k < kStats; ++k) EXPECT_LE(rel_diff(stats_tc, stats, k, kStats), c.tol) << "stats " << stat_names[k];
  EXPECT_GT(max_abs(out), 0.0) << "the case should produce some output";
  return out_err;
}

TEST_F(CudaAttention, TensorCoreForwardEveryPresetAndHeadSize) {
  double worst = 0;
  for (const AttentionPreset& p : kAttentionPresets) {
    const AttentionSpec s = preset_spec(p.name, kN);
    worst = std::max(worst, run_tc_case({p.name, s, 1, 130, 128, 2, s.sharpened() ? kTolSharp : kTol}));
  }
  for (const char* p : {"softmax", "lssar"}) {
    const double tol = std::string(p) == "lssar" ? kTolSharp : kTol;
    run_tc_case({std::string(p) + " D=16", preset_spec(p, kN), 2, 45, 64, 4, tol});
    run_tc_case({std::string(p) + " D=32", preset_spec(p, kN), 2, 77, 64, 2, tol});
    run_tc_case({std::string(p) + " D=128", preset_spec(p, kN), 1, 100, 256, 2, tol});
  }
  // The cosine-score presets' stage math (LSSA's scale, softplus, l1, p = 15;
  // the cosine preset's s = 32) on dot scores of exact bf16 inputs.
  for (const char* p : {"cosine", "lssa", "lssar"}) {
    const AttentionSpec s = preset_spec(p, kN, [](AttentionConfig& a) { a.score = "dot"; });
    ASSERT_EQ(s.score, Score::Dot);
    for (int D : {32, 64, 128})
      run_tc_case({std::string(p) + " on dot scores D=" + std::to_string(D), s, 1, 130, 2 * D, 2,
                   s.sharpened() ? kTolSharp : kTol, 0.1});
  }
  EXPECT_GT(worst, 0.0) << "bf16 weights should differ somewhere from the float32 kernel's";
}

TEST_F(CudaAttention, TensorCoreForwardStagesBiasesAndMasks) {
  run_tc_case({"cosine+infoscale", preset_spec("cosine", kN, [](AttentionConfig& a) { a.scale = "infoscale"; }), 2,
               70, 64, 2, kTol});
  run_tc_case({"lssa p=15 offset_rows=5",
               preset_spec("lssa", kN, [](AttentionConfig& a) { a.p = 15, a.offset_rows = 5; }), 2, 70, 64, 2,
               kTolSharp});
  run_tc_case({"sigmoid+l1+reweight",
               preset_spec("sigmoid", kN, [](AttentionConfig& a) { a.normalize = "l1", a.p = 15; }), 1, 90, 64, 2,
               kTolSharp});
  run_tc_case(
      {"lssa-no-l1", preset_spec("lssa", kN, [](AttentionConfig& a) { a.normalize = "none"; }), 1, 90, 64, 2, kTol});
  run_tc_case({"logn sharp scores", preset_spec("logn", kN), 1, 90, 64, 2, kTol, 4.0});
  run_tc_case({"softmax+softcap", preset_spec("softmax", kN, [](AttentionConfig& a) { a.softcap = 2.0; }), 1, 90, 64,
               2, kTol, 4.0});
  Case relu_neg{"relu all-negative rows", preset_spec("relu", kN), 1, 75, 64, 2, kTol};
  relu_neg.negative = true;
  run_tc_case(relu_neg);
  Case uniform_rows{"lssar uniform rows", preset_spec("lssar", kN), 1, 75, 64, 2, kTolSharp};
  uniform_rows.zero_q = true;
  run_tc_case(uniform_rows);
  for (const char* norm : {"off_by_one", "sink", "softpick"}) {
    AttentionConfig a;
    a.preset = "softmax";
    a.normalize = norm;
    ModelConfig m;
    m.context = kN;
    run_tc_case({std::string("softmax+") + norm, resolve_attention(a, m), 1, 100, 64, 2, kTol});
  }
  for (const char* bias : {"alibi", "kerple_log", "kerple_power", "forget", "fire"}) {
    run_tc_case({std::string("softmax+") + bias, with_bias("softmax", bias), 2, 77, 64, 2, kTol});
    run_tc_case({std::string("lssar+") + bias, with_bias("lssar", bias), 1, 90, 64, 2, kTolSharp});
  }
  auto window = [](ContextConfig& c) { c.mask = "window", c.window = 40; };
  auto sinks = [](ContextConfig& c) { c.mask = "sinks", c.sinks = 4, c.window = 29; };
  auto chunked = [](ContextConfig& c) { c.mask = "chunked", c.window = 37; };
  auto llama4 = [](ContextConfig& c) { c.temperature = "llama4", c.temp_floor = 16, c.temp_beta = 0.3; };
  auto rerope = [](ContextConfig& c) { c.remap = "rerope", c.remap_window = 40; };
  auto selfext = [](ContextConfig& c) { c.remap = "self_extend", c.remap_window = 20, c.group = 5; };
  auto string = [](ContextConfig& c) { c.remap = "string", c.remap_window = 60, c.remap_local = 5; };
  for (const char* p : {"softmax", "lssar", "ssmax"}) {
    const double tol = std::string(p) == "lssar" ? kTolSharp : kTol;
    const std::string n = p;
    run_tc_case({n + "+window40", context_spec(p, kN, window), 1, 300, 64, 2, tol});
    run_tc_case({n + "+sinks4+29", context_spec(p, kN, sinks), 1, 300, 64, 2, tol});
    run_tc_case({n + "+chunked37", context_spec(p, kN, chunked), 1, 200, 64, 2, tol});
    run_tc_case({n + "+llama4", context_spec(p, kN, llama4), 1, 200, 64, 2, tol});
    run_tc_case({n + "+swan", context_spec(p, kN, [](ContextConfig& c) { c.temperature = "swan"; }), 1, 200, 64, 2,
                 tol});
    run_tc_case({n + "+rerope", context_spec(p, kN, rerope), 1, 200, 64, 2, tol});
    run_tc_case({n + "+self_extend", context_spec(p, kN, selfext), 1, 200, 64, 2, tol});
    run_tc_case({n + "+string D=16", context_spec(p, kN, string), 1, 150, 64, 4, tol});
    AttentionSpec si = context_spec(p, kN, [](ContextConfig&) {});
    si.scale = Scale::ScaleInvariant, si.tau = 3.0;
    run_tc_case({n + "+scale_invariant", si, 1, 200, 64, 2, tol});
    Case doc{n + "+doc", context_spec(p, kN, [](ContextConfig&) {}), 2, 300, 64, 2, tol};
    doc.doc = true;
    run_tc_case(doc);
  }
}

// Stick-breaking on tensor cores (stick_breaking_tc.cuh): the reverse scan
// over the keys split between tiles, n-tiles and the lanes of a quad; the
// same tolerances (the weights rounded to bf16 before the sum of values; the
// statistic, Σ softplus over the kept keys, a float sum in another order).
TEST_F(CudaAttention, TensorCoreStickBreakingForward) {
  auto with = [](void (*edit)(AttentionConfig&)) { return preset_spec("stick_breaking", kN, edit); };
  const AttentionSpec sb = with(nullptr);
  ASSERT_EQ(tensor_core_fallback(sb, 64), nullptr);
  double worst = 0;
  worst = std::max(worst, run_tc_case({"stick_breaking", sb, 2, 130, 128, 2, kTol}));
  run_tc_case({"stick_breaking D=16", sb, 1, 45, 64, 4, kTol});
  run_tc_case({"stick_breaking D=32", sb, 1, 77, 64, 2, kTol});
  run_tc_case({"stick_breaking D=128", sb, 1, 100, 256, 2, kTol});
  run_tc_case({"stick_breaking+forget", with([](AttentionConfig& a) { a.position_bias = "forget"; }), 1, 77, 128, 2,
               kTol});
  run_tc_case({"stick_breaking sharp scores", sb, 1, 150, 128, 2, kTol, 4.0});
  for (int T : {1, 3, 65}) run_tc_case({"stick_breaking T=" + std::to_string(T), sb, 1, T, 128, 2, kTol});
  auto window = [](ContextConfig& c) { c.mask = "window", c.window = 40; };
  auto rerope = [](ContextConfig& c) { c.remap = "rerope", c.remap_window = 40; };
  auto far = [](void (*edit)(ContextConfig&)) {  // a bias of −4: the far keys keep a visible share
    AttentionSpec s = context_spec("stick_breaking", kN, edit);
    s.bias = -4.0;
    return s;
  };
  run_tc_case({"stick_breaking+window40", far(window), 1, 200, 128, 2, kTol});
  run_tc_case({"stick_breaking+rerope", far(rerope), 1, 200, 128, 2, kTol});
  Case doc{"stick_breaking+doc", far([](ContextConfig&) {}), 2, 200, 128, 2, kTol};
  doc.doc = true;
  run_tc_case(doc);
  EXPECT_GT(worst, 0.0) << "bf16 weights should differ somewhere from the float32 kernel's";
}

// Stick-breaking with cosine scores (no split-score form) and dual chunk
// attention (its per-row boundaries; common.cuh): attention_forward_tc says
// so and runs the float32 kernel, bit for bit; so it does for stick-breaking
// when the diagnostics are asked for.
TEST_F(CudaAttention, TensorCoreForwardFallsBackForCosineStickBreakingAndDualChunk) {
  const AttentionSpec s = preset_spec("stick_breaking", kN, [](AttentionConfig& a) {
    a.score = "cosine", a.cosine_scale = 8.0;
  });
  const char* why = tensor_core_fallback(s, 64);
  ASSERT_NE(why, nullptr);
  EXPECT_NE(std::string(why).find("stick-breaking with cosine scores"), std::string::npos) << why;
  EXPECT_EQ(tensor_core_fallback(preset_spec("lssar", kN), 64), nullptr);
  const AttentionSpec dca = context_spec("lssar", kN, [](ContextConfig& c) {
    c.remap = "dual_chunk", c.remap_window = 45, c.remap_local = 7;
  });
  const char* why_dca = tensor_core_fallback(dca, 128);
  ASSERT_NE(why_dca, nullptr);
  EXPECT_NE(std::string(why_dca).find("dual_chunk"), std::string::npos) << why_dca;
  const Case c{"stick_breaking+cosine", s, 1, 90, 128, 2, kTol};
  const std::vector<float> qkv = make_qkv(c, 1);
  const size_t n1 = static_cast<size_t>(c.B) * c.T * c.C;
  DeviceVec<float> d_qkv(qkv), d_out(std::vector<float>(n1, 0.f)), d_out_tc(std::vector<float>(n1, 1.f));
  attention_forward(d_out.get(), nullptr, d_qkv.get(), c.B, c.T, c.C, c.NH, s, nullptr, nullptr, nullptr);
  attention_forward_tc(d_out_tc.get(), nullptr, d_qkv.get(), c.B, c.T, c.C, c.NH, s, nullptr, nullptr, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  EXPECT_EQ(d_out_tc.host(), d_out.host());
  // Plain stick-breaking with the diagnostics: the float32 kernel, which sums them.
  const AttentionSpec sb = preset_spec("stick_breaking", kN);
  const size_t nd = static_cast<size_t>(c.NH) * kAttentionDiagStats;
  DeviceVec<double> d_diag(std::vector<double>(nd, 0.0)), d_diag_tc(std::vector<double>(nd, 0.0));
  attention_forward(d_out.get(), nullptr, d_qkv.get(), c.B, c.T, c.C, c.NH, sb, nullptr, d_diag.get(), nullptr);
  attention_forward_tc(d_out_tc.get(), nullptr, d_qkv.get(), c.B, c.T, c.C, c.NH, sb, nullptr, d_diag_tc.get(),
                       nullptr);
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  EXPECT_EQ(d_out_tc.host(), d_out.host());
  EXPECT_EQ(d_diag_tc.host(), d_diag.host());
  // Dual chunk attention on the same fallback, with its far copy.
  const Case cd{"lssar+dual_chunk", dca, 1, 90, 128, 2, kTolSharp};
  DeviceVec<float> d_qkv2(make_qkv(cd, 3)), d_far(make_qkv(cd, 4)), d_out2(std::vector<float>(n1, 0.f)),
      d_out2_tc(std::vector<float>(n1, 1.f));
  attention_forward(d_out2.get(), nullptr, d_qkv2.get(), cd.B, cd.T, cd.C, cd.NH, dca, nullptr, nullptr, nullptr,
                    d_far.get());
  attention_forward_tc(d_out2_tc.get(), nullptr, d_qkv2.get(), cd.B, cd.T, cd.C, cd.NH, dca, nullptr, nullptr,
                       nullptr, d_far.get());
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  EXPECT_EQ(d_out2_tc.host(), d_out2.host());
}

// ---- the backward on tensor cores (attention_backward_tc) ---------------------------------
// Against the float32 CUDA backward on the same inputs (qkv, the far copy and
// dout rounded to bf16 on the host) and the same out and statistics (the
// float32 forward's), both adding onto the same start values. The
// tensor-core kernels form q·k and dy·v from the same bf16 values (exact
// products, float sums in another order), so every dx matches the float
// kernel's to float rounding; they then round the weights w and the logit
// gradients ds = λ·f·dx to bf16 before the products dq = Σ ds·k,
// dk = Σ ds·q, dv = Σ w·dy: |Δ| <= 2^-8·Σ|ds|·|k| per element (both factors
// rounded), so dqkv is held to kTolTc of its largest magnitude. The
// gradients summed from dx alone (the ssmax scale, the sink, KERPLE's r, the
// forget gate's c, FIRE's table) and D_i, S_i keep the float tolerance of
// the case. Returns max |dqkv_tc − dqkv| / max |dqkv| (printed too).
double run_tc_backward_case(const Case& c) {
  SCOPED_TRACE(c.name + " (tensor-core backward) B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) +
               " D=" + std::to_string(c.C / c.NH));
  const size_t n3 = static_cast<size_t>(c.B) * c.T * 3 * c.C, n1 = static_cast<size_t>(c.B) * c.T * c.C;
  const size_t ns = static_cast<size_t>(c.B) * c.NH * c.T * kStats, nf = static_cast<size_t>(c.B) * c.NH * c.T;
  const std::vector<float> qkv = bf16_values(make_qkv(c, 1)), dout = bf16_values(uniform(n1, 2, -1, 1));
  HeadInputs hi = head_inputs(c);
  const bool far = remap::on(c.spec.rope), fire = c.spec.fire();
  if (far) hi.qkv_far = bf16_values(hi.qkv_far);
  const std::vector<float> dqkv0 = uniform(n3, 3, -1e-3, 1e-3), dfar0 = uniform(far ? n3 : 1, 8, -1e-3, 1e-3);
  const std::vector<float> dhead0(c.NH, 0.25f), dsink0(c.NH, -0.5f), dkerple0(2 * c.NH, 0.125f),
      dfcum0 = uniform(nf, 10, -1e-3, 1e-3),
      dfire0 = uniform(fire ? c.B * static_cast<size_t>(c.NH) * c.T * c.T : 1, 12, -1e-3, 1e-3);
  DeviceVec<float> d_qkv(qkv), d_dout(dout), d_hs(hi.head_scale), d_sink(hi.sink), d_kerple(hi.kerple),
      d_fcum(hi.fcum), d_fire(hi.fire_tab), d_far(far ? hi.qkv_far : std::vector<float>(1)),
      d_out(std::vector<float>(n1, 0.f)), d_stats(std::vector<float>(ns, 0.f));
  DeviceVec<int32_t> d_doc(hi.doc);
  HeadParams<float> hp(d_hs.get(), d_sink.get(), d_kerple.get(), d_fcum.get(), d_fire.get());
  hp.doc = c.doc ? d_doc.get() : nullptr;
  hp.fire_per_sequence = c.fire_per_sequence;
  attention_forward(d_out.get(), d_stats.get(), d_qkv.get(), c.B, c.T, c.C, c.NH, c.spec, hp, nullptr, nullptr,
                    far ? d_far.get() : nullptr);
  struct Grad {
    DeviceVec<float> dqkv, dfar, dhead, dsink, dkerple, dfcum, dfire;
  };
  Grad f{DeviceVec<float>(dqkv0), DeviceVec<float>(dfar0),   DeviceVec<float>(dhead0), DeviceVec<float>(dsink0),
         DeviceVec<float>(dkerple0), DeviceVec<float>(dfcum0), DeviceVec<float>(dfire0)};
  Grad t{DeviceVec<float>(dqkv0), DeviceVec<float>(dfar0),   DeviceVec<float>(dhead0), DeviceVec<float>(dsink0),
         DeviceVec<float>(dkerple0), DeviceVec<float>(dfcum0), DeviceVec<float>(dfire0)};
  attention_backward(f.dqkv.get(), {f.dhead.get(), f.dsink.get(), f.dkerple.get(), f.dfcum.get(), f.dfire.get()},
                     d_dout.get(), d_out.get(), d_stats.get(), d_qkv.get(), c.B, c.T, c.C, c.NH, c.spec, hp, nullptr,
                     far ? f.dfar.get() : nullptr, far ? d_far.get() : nullptr);
  attention_backward_tc(t.dqkv.get(), {t.dhead.get(), t.dsink.get(), t.dkerple.get(), t.dfcum.get(), t.dfire.get()},
                        d_dout.get(), d_out.get(), d_stats.get(), d_qkv.get(), c.B, c.T, c.C, c.NH, c.spec, hp,
                        nullptr, far ? t.dfar.get() : nullptr, far ? d_far.get() : nullptr);
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const std::vector<float> dqkv = f.dqkv.host(), dqkv_tc = t.dqkv.host();
  const double err = rel_diff(dqkv_tc, dqkv);
  // Per part of qkv (q, k, v: columns [0, C), [C, 2C), [2C, 3C) of each row).
  double part_err[3] = {0, 0, 0};
  for (int part = 0; part < 3; ++part) {
    std::vector<float> a, b;
    for (size_t r = 0; r < n3 / (3 * c.C); ++r)
      for (int x = 0; x < c.C; ++x) {
        a.push_back(dqkv_tc[r * 3 * c.C + part * c.C + x]);
        b.push_back(dqkv[r * 3 * c.C + part * c.C + x]);
      }
    part_err[part] = rel_diff(a, b);
  }
  std::cout << "[tensor-core backward] " << c.name << " T=" << c.T << " D=" << c.C / c.NH << " dq=" << part_err[0]
            << " dk=" << part_err[1] << " dv=" << part_err[2];
  const double far_err = far ? rel_diff(t.dfar.host(), f.dfar.host()) : 0.0;
  if (far) std::cout << " dqkv_far=" << far_err;
  std::cout << " (tol " << kTolTc << (c.spec.score == Score::Cosine ? "; q̂·k̂ split" : "") << ")\n";
  EXPECT_LE(err, kTolTc) << "dqkv";
  EXPECT_LE(far_err, kTolTc) << "dqkv_far";
  auto same_sum = [&](const char* what, const DeviceVec<float>& tc, const DeviceVec<float>& fl, bool on) {
    if (!on) {
      EXPECT_EQ(tc.host(), fl.host()) << what << ": no such gradient, nothing added";
      return;
    }
    const double e = rel_diff(tc.host(), fl.host());
    std::cout << "[tensor-core backward] " << c.name << " " << what << "=" << e << " (tol " << c.tol << ")\n";
    EXPECT_LE(e, c.tol) << what;
  };
  same_sum("dhead", t.dhead, f.dhead, c.spec.learned_scale());
  same_sum("dsink", t.dsink, f.dsink, c.spec.learned_sink());
  same_sum("dkerple", t.dkerple, f.dkerple, c.spec.kerple());
  same_sum("dc", t.dfcum, f.dfcum, c.spec.forget());
  same_sum("db", t.dfire, f.dfire, fire);
  EXPECT_GT(max_abs(dqkv), 1e-2) << "the case should produce some gradient";
  return err;
}

TEST_F(CudaAttention, TensorCoreBackwardEveryPreset) {
  double worst = 0;
  for (const AttentionPreset& p : kAttentionPresets) {
    const AttentionSpec s = preset_spec(p.name, kN);
    if (tensor_core_backward_fallback(s, 64)) continue;  // stick-breaking: the fallback test below
    worst = std::max(worst, run_tc_backward_case({p.name, s, 1, 130, 128, 2, s.sharpened() ? kTolSharp : kTol}));
  }
  // The cosine-score presets' stage math on dot scores of exact bf16 inputs.
  for (const char* p : {"cosine", "lssa", "lssar"}) {
    const AttentionSpec s = preset_spec(p, kN, [](AttentionConfig& a) { a.score = "dot"; });
    run_tc_backward_case({std::string(p) + " on dot scores", s, 1, 130, 128, 2, s.sharpened() ? kTolSharp : kTol, 0.1});
  }
  EXPECT_GT(worst, 0.0) << "bf16 products should differ somewhere from the float32 kernels'";
}

TEST_F(CudaAttention, TensorCoreBackwardStagesBiasesAndMasks) {
  run_tc_backward_case({"lssa p=15 offset_rows=5",
                        preset_spec("lssa", kN, [](AttentionConfig& a) { a.p = 15, a.offset_rows = 5; }), 2, 70, 128,
                        2, kTolSharp});
  run_tc_backward_case({"softmax+softcap", preset_spec("softmax", kN, [](AttentionConfig& a) { a.softcap = 2.0; }), 1,
                        90, 128, 2, kTol, 4.0});
  Case relu_neg{"relu all-negative rows", preset_spec("relu", kN), 1, 75, 128, 2, kTol};
  relu_neg.negative = true;
  run_tc_backward_case(relu_neg);
  Case uniform_rows{"lssar uniform rows", preset_spec("lssar", kN), 1, 75, 128, 2, kTolSharp};
  uniform_rows.zero_q = true;
  run_tc_backward_case(uniform_rows);
  for (const char* norm : {"off_by_one", "sink", "softpick"}) {
    AttentionConfig a;
    a.preset = "softmax";
    a.normalize = norm;
    ModelConfig m;
    m.context = kN;
    run_tc_backward_case({std::string("softmax+") + norm, resolve_attention(a, m), 1, 100, 128, 2, kTol});
  }
  for (const char* bias : {"alibi", "kerple_log", "kerple_power", "forget", "fire"}) {
    run_tc_backward_case({std::string("softmax+") + bias, with_bias("softmax", bias), 2, 77, 128, 2, kTol});
    run_tc_backward_case({std::string("lssar+") + bias, with_bias("lssar", bias), 1, 90, 128, 2, kTolSharp});
  }
  auto window = [](ContextConfig& c) { c.mask = "window", c.window = 40; };
  auto sinks = [](ContextConfig& c) { c.mask = "sinks", c.sinks = 4, c.window = 29; };
  auto chunked = [](ContextConfig& c) { c.mask = "chunked", c.window = 37; };
  auto rerope = [](ContextConfig& c) { c.remap = "rerope", c.remap_window = 40; };
  auto selfext = [](ContextConfig& c) { c.remap = "self_extend", c.remap_window = 20, c.group = 5; };
  // (ssmax's scale gradient: the presets above; here it meets a far copy.)
  run_tc_backward_case({"ssmax+rerope", context_spec("ssmax", kN, rerope), 1, 150, 128, 2, kTol});
  for (const char* p : {"softmax", "lssar"}) {
    const double tol = std::string(p) == "lssar" ? kTolSharp : kTol;
    const std::string n = p;
    run_tc_backward_case({n + "+window40", context_spec(p, kN, window), 1, 200, 128, 2, tol});
    run_tc_backward_case({n + "+sinks4+29", context_spec(p, kN, sinks), 1, 200, 128, 2, tol});
    run_tc_backward_case({n + "+chunked37", context_spec(p, kN, chunked), 1, 200, 128, 2, tol});
    run_tc_backward_case({n + "+rerope", context_spec(p, kN, rerope), 1, 200, 128, 2, tol});
    run_tc_backward_case({n + "+self_extend", context_spec(p, kN, selfext), 1, 200, 128, 2, tol});
    AttentionSpec si = context_spec(p, kN, [](ContextConfig&) {});
    si.scale = Scale::ScaleInvariant, si.tau = 3.0;
    run_tc_backward_case({n + "+scale_invariant", si, 1, 200, 128, 2, tol});
    Case doc{n + "+doc", context_spec(p, kN, [](ContextConfig&) {}), 2, 200, 128, 2, tol};
    doc.doc = true;
    run_tc_backward_case(doc);
  }
}

// Stick-breaking and the head sizes without tensor-core backward kernels:
// attention_backward_tc says why and runs the float32 kernels, bit for bit.
TEST_F(CudaAttention, TensorCoreBackwardFallsBackWithTheReason) {
  const char* why_sb = tensor_core_backward_fallback(preset_spec("stick_breaking", kN), 64);
  ASSERT_NE(why_sb, nullptr);
  EXPECT_NE(std::string(why_sb).find("stick-breaking"), std::string::npos) << why_sb;
  EXPECT_EQ(tensor_core_backward_fallback(preset_spec("lssar", kN), 64), nullptr);
  const AttentionSpec cos_sigmoid = preset_spec("cosine", kN, [](AttentionConfig& a) { a.positivity = "sigmoid"; });
  ASSERT_EQ(cos_sigmoid.score, Score::Cosine);
  struct Fallback {
    std::string name;
    AttentionSpec spec;
    int D;
    const char* reason;  // a phrase of tensor_core_backward_fallback's answer
  };
  for (const Fallback& fb : {Fallback{"stick_breaking", preset_spec("stick_breaking", kN), 64, "stick-breaking"},
                             Fallback{"lssar", preset_spec("lssar", kN), 128, "head size 64 only"},
                             Fallback{"softmax", preset_spec("softmax", kN), 32, "head size 64 only"},
                             Fallback{"cosine+sigmoid", cos_sigmoid, 64, "sigmoid or relu"}}) {
    const std::string& name = fb.name;
    const int D = fb.D;
    const AttentionSpec& s = fb.spec;
    SCOPED_TRACE(name + " D=" + std::to_string(D));
    const char* why = tensor_core_backward_fallback(s, D);
    ASSERT_NE(why, nullptr);
    EXPECT_NE(std::string(why).find(fb.reason), std::string::npos) << why;
    const Case c{name, s, 1, 90, 2 * D, 2, kTol};
    const size_t n1 = static_cast<size_t>(c.B) * c.T * c.C, n3 = 3 * n1, ns = static_cast<size_t>(c.B) * c.NH * c.T * kStats;
    DeviceVec<float> d_qkv(make_qkv(c, 1)), d_dout(uniform(n1, 2, -1, 1)), d_out(std::vector<float>(n1, 0.f)),
        d_stats(std::vector<float>(ns, 0.f)), d_dqkv(std::vector<float>(n3, 0.f)),
        d_dqkv_tc(std::vector<float>(n3, 0.f));
    attention_forward(d_out.get(), d_stats.get(), d_qkv.get(), c.B, c.T, c.C, c.NH, s, nullptr, nullptr, nullptr);
    attention_backward(d_dqkv.get(), nullptr, d_dout.get(), d_out.get(), d_stats.get(), d_qkv.get(), c.B, c.T, c.C,
                       c.NH, s, nullptr, nullptr);
    attention_backward_tc(d_dqkv_tc.get(), nullptr, d_dout.get(), d_out.get(), d_stats.get(), d_qkv.get(), c.B, c.T,
                          c.C, c.NH, s, nullptr, nullptr);
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const std::vector<float> g = d_dqkv.host();
    EXPECT_EQ(d_dqkv_tc.host(), g);
    EXPECT_GT(max_abs(g), 0.0);
  }
}

// ---- argument checks: these fail before any CUDA call, so they run without a GPU ----
TEST(CudaAttentionArgs, UnsupportedHeadSizeNamesTheSupportedOnes) {
  const AttentionSpec s = preset_spec("softmax", kN);
  try {
    attention_forward(nullptr, nullptr, nullptr, 1, 8, 48, 2, s, nullptr, nullptr, nullptr);  // D = 24
    FAIL() << "expected gpt::Error";
  } catch (const gpt::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("head size"), std::string::npos) << msg;
    EXPECT_NE(msg.find("16, 32, 64, 128"), std::string::npos) << msg;
  }
  EXPECT_THROW(
      attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 48, 2, s, nullptr, nullptr),
      gpt::Error);
}

TEST(CudaAttentionArgs, BadShapesAndSpecs) {
  const AttentionSpec softmax = preset_spec("softmax", kN);
  EXPECT_THROW(attention_forward(nullptr, nullptr, nullptr, 0, 8, 64, 2, softmax, nullptr, nullptr, nullptr),
               gpt::Error);
  EXPECT_THROW(attention_forward(nullptr, nullptr, nullptr, 1, 8, 64, 3, softmax, nullptr, nullptr, nullptr),
               gpt::Error);  // C % NH != 0
  EXPECT_THROW(
      attention_forward(nullptr, nullptr, nullptr, 1, 8, 64, 2, preset_spec("ssmax", kN), nullptr, nullptr, nullptr),
      gpt::Error);  // ssmax without s_h
  AttentionSpec neg_p = softmax;
  neg_p.p = -1;
  EXPECT_THROW(attention_forward(nullptr, nullptr, nullptr, 1, 8, 64, 2, neg_p, nullptr, nullptr, nullptr), gpt::Error);
  AttentionSpec zero_c = preset_spec("relu", kN);
  zero_c.norm_const = 0;
  EXPECT_THROW(attention_forward(nullptr, nullptr, nullptr, 1, 8, 64, 2, zero_c, nullptr, nullptr, nullptr),
               gpt::Error);
  // The backward needs the forward's statistics.
  EXPECT_THROW(
      attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 64, 2, softmax, nullptr, nullptr),
      gpt::Error);
}

}  // namespace
}  // namespace gpt::cuda

#endif  // GPT_HAVE_CUDA
