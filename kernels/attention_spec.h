// The attention pipeline of docs/attention.md in one place: the
// stage choices, their names, the named presets, and the math of every stage
// (value and derivative) as small functions that the CPU kernels use and that
// CUDA kernels compile unchanged (no STL, no exceptions; GPT_HD marks them
// __host__ __device__ under nvcc).
//
// Per head and row (i = 1-based query position, keys j = 1..i):
//   1. score      σ_ij = f · q_i·k_j, f = 1/sqrt(d) for dot; for cosine q and k
//                 are L2-normalised first and f = cosine_scale
//   2. scale      x_ij = λ_i · σ_ij + bias + b_h(i − j), then with a soft-cap
//                 c (attention.softcap) x_ij ← c·tanh(x_ij / c); the position bias
//                 b_h(Δ) of docs/contenders.md: −m_h·Δ (alibi), −r₁ ln(1 + r₂Δ)
//                 (kerple_log), −r₁ Δ^r₂ (kerple_power), r₁, r₂ learned per head;
//                 c_i − c_j (forget: the Forgetting Transformer, c_t = Σ_{l<=t} ln f_l
//                 with f_t = σ(w_h·x_t + b_h) from the layer's input); fire: a
//                 learned MLP of the progressively normalised log distance
//                 (attn::fire_input), a table b_h(i, Δ) made by the model
//   3. positivity u_ij = φ(x_ij)           (exp is shifted by the row maximum
//                                           when the row is l1-normalised)
//   4. normalise  a_ij = u_ij / Z_i         Z_i = Σ_j u_ij (l1), 1 (none), c (fixed);
//                 with a sink (docs/contenders.md): Z_i = φ(ζ) + Σ_j u_ij, an extra
//                 key of logit ζ and value 0 (off_by_one: ζ = 0; sink: ζ = ζ_h
//                 learned per layer and head); softpick: a_ij = relu(u_ij − φ(0))
//                 / (Σ_j |u_ij − φ(0)| + ε), rows summing to at most 1;
//                 stick_breaking (φ = sigmoid, u = β): keys j < i from the
//                 most recent back each take β_ij of what the later ones left,
//                 a_ij = β_ij·Π_{j<k<i}(1 − β_ik), and the query's own key the
//                 rest, a_ii = Π_{k<i}(1 − β_ik) (attn::sb_*)
//   5. sharpen    w_ij = relu(i·a_ij − o_i)^p / Σ_k relu(i·a_ik − o_i)^p
//                 (o_i = 0 for i <= offset_rows, else 1), or w = a without it;
//                 a row where no i·a_ij − o_i is positive keeps w = a.
// and y_i = Σ_j w_ij v_j.
//
// Adding a choice to a stage: add it to the stage's X-macro list below and a
// case to its math function; configs, names and the kernels pick it up.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define GPT_HD __host__ __device__
#else
#define GPT_HD
#endif

namespace gpt {

// ---- stage choices: X(enumerator, name) ---------------------------------------
#define GPT_ATTN_SCORES(X) X(Dot, "dot") X(Cosine, "cosine")
#define GPT_ATTN_SCALES(X) \
  X(None, "none")                  \
  X(Logn, "logn") X(Ssmax, "ssmax") X(Infoscale, "infoscale") X(Lssa, "lssa") X(Fixed, "fixed") X(ScaleInvariant, "scale_invariant")
#define GPT_ATTN_POSITION_BIASES(X) \
  X(None, "none")                   \
  X(Alibi, "alibi") X(KerpleLog, "kerple_log") X(KerplePower, "kerple_power") X(Forget, "forget") X(Fire, "fire")
#define GPT_ATTN_POSITIVITIES(X) X(Exp, "exp") X(Softplus, "softplus") X(Sigmoid, "sigmoid") X(Relu, "relu")
#define GPT_ATTN_NORMALIZATIONS(X)                                                                              \
  X(L1, "l1")                                                                                                   \
  X(None, "none")                                                                                               \
  X(Fixed, "fixed") X(OffByOne, "off_by_one") X(Sink, "sink") X(Softpick, "softpick") X(StickBreaking, "stick_" \
                                                                                                       "breaking")

// ---- context extension: RoPE frequency rules, masks, temperatures ---------------
// docs/context_extension.md. Notation: d_r rotated dimensions of a
// head, base b, pair k < d_r/2, θ_k = b^(−2k/d_r), N the trained context, L
// the evaluated length, s = L/N unless fixed; every frequency rule is the
// identity for s <= 1 (which other rules are not, at their defaults: §7).
#define GPT_ROPE_SCALINGS(X) \
  X(None, "none") X(Pi, "pi") X(Ntk, "ntk") X(DynamicNtk, "dynamic_ntk") X(Yarn, "yarn") X(Llama3, "llama3")
#define GPT_CONTEXT_MASKS(X) \
  X(None, "none") X(Window, "window") X(Sinks, "sinks") X(Lambda, "lambda") X(Chunked, "chunked")
#define GPT_CONTEXT_REMAPS(X) \
  X(None, "none") X(Rerope, "rerope") X(SelfExtend, "self_extend") X(String, "string") X(DualChunk, "dual_chunk")
#define GPT_REMAP_KINDS(X)                                                                                     \
  X(None, "none") X(Rerope, "rerope") X(SelfExtend, "self_extend") X(Cap, "cap") X(CacheSinks, "cache_sinks") \
  X(String, "string") X(DualChunk, "dual_chunk")
#define GPT_SINK_POSITIONS(X) X(Original, "original") X(Cache, "cache")
#define GPT_CONTEXT_TEMPERATURES(X) X(None, "none") X(Yarn, "yarn") X(Llama4, "llama4") X(Swan, "swan")
#define GPT_CONTEXT_ROW_INDICES(X) X(Position, "position") X(Keys, "keys")
// ContextRemap is the config's choice (context.remap); RemapKind what the
// kernels run, which mask lambda (Cap) and sinks at cache positions
// (CacheSinks) select too.

#define GPT_ATTN_ENUMERATOR(e, name) e,
#define GPT_ATTN_NAME(e, name) name,
#define GPT_ATTN_STAGE(Type, LIST)                                                    \
  enum class Type : int { LIST(GPT_ATTN_ENUMERATOR) };                                \
  inline constexpr const char* k##Type##Names[] = {LIST(GPT_ATTN_NAME)};              \
  inline constexpr int k##Type##Count = sizeof(k##Type##Names) / sizeof(const char*); \
  constexpr const char* stage_name(Type v) { return k##Type##Names[static_cast<int>(v)]; }

GPT_ATTN_STAGE(Score, GPT_ATTN_SCORES)
GPT_ATTN_STAGE(Scale, GPT_ATTN_SCALES)
GPT_ATTN_STAGE(PositionBias, GPT_ATTN_POSITION_BIASES)
GPT_ATTN_STAGE(Positivity, GPT_ATTN_POSITIVITIES)
GPT_ATTN_STAGE(Normalize, GPT_ATTN_NORMALIZATIONS)
GPT_ATTN_STAGE(RopeScaling, GPT_ROPE_SCALINGS)
GPT_ATTN_STAGE(ContextMask, GPT_CONTEXT_MASKS)
GPT_ATTN_STAGE(Temperature, GPT_CONTEXT_TEMPERATURES)
GPT_ATTN_STAGE(RowIndex, GPT_CONTEXT_ROW_INDICES)
GPT_ATTN_STAGE(ContextRemap, GPT_CONTEXT_REMAPS)
GPT_ATTN_STAGE(RemapKind, GPT_REMAP_KINDS)
GPT_ATTN_STAGE(SinkPositions, GPT_SINK_POSITIONS)
#undef GPT_ATTN_STAGE
#undef GPT_ATTN_ENUMERATOR
#undef GPT_ATTN_NAME

// ---- the resolved variant, as every backend's kernels take it (plain data) ----
// How RoPE rotates q and k (plain data, both backends): the "half" pair
// layout over the first rot_dims channels of each head (partial RoPE: the
// rest carry no position), with the frequencies of `scaling`.
struct RopeSpec {
  double theta = 10000;  // base b
  int rot_dims = 0;      // d_r (even); 0 = the whole head
  RopeScaling scaling = RopeScaling::None;
  double factor = 0;         // s; 0 = L/N of the evaluated length
  int trained_context = 0;   // N
  double beta_fast = 32;     // yarn: pairs rotating more than beta_fast times in N keep θ_k
  double beta_slow = 1;      // yarn: pairs rotating fewer than beta_slow times are interpolated
  bool yarn_truncate = true;  // yarn: the ramp's ends floored and ceiled to whole pairs (false: exact, gpt-oss)
  // p-RoPE (Barbero et al. 2025): the share p of the d_r/2 pairs that turn,
  // the highest frequencies; pairs k >= floor(p·d_r/2) turn at frequency 0.
  double keep = 1;
  double low_freq = 1;       // llama3 l_f
  double high_freq = 4;      // llama3 h_f
  double dynamic_alpha = 1;  // dynamic_ntk α
  // Relative-distance remapping (docs/context_extension.md §2): a key n of query
  // m before remap::far_end(m) (m − n >= remap_window but for dual_chunk) is
  // scored with the "far" copies of q and k, rotated at far_query_pos(m) and
  // far_key_pos(n) instead of m and n (remap::), so that it is seen at the
  // distance Δ′ of the rule.
  RemapKind remap = RemapKind::None;
  // w (rerope), w_n (self_extend), n_local (cap), w (cache_sinks), S (string),
  // dual_chunk: s + w, chunk length plus local window (ChunkLlama's chunk_size)
  int remap_window = 0;
  int remap_local = 0;         // string: W, the distance a key at Δ = S is seen at; dual_chunk: w
  double rerope_kappa = 0;     // rerope: 0 = Δ′ = w; κ > 1: the leaky Δ′ = w + (Δ − w)/κ
  int group = 1;               // self_extend G; <= 0: chosen per length by for_length
  int remap_sinks = 0;         // cache_sinks: k_s
  bool far_positions = false;  // the rope kernels rotate at the far positions (set by the model)
  // Channel pairs: false = "half" (GPT-NeoX, Llama: i and i + d_r/2), true =
  // interleaved (GPT-J, RoFormer: 2i and 2i + 1); pair i turns at θ'_i.
  bool interleaved = false;
  // Frequencies grown during training (train.window_yarn;
  // docs/training_for_length.md): the windows w_0 < ... < w_n of a window
  // warm-up's stages; the first `grown` switches w_j -> w_{j+1} have rescaled
  // every frequency by YaRN's rule (rope::grown). 0: none.
  static constexpr int kMaxGrowth = 16;
  int grown = 0;
  int grow[kMaxGrowth + 1] = {};
};

namespace rope {
// The two channels of pair i (< d_r/2) of a head.
GPT_HD inline int pair_first(const RopeSpec& rs, int i, int half) { return rs.interleaved ? 2 * i : i; }
GPT_HD inline int pair_second(const RopeSpec& rs, int i, int half) { return rs.interleaved ? 2 * i + 1 : i + half; }
// The pair of rotated channel j (< d_r), and whether j is its first channel.
GPT_HD inline int pair_of(const RopeSpec& rs, int j, int half) {
  return rs.interleaved ? j / 2 : (j < half ? j : j - half);
}
GPT_HD inline bool first_of_pair(const RopeSpec& rs, int j, int half) { return rs.interleaved ? j % 2 == 0 : j < half; }
}  // namespace rope

struct AttentionSpec {
  Score score = Score::Dot;
  Scale scale = Scale::None;
  Positivity positivity = Positivity::Exp;
  Normalize normalize = Normalize::L1;
  double p = 0;             // sharpening exponent; 0 = no sharpening
  int offset_rows = 3;      // sharpening: rows i <= offset_rows use o_i = 0
  double cosine_scale = 1;  // f of cosine scores
  double scale_value = 1;   // λ of scale "fixed"
  double tau = 10;          // τ of scale "scale_invariant" (attn::si_*)
  double bias = 0;          // added to every score before φ
  double softcap = 0;       // logit soft-cap c: x → c·tanh(x/c) before φ (attn::softcap); 0 = none
  double norm_const = 1;    // c of normalisation "fixed"
  // The position bias b_h(Δ) of stage 2 (attention.position_bias; alibi also
  // from model.position = "alibi").
  PositionBias position_bias = PositionBias::None;
  // Gated attention (Qiu et al. 2025, "G1"): the model multiplies the
  // attention output by σ(x·W_g + b_g) before the output projection
  // (attention.output_gate = "sigmoid"); the kernels ignore it.
  bool output_gate = false;
  // Differential attention (Ye et al. 2024; attn::diff): the model runs each
  // head's two maps as attn::diff::kHeads kernel heads of half the head size
  // and combines them (attention.differential = "on"); the kernels see
  // head_group = kHeads.
  bool differential = false;
  // Kernel heads per head of the learned per-head parameters: kernel head h
  // reads the ssmax scale, sink logit, KERPLE parameters and ALiBi slope of
  // head h / head_group (of NH / head_group) and adds its gradients there.
  // The per-token inputs (the forget gate's c, FIRE's table) stay per kernel
  // head. 1 but for differential attention.
  int head_group = 1;
  int trained_context = 0;  // N: the context length the model was trained at
  // Context extension (docs/context_extension.md §3–4).
  int window = 0;                           // keys m − window < n <= m are kept; 0 = no window
  bool chunked = false;                     // window is a chunk: keys ⌊n/w⌋ = ⌊m/w⌋, n <= m (Llama 4)
  int sinks = 0;                            // keys n < sinks are kept whatever the window
  // The document mask (docs/training_for_length.md): for query m (0-based) of
  // the sequence running, doc_begin[m] is the first key of its document
  // (non-decreasing in m, <= m), and keys before it are masked; doc_len = T
  // entries. Null: no document mask. The kernels set both per sequence from
  // HeadParams::doc (attn::for_sequence); a config never sets them.
  const int32_t* doc_begin = nullptr;
  int doc_len = 0;
  RowIndex row_index = RowIndex::Position;  // the i of the scales and of sharpening
  Temperature temperature = Temperature::None;
  double temp_beta = 0.1;   // llama4: q × (1 + β·ln(⌊i/F⌋ + 1))
  int temp_floor = 0;       // llama4 F; 0 = N
  double temp_base = 0;     // swan: a of logits × log_a(m + a) (SWAN-GPT); 0 = N
  double attn_factor = 0;   // YaRN's t; 0 = 0.1·ln s + 1 where YaRN's factor applies (for_length)
  double logit_scale = 1;   // a global temperature τ: every logit × τ (gpt eval --calibrate temperature)
  double logit_factor = 1;  // every logit × this: τ·t², set per evaluated length by for_length
  // HeadScale (Wang et al. 2024; context.head_scale): a learned temperature
  // τ_h per layer and head multiplying the head's λ_i (attn::row_scale), so
  // every q·k logit of the head; it rides in the per-head scale slot (the
  // "attnscale" tensor) that ssmax uses for s_h, which is why the two
  // exclude each other. τ_h = 1 is the model without it.
  bool head_temperature = false;
  RopeSpec rope;            // how the model rotates q and k (model.position = "rope")

  GPT_HD bool sharpened() const { return p > 0; }
  // The head of the learned per-head parameters of kernel head h.
  GPT_HD int param_head(int h) const { return head_group > 1 ? h / head_group : h; }
  // The ssmax scale s_h, or HeadScale's τ_h, is a learned parameter, one per
  // layer and head (the kernels' head_scale).
  GPT_HD bool learned_scale() const { return scale == Scale::Ssmax || head_temperature; }
  // So is the sink logit ζ_h of normalisation "sink".
  GPT_HD bool learned_sink() const { return normalize == Normalize::Sink; }
  GPT_HD bool alibi() const { return position_bias == PositionBias::Alibi; }
  // KERPLE's r₁, r₂ per head are learned (through raw parameters: attn::kerple_r).
  GPT_HD bool kerple() const {
    return position_bias == PositionBias::KerpleLog || position_bias == PositionBias::KerplePower;
  }
  // The forget gate's cumulative log gates c are an input of the kernels
  // (HeadParams::fcum), made by the model from its gate parameters.
  GPT_HD bool forget() const { return position_bias == PositionBias::Forget; }
  // FIRE's bias table b_h(i, Δ) is an input of the kernels (HeadParams::fire),
  // made by the model from its MLP (cpu::fire_forward).
  GPT_HD bool fire() const { return position_bias == PositionBias::Fire; }
  // Per-row statistics saved by the forward pass for the backward pass:
  // shift (row max of x for shifted exp), Z, max_j a_ij, R = Σ_j r_ij;
  // stick-breaking: Σ_{k<i} softplus(x_ik) (−ln A_ii), 1, 0, 0.
  static constexpr int kStatsPerRow = 4;
  GPT_HD constexpr int stats_per_row() const { return kStatsPerRow; }
};

// The learned per-head parameters of one layer's attention as the kernels
// take them: NH values each, null where the variant has none; and the forget
// gate's per-token input. Implicit from the ssmax scales alone, so that
// callers without the others pass a pointer. A is the type of the per-token
// input (the backend's accumulator type: float under bf16 storage).
template <typename T, typename A = T>
struct HeadParams {
  const T* scale = nullptr;   // ssmax's s_h
  const T* sink = nullptr;    // the sink logits ζ_h (normalisation "sink")
  const T* kerple = nullptr;  // KERPLE's raw (ρ₁, ρ₂) of each head, 2·NH values (attn::kerple_r)
  const A* fcum = nullptr;    // forget: c (B, NH, T), c_t = Σ_{l<=t} ln f_l of each sequence and head
  // fire: the bias table (NH, T, T), b_h of 0-based query position i0 at
  // distance Δ = i0 − j at [(h·T + i0)·T + Δ] (Δ <= i0), shared by the batch;
  // or one table per sequence (B, NH, T, T) where fire_per_sequence (the
  // distance biases under position ids: attn::position_table)
  const A* fire = nullptr;
  bool fire_per_sequence = false;
  // The document mask: (B, T) the first token of each token's document in
  // its sequence (attn::for_sequence); null for none.
  const int32_t* doc = nullptr;
  GPT_HD HeadParams() {}
  GPT_HD HeadParams(const T* scale_, const T* sink_ = nullptr, const T* kerple_ = nullptr, const A* fcum_ = nullptr,
                    const A* fire_ = nullptr)
      : scale(scale_), sink(sink_), kerple(kerple_), fcum(fcum_), fire(fire_) {}
};
// The offset of FIRE's table of head h of sequence b (HeadParams::fire).
GPT_HD inline size_t fire_slice(bool per_sequence, int b, int h, int NH, int T) {
  return ((per_sequence ? static_cast<size_t>(b) * NH : 0) + h) * static_cast<size_t>(T) * T;
}
// Their gradients (added to): NH values each, null where absent.
template <typename A>
struct HeadGrads {
  A* scale = nullptr;
  A* sink = nullptr;
  A* kerple = nullptr;  // 2·NH, as HeadParams::kerple
  A* fcum = nullptr;    // (B, NH, T): dL/dc of the forget gate's input
  A* fire = nullptr;    // (B, NH, T, T): dL/db of FIRE's table per sequence, laid out as HeadParams::fire
  GPT_HD HeadGrads() {}
  GPT_HD HeadGrads(A* scale_, A* sink_ = nullptr, A* kerple_ = nullptr, A* fcum_ = nullptr, A* fire_ = nullptr)
      : scale(scale_), sink(sink_), kerple(kerple_), fcum(fcum_), fire(fire_) {}
};

// ---- named presets ----------------------------------------------------------------
// bias and norm_const are not listed: they default to −ln N for sigmoid
// positivity (0 otherwise, and 0 under stick-breaking, whose sigmoid is the
// break fraction β, not a weight) and to N (default_bias, default_norm_const).
struct AttentionPreset {
  const char* name;
  Score score;
  Scale scale;
  Positivity positivity;
  Normalize normalize;
  double p;
  double cosine_scale;
  const char* summary;
};

inline constexpr AttentionPreset kAttentionPresets[] = {
    {"softmax", Score::Dot, Scale::None, Positivity::Exp, Normalize::L1, 0, 1, "softmax(q·k/sqrt(d))"},
    {"logn", Score::Dot, Scale::Logn, Positivity::Exp, Normalize::L1, 0, 1, "softmax(max(1, ln i/ln N)·q·k/sqrt(d))"},
    {"ssmax", Score::Dot, Scale::Ssmax, Positivity::Exp, Normalize::L1, 0, 1,
     "softmax(s_h·ln i·q·k/sqrt(d)), s_h learned per head"},
    {"infoscale", Score::Dot, Scale::Infoscale, Positivity::Exp, Normalize::L1, 0, 1,
     "softmax(r_i·q·k/sqrt(d)), r_i = max(1, sqrt(1-i^(-2/d))/sqrt(1-N^(-2/d)))"},
    {"cosine", Score::Cosine, Scale::None, Positivity::Exp, Normalize::L1, 0, 32, "softmax(s·cos(q,k)), s = 32"},
    {"lssa", Score::Cosine, Scale::Lssa, Positivity::Softplus, Normalize::L1, 0, 1, "l1(softplus(ln d·ln i·cos(q,k)))"},
    {"lssar", Score::Cosine, Scale::Lssa, Positivity::Softplus, Normalize::L1, 15, 1,
     "lssa re-weighted: relu(i·a - o_i)^p, l1, p = 15"},
    {"sigmoid", Score::Dot, Scale::None, Positivity::Sigmoid, Normalize::None, 0, 1,
     "sigmoid(q·k/sqrt(d) - ln N), no normalisation"},
    {"relu", Score::Dot, Scale::None, Positivity::Relu, Normalize::Fixed, 0, 1, "relu(q·k/sqrt(d)) / N"},
    {"softmax1", Score::Dot, Scale::None, Positivity::Exp, Normalize::OffByOne, 0, 1,
     "e^x / (1 + sum e^x): softmax with an implicit zero logit (off by one)"},
    {"sink", Score::Dot, Scale::None, Positivity::Exp, Normalize::Sink, 0, 1,
     "e^x / (e^z_h + sum e^x): softmax with a learned sink logit z_h per head"},
    {"softpick", Score::Dot, Scale::None, Positivity::Exp, Normalize::Softpick, 0, 1,
     "relu(e^x - 1) / (sum |e^x - 1| + eps): rows sum to at most 1"},
    {"stick_breaking", Score::Dot, Scale::None, Positivity::Sigmoid, Normalize::StickBreaking, 0, 1,
     "b = sigmoid(x); key j < i takes b_ij prod_{j<k<i} (1 - b_ik), the query's own key the rest"},
};
inline constexpr int kAttentionPresetCount = sizeof(kAttentionPresets) / sizeof(AttentionPreset);

inline double default_bias(Positivity phi, Normalize norm, int trained_context) {
  return phi == Positivity::Sigmoid && norm != Normalize::StickBreaking && trained_context > 1
             ? -log(static_cast<double>(trained_context))
             : 0.0;
}
inline double default_norm_const(int trained_context) { return trained_context > 0 ? trained_context : 1; }

// ---- stage math ----------------------------------------------------------------------
namespace attn {

// Stage 1: the factor f of σ = f · q·k (q, k already L2-normalised for cosine).
GPT_HD inline double score_factor(const AttentionSpec& s, int head_dim) {
  return s.score == Score::Cosine ? s.cosine_scale : 1.0 / sqrt(static_cast<double>(head_dim));
}
// The epsilon of the cosine score's norms: q̂ = q / sqrt(‖q‖² + eps²), whose
// backward is dq = (dq̂ − (dq̂·q̂) q̂) / sqrt(‖q‖² + eps²).
inline constexpr double kNormEps = 1e-6;

// ---- masks and the row index (docs/context_extension.md §3) --------------------------
// Key n (0-based) is kept for query m (0-based): causal, inside the window
// (m − window < n) or a sink (n < sinks). A chunked mask (Llama 4's chunked
// local attention) keeps the keys of the query's own chunk of w tokens,
// ⌊n/w⌋ = ⌊m/w⌋: the window then begins at m − (m mod w), and every kernel
// sees the mask through window_begin (a contiguous band up to the query).
// A document mask (s.doc_begin) moves the band's start to the query's
// document start where that is later; as both starts never fall with m, the
// band stays contiguous and block_seen stays exact.
GPT_HD inline bool masked(const AttentionSpec& s) { return s.window > 0 || s.doc_begin != nullptr; }
// The first window key of query m (0-based; 0 without a window or document mask).
GPT_HD inline int window_begin(const AttentionSpec& s, int m) {
  int lo = 0;
  if (s.window > 0) lo = s.chunked ? m - m % s.window : (m - s.window + 1 > 0 ? m - s.window + 1 : 0);
  if (s.doc_begin && m < s.doc_len && s.doc_begin[m] > lo) lo = s.doc_begin[m];
  return lo;
}
GPT_HD inline bool key_kept(const AttentionSpec& s, int m, int n) {
  return n <= m && (!masked(s) || n >= window_begin(s, m) || n < s.sinks);
}
// Whether any query of rows q_first..q_last keeps any key of k_first..k_last
// (0-based, inclusive): kernels skip key blocks where it is false.
GPT_HD inline bool block_seen(const AttentionSpec& s, int q_first, int q_last, int k_first, int k_last) {
  if (k_first > q_last) return false;
  return !masked(s) || k_first < s.sinks || k_last >= window_begin(s, q_first);
}
// The spec as the kernels run sequence b of Tn tokens: with a document mask
// (doc: the (B, Tn) document starts, null for none) its doc_begin rows.
template <typename Spec>
GPT_HD inline Spec for_sequence(const Spec& spec, const int32_t* doc, int b, int Tn) {
  Spec s = spec;
  if (doc) {
    s.doc_begin = doc + static_cast<size_t>(b) * Tn;
    s.doc_len = Tn;
  }
  return s;
}
// The number of keys row i (1-based) keeps.
GPT_HD inline int kept_keys(const AttentionSpec& s, int i) {
  if ((s.chunked && s.window > 0) || s.doc_begin) return i - window_begin(s, i - 1);
  if (s.window <= 0 || i <= s.window) return i;
  const int start = i - s.window;  // first window key
  return s.window + (s.sinks < start ? s.sinks : start);
}
// The i of stage 2's scales and stage 5's threshold for row i: the query
// position (default), or the number of keys the row keeps.
GPT_HD inline int row_index(const AttentionSpec& s, int i) {
  return s.row_index == RowIndex::Keys ? kept_keys(s, i) : i;
}
// SWAN-GPT's a: temp_base, else N (this project's default; the paper tunes it).
GPT_HD inline double swan_base(const AttentionSpec& s) {
  return s.temp_base > 0 ? s.temp_base : (s.trained_context > 1 ? s.trained_context : 2.0);
}
// The temperature of row i (1-based): YaRN's t² (logit_factor) times
// Llama 4's 1 + β·ln(⌊i/F⌋ + 1) (i = m + 1 for the 0-based position m), or
// SWAN-GPT's log_a(m + a) = ln(m + a)/ln a (1 at m = 0, growing with m).
GPT_HD inline double row_temperature(const AttentionSpec& s, int i) {
  double t = s.logit_factor;
  if (s.temperature == Temperature::Llama4) {
    const double F = s.temp_floor > 0 ? s.temp_floor : (s.trained_context > 0 ? s.trained_context : 1);
    t *= 1.0 + s.temp_beta * log(floor(i / F) + 1.0);
  } else if (s.temperature == Temperature::Swan) {
    const double a = swan_base(s);
    t *= log(i - 1 + a) / log(a);
  }
  return t;
}

// Stage 2: λ_i of row i (1-based) with d the head size and head_scale the
// learned per-head value (ssmax's s_h, or HeadScale's τ_h), times the row's
// temperature. The scales see row_index(i). Never clamps i to N: the scales
// keep changing past the training length, which is the mechanism under study.
GPT_HD inline double base_row_scale(const AttentionSpec& s, int i, int head_dim, double head_scale);
GPT_HD inline double row_scale(const AttentionSpec& s, int i, int head_dim, double head_scale) {
  const double t = row_temperature(s, i) * (s.head_temperature ? head_scale : 1.0);
  return base_row_scale(s, row_index(s, i), head_dim, head_scale) * t;
}
GPT_HD inline double base_row_scale(const AttentionSpec& s, int i, int head_dim, double head_scale) {
  const double n = i, N = s.trained_context;
  switch (s.scale) {
    case Scale::None:
      return 1.0;
    case Scale::Logn: {
      if (N <= 1) return 1.0;
      const double r = log(n) / log(N);
      return r > 1.0 ? r : 1.0;
    }
    case Scale::Ssmax:
      return head_scale * log(n);
    case Scale::Infoscale: {
      if (N <= 1) return 1.0;
      const double e = -2.0 / head_dim;
      const double r = sqrt(1.0 - pow(n, e)) / sqrt(1.0 - pow(N, e));
      return r > 1.0 ? r : 1.0;
    }
    case Scale::Lssa:
      return log(static_cast<double>(head_dim)) * log(n);
    case Scale::Fixed:
      return s.scale_value;
    case Scale::ScaleInvariant:  // per key, not per row: attn::si_gain, si_shift
      return 1.0;
  }
  return 1.0;
}
// Scale-invariant attention (Anson, Wang, Aitchison 2025, "Scale-invariant
// attention", arXiv 2505.17083, §3 Eq. 16 with α = β = e^½ from a_0 = 1,
// m_0 = 0): the logit of a key at distance t = i − j (0 for the query's own
// key) is a_t·σ + m_t, a_t = sqrt(2 ln(t/τ + 1) + 1), m_t = −2 ln(t/τ + 1),
// so that total attention over [t, 2t) and its sparsity stay the same as t
// grows (their Gaussian argument). Nothing is learned; τ = attention.tau.
// The kernels apply it to σ before the rest of stage 2: σ′ = a_t·σ +
// m_t/(λ_i f) (λ_i = 1 for this scale, times the row temperature), so
// every later stage sees x = λ_i f·a_t·σ + m_t + …, and dL/dσ = a_t·dL/dσ′.
GPT_HD inline bool scale_invariant(const AttentionSpec& s) { return s.scale == Scale::ScaleInvariant; }
GPT_HD inline double si_log(const AttentionSpec& s, int dist) { return log1p((dist > 0 ? dist : 0) / s.tau); }
GPT_HD inline double si_gain(const AttentionSpec& s, int dist) { return sqrt(2.0 * si_log(s, dist) + 1.0); }
GPT_HD inline double si_shift(const AttentionSpec& s, int dist) { return -2.0 * si_log(s, dist); }
// dλ_i/ds_h of the learned per-head value: ssmax's ln(i)·temperature, or
// for HeadScale's τ_h (λ_i = τ_h·λ′_i) the rest of λ_i; 0 otherwise.
GPT_HD inline double row_scale_grad(const AttentionSpec& s, int i, int head_dim) {
  if (s.scale == Scale::Ssmax) return log(static_cast<double>(row_index(s, i))) * row_temperature(s, i);
  if (s.head_temperature) return base_row_scale(s, row_index(s, i), head_dim, 1.0) * row_temperature(s, i);
  return 0.0;
}
// ssmax's initial s_h: 1/ln N, so training starts as softmax at length N.
inline double ssmax_init(int trained_context) {
  return trained_context > 1 ? 1.0 / log(static_cast<double>(trained_context)) : 1.0;
}

// ALiBi slope of head h (0-based) of n_head: the geometric sequence
// 2^(-8k/n), k = 1..n, for n a power of two; otherwise the slopes of the
// nearest lower power of two followed by every other slope of the next one.
GPT_HD inline double alibi_slope(int h, int n_head) {
  int pow2 = 1;
  while (pow2 * 2 <= n_head) pow2 *= 2;
  if (h < pow2) return pow(2.0, -8.0 * (h + 1) / pow2);
  return pow(2.0, -4.0 * (2 * (h - pow2) + 1) / pow2);
}

// Stage 2c: the logit soft-cap of Gemma 2 (Gemma Team 2024, "Gemma 2:
// Improving Open Language Models at a Practical Size", arXiv 2408.00118,
// §2: logits ← soft_cap · tanh(logits / soft_cap), 50 for attention), on the
// whole logit x (every stage-2 term: the scaled score, the bias and the
// position bias) before φ; the sink key's ζ is not a score and is not capped.
// Its derivative from the capped value y: dy/dx = 1 − (y/c)². c is the
// spec's softcap in the caller's type; without a cap (c = 0) both are the
// identity, exactly.
template <typename T>
GPT_HD inline T softcap(T c, T x) {
  return c > T(0) ? c * tanh(x / c) : x;
}
template <typename T>
GPT_HD inline T softcap_grad(T c, T y) {
  if (!(c > T(0))) return T(1);
  const T r = y / c;
  return T(1) - r * r;
}

// Stage 3: φ and dφ/dx (given x and u = φ(x)).
template <typename T>
GPT_HD inline T softplus(T x) {
  return (x > T(0) ? x : T(0)) + log1p(exp(-fabs(x)));
}
template <typename T>
GPT_HD inline T sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + exp(-x));
  const T e = exp(x);
  return e / (T(1) + e);
}
template <typename T>
GPT_HD inline T positivity(Positivity k, T x) {
  switch (k) {
    case Positivity::Exp:
      return exp(x);
    case Positivity::Softplus:
      return softplus(x);
    case Positivity::Sigmoid:
      return sigmoid(x);
    case Positivity::Relu:
      return x > T(0) ? x : T(0);
  }
  return T(0);
}
template <typename T>
GPT_HD inline T positivity_grad(Positivity k, T x, T u) {
  switch (k) {
    case Positivity::Exp:
      return u;
    case Positivity::Softplus:
      return sigmoid(x);
    case Positivity::Sigmoid:
      return u * (T(1) - u);
    case Positivity::Relu:
      return x > T(0) ? T(1) : T(0);
  }
  return T(0);
}
// KERPLE (Chi et al. 2022; docs/contenders.md): b(Δ) = −r₁ ln(1 + r₂Δ) (log) or
// −r₁ Δ^r₂ (power). r₁, r₂ > 0 come from raw learned parameters ρ₁, ρ₂:
// r₁ = softplus(ρ₁), r₂ = softplus(ρ₂) (log) or 2σ(ρ₂) (power, 0 < r₂ < 2).
// The reference implementation (chijames/KERPLE) clamps the parameters
// themselves to >= 0.01 (and the power's exponent to <= 2) after drawing
// r₁ ~ U(0, 2), r₂ ~ U(0, 1) (log) or r₁ ~ U(0, 1), r₂ ~ U(0, 2) (power);
// this project keeps those draws (as ρ = the inverse maps) and replaces the
// clamp by the smooth maps, so gradients never stop at a bound.
struct KerpleR {
  double r1 = 0, r2 = 0;
  double dr1 = 0, dr2 = 0;  // dr/dρ
};
GPT_HD inline KerpleR kerple_r(PositionBias k, double rho1, double rho2) {
  KerpleR r;
  r.r1 = softplus(rho1);
  r.dr1 = sigmoid(rho1);
  if (k == PositionBias::KerplePower) {
    const double sg = sigmoid(rho2);
    r.r2 = 2.0 * sg;
    r.dr2 = 2.0 * sg * (1.0 - sg);
  } else {
    r.r2 = softplus(rho2);
    r.dr2 = sigmoid(rho2);
  }
  return r;
}
// The raw ρ of an initial r (the inverse maps of kerple_r).
inline double kerple_rho1(double r1) { return r1 > 30 ? r1 : log(expm1(r1)); }
inline double kerple_rho2(PositionBias k, double r2) {
  if (k == PositionBias::KerplePower) return log(r2 / (2.0 - r2));
  return r2 > 30 ? r2 : log(expm1(r2));
}
// The forget gate (Lin et al. 2025): ln f = ln σ(g) = −softplus(−g) of the
// gate logit g, and d ln f / dg = σ(−g).
template <typename T>
GPT_HD inline T log_sigmoid(T g) {
  return -softplus(-g);
}
template <typename T>
GPT_HD inline T log_sigmoid_grad(T g) {
  return sigmoid(-g);
}
// b(Δ) and its derivatives ∂b/∂r₁, ∂b/∂r₂ at distance Δ >= 0.
template <typename T>
GPT_HD inline T kerple_bias(PositionBias k, T r1, T r2, T dist) {
  if (k == PositionBias::KerplePower) return dist > T(0) ? -r1 * pow(dist, r2) : T(0);
  return -r1 * log1p(r2 * dist);
}
template <typename T>
GPT_HD inline void kerple_bias_grad(PositionBias k, T r1, T r2, T dist, T* d1, T* d2) {
  if (k == PositionBias::KerplePower) {
    const T p = dist > T(0) ? pow(dist, r2) : T(0);
    *d1 = -p;
    *d2 = dist > T(0) ? -r1 * p * log(dist) : T(0);
  } else {
    *d1 = -log1p(r2 * dist);
    *d2 = -r1 * dist / (T(1) + r2 * dist);
  }
}

// Stage 4 divides by a sum over the row (l1 and its sink and softpick forms).
GPT_HD inline bool row_normalised(const AttentionSpec& s) {
  return s.normalize == Normalize::L1 || s.normalize == Normalize::OffByOne || s.normalize == Normalize::Sink ||
         s.normalize == Normalize::Softpick;
}
// Z holds an extra key of logit ζ and value 0 (off_by_one: ζ = 0; sink: ζ_h).
GPT_HD inline bool has_sink(const AttentionSpec& s) {
  return s.normalize == Normalize::OffByOne || s.normalize == Normalize::Sink;
}
GPT_HD inline bool softpick(const AttentionSpec& s) { return s.normalize == Normalize::Softpick; }
// exp under a row normalisation is computed as exp(x − m): the same weights,
// no overflow. m = max_j x_j, and at least ζ with a sink (the sink's e^(ζ−m)
// stays <= 1) or 0 under softpick (its e^(−m) stays <= 1).
GPT_HD inline bool shifted(const AttentionSpec& s) { return s.positivity == Positivity::Exp && row_normalised(s); }
// The logit ζ of the sink key of head h: 0 (off_by_one), ζ_h (sink, from the
// layer's learned logits), none otherwise (0, unused).
template <typename T>
GPT_HD inline double sink_logit(const AttentionSpec& s, const T* sinks, int h) {
  return s.normalize == Normalize::Sink && sinks ? static_cast<double>(sinks[h]) : 0.0;
}
// The lower bound of the shift m of a shifted row, or −inf where none applies.
GPT_HD inline double shift_floor(const AttentionSpec& s, double zeta) {
  if (has_sink(s)) return zeta;
  if (softpick(s)) return 0.0;
  return -INFINITY;
}
// The row's shift from the largest x of its kept keys: 0 unless shifted,
// else at least shift_floor.
template <typename T>
GPT_HD inline T row_shift(const AttentionSpec& s, T max_x, T zeta) {
  if (!shifted(s)) return T(0);
  const T floor_ = static_cast<T>(shift_floor(s, static_cast<double>(zeta)));
  return max_x > floor_ ? max_x : floor_;
}
// Softpick's level c = φ(0 − shift) (exp: e^(−m), the shifted 1 of e^x − 1),
// which u = φ(x − shift) is measured from; 0 for every other normalisation,
// so that relu(u − c) = u there.
template <typename T>
GPT_HD inline T zero_level(const AttentionSpec& s, T shift) {
  return softpick(s) ? positivity(s.positivity, -shift) : T(0);
}
// Re-weighting renormalises every row it sharpens to sum 1, which would undo
// the weight a sink or softpick leaves unassigned: the two are refused together.
GPT_HD inline bool sharpen_refused(const AttentionSpec& s) { return s.sharpened() && (has_sink(s) || softpick(s)); }
// Softpick's ε (of the unshifted formula; docs/contenders.md leaves its value open).
inline constexpr double kSoftpickEps = 1e-6;
// What a row normalisation adds to Σ_j |u_j − c|: the sink key's φ(ζ − shift),
// or softpick's ε in the shifted units (ε·e^(−m) for exp, ε otherwise).
template <typename T>
GPT_HD inline T norm_extra(const AttentionSpec& s, T shift, T zeta) {
  if (has_sink(s)) return positivity(s.positivity, zeta - shift);
  if (softpick(s)) return T(kSoftpickEps) * (shifted(s) ? exp(-shift) : T(1));
  return T(0);
}
// dZ/dζ of a sink: φ'(ζ − shift).
template <typename T>
GPT_HD inline T sink_grad_factor(const AttentionSpec& s, T shift, T zeta) {
  const T x = zeta - shift;
  return positivity_grad(s.positivity, x, positivity(s.positivity, x));
}

// Stage 4: 1/Z of a row whose terms sum to z (l1 of an all-zero row gives
// zero weights instead of 0/0).
template <typename T>
GPT_HD inline T inv_norm(const AttentionSpec& s, T z) {
  switch (s.normalize) {
    case Normalize::L1:
    case Normalize::OffByOne:
    case Normalize::Sink:
    case Normalize::Softpick:
      return z > T(0) ? T(1) / z : T(0);
    case Normalize::None:
    case Normalize::StickBreaking:  // its own weights (sb_*), no division
      return T(1);
    case Normalize::Fixed:
      return T(1.0 / s.norm_const);
  }
  return T(1);
}

// Stick-breaking (Tan et al. 2024, "Scaling stick-breaking attention", arXiv
// 2410.17980; docs/contenders.md). With β = σ(x) the row's kept keys are taken
// from the most recent back, each the share β of what the later ones left:
//   key j < i     A_ij = β_ij·Π_{j<k<i}(1 − β_ik),
//                 ln A_ij = ln σ(x_ij) − Σ_{j<k<i} softplus(x_ik);
//   own key i     A_ii = 1 − Σ_{j<i} A_ij = Π_{k<i}(1 − β_ik) = e^(−Σ_{k<i} softplus(x_ik)).
// So each row sums to 1 and the own key's logit is never used. This follows
// the paper's code (shawntan/stickbreaking-attention: keys j < i by default,
// attend_current = False, and its model and tests add the remainder times
// v_i to the output); dropping the remainder instead would leave rows that
// sum to less than 1, since the keys j < i alone sum to at most 1. A key a mask hides takes no share
// and breaks nothing (β = 0). The kernels walk each row from its own key
// back with acc = Σ softplus of the later kept keys; the forward saves the
// row's total acc (−ln A_ii) as its first statistic.
GPT_HD inline bool stick_breaking(const AttentionSpec& s) { return s.normalize == Normalize::StickBreaking; }
// β must be a probability (φ = sigmoid), and re-weighting would renormalise
// the rows the breaking made: both are refused (kRefusals).
GPT_HD inline bool stick_breaking_without_sigmoid(const AttentionSpec& s) {
  return stick_breaking(s) && s.positivity != Positivity::Sigmoid;
}
GPT_HD inline bool stick_breaking_sharpened(const AttentionSpec& s) { return stick_breaking(s) && s.sharpened(); }
// The sink normalisations and softpick measure from φ(0), which relu makes 0.
GPT_HD inline bool sink_with_relu(const AttentionSpec& s) {
  return s.positivity == Positivity::Relu && (has_sink(s) || softpick(s));
}

// ---- combinations of stages that are refused (docs/contenders.md, "Refused combinations")
// The one list: the config's cross-field rules, the CPU and the CUDA kernels
// all refuse by it, with these words (in the config's terms, which is how a
// user asks for a combination).
struct Refusal {
  bool (*applies)(const AttentionSpec&);
  const char* why;
};
inline constexpr Refusal kRefusals[] = {
    {sink_with_relu,
     "\"attention.normalize\" off_by_one, sink and softpick measure from the positivity's value at 0, which relu "
     "makes 0: off_by_one and softpick would equal l1 and the sink's gradient would vanish below 0; use positivity "
     "exp, softplus or sigmoid"},
    {sharpen_refused,
     "re-weighting (\"attention.p\" > 0) renormalises every row it sharpens to 1, which undoes the weight that "
     "\"attention.normalize\" off_by_one, sink or softpick leaves unassigned: use one or the other"},
    {stick_breaking_without_sigmoid,
     "\"attention.normalize\" = \"stick_breaking\" breaks each row by the fractions sigmoid(x): it needs "
     "\"attention.positivity\" = \"sigmoid\" (the preset stick_breaking sets it)"},
    {stick_breaking_sharpened,
     "re-weighting (\"attention.p\" > 0) renormalises the rows, which undoes the shares stick-breaking gives "
     "(each row already sums to 1, the query's own key taking the rest): use one or the other"},
};
// The first refusal that applies to s, or null when its stages compose.
inline const Refusal* refusal(const AttentionSpec& s) {
  for (const Refusal& r : kRefusals)
    if (r.applies(s)) return &r;
  return nullptr;
}
// −ln(1 − β) of a key: what it leaves to the keys before it.
template <typename T>
GPT_HD inline T sb_taken(T x) {
  return softplus(x);
}
// A_ij of a key j < i, acc = Σ_{j<k<i} softplus(x_ik) of the later kept keys.
template <typename T>
GPT_HD inline T sb_weight(T x, T acc) {
  return exp(log_sigmoid(x) - acc);
}
// A_ii, acc = Σ_{k<i} softplus(x_ik) of every kept key before it.
template <typename T>
GPT_HD inline T sb_rest(T acc) {
  return exp(-acc);
}
// dL/dx_ij of a key j < i from its weight w = A_ij, g = dL/dA_ij and
// P = Σ_{kept k<j} A_ik·g_k + A_ii·g_i (the earlier keys and the own key,
// whose shares contain −softplus(x_ij)): w·σ(−x)·g − σ(x)·P.
template <typename T>
GPT_HD inline T sb_grad_x(T x, T w, T g, T P) {
  return w * sigmoid(-x) * g - sigmoid(x) * P;
}

// Stage 5: o_i, and r = (t / t_max)^p for t = i·a − o_i > 0 (else 0). The
// division by the row's largest t keeps r <= 1: relu(t)^p itself overflows
// float once t > ~370, and t reaches i − 1.
GPT_HD inline double sharpen_offset(const AttentionSpec& s, int i) { return i <= s.offset_rows ? 0.0 : 1.0; }
// t = i·a − o, computed the same way in every kernel and in the row's t_max:
// left to the compiler, contraction into an FMA differs between
// instantiations and instruction sets, and t of the largest a must equal
// t_max exactly (it gives r = 1), or a masked and an unmasked kernel of the
// same row part in the last bits, amplified p times by the power. For float
// the product is formed in double, where it is exact (24 + 24 bits), so a
// contracted and an uncontracted form agree, then rounded to float (fmaf
// would be a library call on a CPU without FMA). On a GPU, fmaf (one
// instruction; double is slow on most GPUs). For double, one fused
// multiply-add.
template <typename T>
GPT_HD inline T sharpen_t(T i, T a, T offset) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(float)) return fmaf(i, a, -offset);
#endif
  if constexpr (sizeof(T) == sizeof(float)) {
    return static_cast<T>(static_cast<double>(i) * static_cast<double>(a) - static_cast<double>(offset));
  } else {
    return fma(i, a, -offset);
  }
}
template <typename T>
GPT_HD inline T sharpen_value(T t, T t_max, T p) {
  return t > T(0) ? pow(t / t_max, p) : T(0);
}
// dL/dt for w = r/Σr, from w, t, g = dL/dw and D = Σ_k w_k g_k:
// p · w / t · (g − D) where t > 0, else 0.
template <typename T>
GPT_HD inline T sharpen_grad(T w, T t, T g, T D, T p) {
  return t > T(0) ? p * w / t * (g - D) : T(0);
}

// A row is sharpened only when its largest t exceeds this. t = i·a − o with
// a = u/Z, and Z sums up to i float32 terms, so a t_max this small is at the
// level of rounding and cannot tell which keys beat their uniform share (a
// share within 0.01% of uniform counts as uniform). Sharpening such a row
// would let rounding pick the weights, send gradients of size ~p/t_max, and
// let two backends (or fused and unfused arithmetic) take different branches;
// the row keeps its stage-4 weights instead, as an exactly uniform row does.
constexpr double kSharpenMinTMax = 1e-4;

// ---- one row, from the saved statistics -------------------------------------------
// Everything the element-wise chain x -> a -> w needs besides x.
template <typename T>
struct Row {
  T shift = 0;   // subtracted from x before φ (shifted exp only)
  T inv_z = 1;   // stage 4
  T i = 1;       // 1-based row index, as T
  T offset = 0;  // o_i
  T t_max = 0;   // max_j (i·a_ij − o_i); sharpening acts only when > kSharpenMinTMax
  T inv_r = 0;   // 1 / Σ_j r_ij
  T p = 0;
  T zero = 0;            // softpick's c = φ(−shift) (zero_level); 0 otherwise
  bool sharpen = false;  // sharpening on and t_max > kSharpenMinTMax

  GPT_HD T u(const AttentionSpec& s, T x) const { return positivity(s.positivity, x - shift); }
  // Stage 4's numerator of u: relu(u − c), which is u itself where c = 0 (u >= 0).
  GPT_HD T numer(T u_val) const { return u_val - zero > T(0) ? u_val - zero : T(0); }
  GPT_HD T a(const AttentionSpec& s, T x) const { return numer(u(s, x)) * inv_z; }
  GPT_HD T w_from_a(T a_val) const {
    return sharpen ? sharpen_value(sharpen_t(i, a_val, offset), t_max, p) * inv_r : a_val;
  }
};

// The Row of row i from its stats (shift, Z, a_max, R) as the forward saved them.
template <typename T>
GPT_HD inline Row<T> row_from_stats(const AttentionSpec& s, int i, const T* st) {
  Row<T> r;
  r.shift = st[0];
  r.inv_z = inv_norm(s, st[1]);
  const int ri = row_index(s, i);
  r.i = T(ri);
  r.offset = T(sharpen_offset(s, ri));
  r.t_max = sharpen_t(r.i, st[2], r.offset);
  r.p = T(s.p);
  r.sharpen = s.sharpened() && r.t_max > T(kSharpenMinTMax);
  r.inv_r = r.sharpen ? T(1) / st[3] : T(0);
  r.zero = zero_level(s, st[0]);
  return r;
}

// Backward of stages 5 and 4 for one element: h = dL/da_ij from g = dL/dw_ij,
// then dL/dx_ij. D = Σ_k w_k g_k, S = Σ_k a_k h_k (l1 only; pass 0 otherwise).
template <typename T>
GPT_HD inline T grad_a(const Row<T>& r, T a_val, T w, T g, T D) {
  return r.sharpen ? r.i * sharpen_grad(w, sharpen_t(r.i, a_val, r.offset), g, D, r.p) : g;
}
// The same with u = φ(x − shift) already known (kernels that kept it).
// φ'·(1/Z) is formed first: it is at most ~a <= 1 where Z is a sum of tiny
// φ values (saturated sigmoid rows), while (h − S)/Z would overflow.
//   l1, off_by_one, sink  dx = φ'/Z·(h − S)   (the sink key adds to Z only)
//   softpick              dx = φ'/Z·(1[u > c]·h − sgn(u − c)·S)
//   none, fixed           dx = φ'/Z·h
template <typename T>
GPT_HD inline T grad_x_u(const AttentionSpec& s, const Row<T>& r, T x, T u, T h, T S) {
  const T pz = positivity_grad(s.positivity, x - r.shift, u) * r.inv_z;
  if (softpick(s)) return pz * (u > r.zero ? h - S : (u < r.zero ? S : T(0)));
  return pz * (row_normalised(s) ? h - S : h);
}
template <typename T>
GPT_HD inline T grad_x(const AttentionSpec& s, const Row<T>& r, T x, T h, T S) {
  return grad_x_u(s, r, x, r.u(s, x), h, S);
}
// dL/dζ of a row with a sink: Z holds φ(ζ − shift), so dL/dζ = −φ'(ζ − shift)/Z·S
// (S = Σ_j a_j h_j, as in grad_x_u).
template <typename T>
GPT_HD inline T sink_grad(const AttentionSpec& s, const Row<T>& r, T zeta, T S) {
  return -sink_grad_factor(s, r.shift, zeta) * r.inv_z * S;
}

}  // namespace attn

// Per-head attention diagnostics accumulated by the forward pass (evaluation):
// sums over rows of the entropy of the row's weights (normalised to sum 1),
// the share of weight on the first key (the attention sink), the share on the
// most recent N keys, the row's total weight Σ_j w_ij, and the row count
// (kDiagRows); then the largest |σ_ij| over the rows and keys (kDiagMaxScore),
// σ the stage-1 score f·q_i·k_j before the length scales, biases and caps:
// the logit size that QK-norm bounds and that Muon is known to grow
// (docs/attention.md, Diagnostics). Two sets combine with
// add_attention_diag: sums, and the maximum of the last.
inline constexpr int kAttentionDiagStats = 6;
inline constexpr int kDiagRows = 4;
inline constexpr int kDiagMaxScore = 5;
inline void add_attention_diag(double* acc, const double* more) {
  for (int k = 0; k < kAttentionDiagStats; ++k)
    acc[k] = k == kDiagMaxScore ? (more[k] > acc[k] ? more[k] : acc[k]) : acc[k] + more[k];
}

}  // namespace gpt

// The parts with their own subject, which the kernels and the model reach
// through this header: FIRE's MLP, differential attention's λ, and the
// context-extension rules of RoPE (remapping, frequencies, per-length spec).
#include "kernels/attention/context_rules.h"
#include "kernels/attention/differential.h"
#include "kernels/attention/fire.h"
#include "kernels/attention/pope.h"
#include "kernels/attention/position_table.h"
