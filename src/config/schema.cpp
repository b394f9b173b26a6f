// The one declaration of every config key and cross-field rule.
#include "config/schema.h"

#include <algorithm>

#include "config/attention.h"
#include "config/block_presets.h"
#include "config/layer_plan.h"
#include "data/synthetic.h"
#include "kernels/attention_spec.h"

namespace gpt::config_schema {
namespace {

Allowed between(double lo, double hi) {
  Allowed a;
  a.lo = lo;
  a.hi = hi;
  return a;
}
Allowed at_least(double lo) { return between(lo, std::numeric_limits<double>::infinity()); }
Allowed above(double lo) {
  Allowed a = at_least(lo);
  a.lo_open = true;
  return a;
}
Allowed above_up_to(double lo, double hi) {  // (lo, hi]
  Allowed a = between(lo, hi);
  a.lo_open = true;
  return a;
}
Allowed unit_interval() {  // [0, 1)
  Allowed a = between(0, 1);
  a.hi_open = true;
  return a;
}
Allowed one_of(std::vector<std::string_view> values) {
  Allowed a;
  a.values = std::move(values);
  return a;
}
Allowed non_empty() {
  Allowed a;
  a.nonempty = true;
  return a;
}
Allowed any() { return Allowed{}; }
Allowed increasing_list(double min_element, bool nonempty = true) {
  Allowed a = at_least(min_element);
  a.nonempty = nonempty;
  a.increasing = true;
  return a;
}

constexpr double kMaxVocab = 1 << 24;

std::vector<std::string_view> preset_names() {
  std::vector<std::string_view> out;
  for (const auto& p : kAttentionPresets) out.push_back(p.name);
  return out;
}

// "preset" followed by a stage's choices.
template <size_t N>
std::vector<std::string_view> stage_names(const char* const (&names)[N]) {
  std::vector<std::string_view> out{"preset"};
  for (const char* n : names) out.push_back(n);
  return out;
}
constexpr double kMaxContext = 1 << 20;

// "none" and the synthetic tasks (data/synthetic.h).
std::vector<std::string_view> mix_task_names() {
  std::vector<std::string_view> out{"none"};
  for (const auto& t : synthetic_task_names()) out.push_back(t);
  return out;
}

template <size_t N>
std::vector<std::string_view> names_of(const char* const (&names)[N]) {
  return std::vector<std::string_view>(std::begin(names), std::end(names));
}

// Section, name and accessor from one spelling, so the path can never drift
// from the struct member it names.
#define GPT_KEY(sec, member) #sec, #member, [](Config & c) -> FieldRef { return &c.sec.member; }

std::vector<Key> make_keys() {
  return {
      {GPT_KEY(model, n_layer), between(1, 256), "transformer blocks"},
      {GPT_KEY(model, n_head), between(1, 256), "attention heads per block"},
      {GPT_KEY(model, n_embd), between(1, 65536),
       "residual width C; must be divisible by n_head unless head_dim is set"},
      {GPT_KEY(model, head_dim), between(0, 1024),
       "each attention head's width D; 0 = n_embd / n_head. Another value makes the attention n_head·D wide (q, the "
       "attention output and the output projection's input), as Qwen3-0.6B's 16 heads of 128 in a 1024-wide model"},
      {GPT_KEY(model, vocab_size), between(2, kMaxVocab), "real vocabulary size V (byte tokenizer: 257)"},
      {GPT_KEY(model, vocab_pad_multiple), one_of({"64", "128"}),
       "padded vocabulary Vp = V rounded up to this multiple"},
      {GPT_KEY(model, context), between(1, kMaxContext), "training context length T"},
      {GPT_KEY(model, position), one_of({"learned", "rope", "none", "alibi", "pope"}),
       "position encoding: learned (a table added to the embedding), rope, none (NoPE), alibi, or pope (PoPE, "
       "Gopalakrishnan et al. 2025: softplus magnitudes of q and k with position-only phases, D frequencies per "
       "head and a learned key phase bias)"},
      {GPT_KEY(model, rope_theta), above(0), "RoPE base frequency (PoPE's too: theta_c = base^(-c/D))"},
      {GPT_KEY(model, rope_pairing), one_of({"half", "interleaved"}),
       "RoPE's channel pairs: half (i with i + d/2: GPT-NeoX, Llama, Qwen) or interleaved (2i with 2i + 1: GPT-J, "
       "RoFormer)"},
      {GPT_KEY(model, rope_fraction), above_up_to(0, 1),
       "partial RoPE: share f of each head's channels rotated (d_r = f·D rounded down to even, >= 2); 1 = all"},
      {GPT_KEY(model, p_rope), above_up_to(0, 1),
       "p-RoPE (Barbero et al. 2025): the share p of RoPE's frequency pairs that turn, the highest, at their own "
       "frequencies; pairs k >= floor(p·d_r/2) (the lowest frequencies) do not turn. 1 = all. Not rope_fraction, "
       "which rotates fewer channels over the whole spectrum"},
      {GPT_KEY(model, max_position), between(0, kMaxVocab), "rows of the learned position table; 0 = context"},
      {GPT_KEY(model, init_std), above(0), "standard deviation of the weight init"},
      {GPT_KEY(model, block), one_of(block_preset_names()),
       "block preset: fills the block keys a config leaves out as the architecture's Hugging Face config class "
       "does (llama, neox, qwen2, qwen3; gpt2 = the defaults); custom = none (docs/blocks.md)"},
      {GPT_KEY(model, n_kv_head), between(0, 256),
       "key/value heads of grouped-query attention, dividing n_head (1 = multi-query); 0 = n_head (every query head "
       "its own)"},
      {GPT_KEY(model, norm), one_of({"layernorm", "rmsnorm"}),
       "the block's normalisation: layernorm (gain and bias, GPT-2) or rmsnorm (gain only, Llama); docs/blocks.md"},
      {GPT_KEY(model, norm_eps), above(0), "RMSNorm's eps inside the root (LayerNorm's is 1e-5)"},
      {GPT_KEY(model, mlp), one_of({"gelu", "gelu_erf", "swiglu", "relu2"}),
       "the MLP: gelu (tanh form, GPT-2), gelu_erf (exact erf form, GPT-NeoX/Pythia), swiglu (silu(gate)·up, Llama) "
       "or relu2 (relu(x)², Primer)"},
      {GPT_KEY(model, mlp_hidden), between(0, 1 << 20),
       "the MLP's hidden width F; 0 = 4·n_embd (gelu, gelu_erf, relu2) or 8·n_embd/3 rounded up to a multiple of 256 "
       "(swiglu)"},
      {GPT_KEY(model, bias), one_of({"all", "none", "qkv"}),
       "linear-layer biases: all (GPT-2), none (Llama) or qkv (the qkv projection only, Qwen2)"},
      {GPT_KEY(model, head), one_of({"tied", "untied"}),
       "the LM head: tied (the token embedding, GPT-2) or untied (a matrix of its own)"},
      {GPT_KEY(model, qk_norm), one_of({"none", "rms", "l2", "rms_full"}),
       "QK-norm before RoPE: each head's q and k RMS-normalised over its channels with a gain per channel shared by "
       "the heads (rms: Qwen3, Gemma 3) or none (l2: Llama 4), or the whole q and k projections with a gain per "
       "channel (rms_full: OLMo 2); eps model.norm_eps"},
      {GPT_KEY(model, qk_norm_scale), one_of({"none", "learned"}),
       "with QK-norm: learned = a learned scalar per query head (starting at 1) multiplying its normalised queries, "
       "so its logits (qkscale)"},
      {GPT_KEY(model, residual), one_of({"sequential", "parallel"}),
       "sequential: x + attn(ln1 x), then + mlp(ln2 ·); parallel: x + attn(ln1 x) + mlp(ln2 x) (GPT-NeoX)"},
      {GPT_KEY(model, regression_outputs), between(0, 16),
       "outputs of a regression head on the final norm's output (tensors regw, regb), beside the LM head; 0 = none. "
       "gpt probe force sets 1 when it fine-tunes a pretrained model to predict forces (docs/orbits.md)"},
      {GPT_KEY(model, layer_plan), one_of({"none", "swan", "irope"}),
       "per-layer plan (config/layer_plan.h): swan = pattern LLLG, L RoPE with a window of context/2, G NoPE with "
       "full attention (SWAN-GPT); irope = the same with G's llama4 temperature (Llama 4); model.layer_kinds amends "
       "their kinds"},
      {GPT_KEY(model, layer_pattern), any(),
       "one letter per layer, repeated over model.n_layer (\"LLLG\"), each a kind of model.layer_kinds; \"\" = the "
       "named plan's (or none)"},
      {GPT_KEY(model, layer_kinds), any(),
       "letter -> kind: {\"position\": rope|none, \"window\": 0 (full) or w (last w keys), \"temperature\": "
       "none|yarn|llama4, \"attention\": an attention section for that layer}; absent fields keep the run's"},

      {GPT_KEY(data, train), non_empty(), "glob pattern of the training shards"},
      {GPT_KEY(data, val), non_empty(), "glob pattern of the validation shards"},
      {GPT_KEY(data, order), one_of({"sequential", "shuffle"}), "order of training sequences"},
      {GPT_KEY(data, windows), one_of({"stream", "documents"}),
       "training windows: stream (every T tokens of the stream) or documents (each document cut into windows from "
       "its start: d, d+T, ...; documents open at data.tokenizer's end-of-text id)"},
      {GPT_KEY(data, tokenizer), non_empty(),
       "tokenizer of the shards: byte, gpt2:DIR or a vocabulary file (passkey text, gpt sample)"},
      {GPT_KEY(data, passkey_fraction), between(0, 1),
       "share of training sequences replaced by passkey-retrieval examples built from their own text"},
      {GPT_KEY(data, passkey_digits), between(1, 32), "digits of the passkey (training examples and eval)"},
      {GPT_KEY(data, mix_task), one_of(mix_task_names()),
       "synthetic task whose examples replace data.mix_fraction of the training sequences, their answers scored "
       "alone (gpt data synthetic's tasks; ids above the text vocabulary)"},
      {GPT_KEY(data, mix_fraction), between(0, 1), "share of training sequences replaced by data.mix_task examples"},
      {GPT_KEY(data, mix_options), any(),
       "data.mix_task's options, as gpt data synthetic takes them ({\"pairs\": 4}; missing ones take their defaults)"},

      {GPT_KEY(train, batch_size), at_least(1), "sequences B per micro-batch"},
      {GPT_KEY(train, grad_accum), at_least(1), "micro-batches per optimizer step"},
      {GPT_KEY(train, steps), at_least(1), "optimizer steps"},
      {GPT_KEY(train, lr), above(0), "peak learning rate"},
      {GPT_KEY(train, lr_min), at_least(0), "floor of the decay; <= lr"},
      {GPT_KEY(train, warmup_steps), at_least(0), "linear warmup steps; <= steps"},
      {GPT_KEY(train, lr_schedule), one_of({"cosine", "wsd"}),
       "after the warmup: cosine = half a cosine from lr to lr_min over the remaining steps; wsd = warmup-stable-"
       "decay, lr held until the last train.decay_fraction of the steps, then linear to lr_min (a run's prefix is "
       "then the same at every budget: gpt sweep \"budget_reuse\")"},
      {GPT_KEY(train, decay_fraction), between(0, 1), "wsd: the share of the steps that decays (rounded up)"},
      {GPT_KEY(train, weight_decay), at_least(0), "AdamW decoupled weight decay"},
      {GPT_KEY(train, beta1), unit_interval(), "AdamW first-moment decay"},
      {GPT_KEY(train, beta2), unit_interval(), "AdamW second-moment decay"},
      {GPT_KEY(train, eps), above(0), "AdamW epsilon"},
      {GPT_KEY(train, grad_clip), at_least(0), "max global gradient norm; 0 disables clipping"},
      {GPT_KEY(train, seed), any(), "seed of the initialisation and the data order"},
      {GPT_KEY(train, log_every), at_least(1), "steps between log lines"},
      {GPT_KEY(train, checkpoint_every), at_least(0), "steps between checkpoints; 0 = only at the end"},
      {GPT_KEY(train, checkpoint_steps), increasing_list(1, false),
       "further steps to checkpoint at (e.g. where shorter budgets branch off); [] = none"},
      {GPT_KEY(train, threads), between(0, 1024), "OpenMP threads; 0 = all cores"},
      {GPT_KEY(train, init_from), any(),
       "checkpoint, run dir or Hugging Face model dir whose parameters of the same name and shape initialise a "
       "fresh run (fine-tuning); \"\" = none"},
      {GPT_KEY(train, zero), between(0, 1), "ZeRO-1 with several ranks: 1 shards the optimizer state across the ranks"},
      {GPT_KEY(train, overlap_reduce), between(0, 1),
       "several ranks: 1 starts each layer's gradient all-reduce as soon as its backward pass is done, 0 reduces "
       "all gradients after the backward pass"},
      {GPT_KEY(train, optimizer), one_of({"adamw", "muon"}),
       "adamw, or muon: Muon (Newton-Schulz-orthogonalised Nesterov momentum) for the per-layer weight matrices, "
       "AdamW for the embeddings, the head, gains, biases and learned scalars (docs/optimizers.md)"},
      {GPT_KEY(train, muon_lr), above(0), "Muon's peak learning rate (scheduled like train.lr)"},
      {GPT_KEY(train, muon_momentum), unit_interval(), "Muon's Nesterov momentum"},
      {GPT_KEY(train, muon_weight_decay), at_least(0), "Muon's decoupled weight decay"},
      {GPT_KEY(train, positions), one_of({"plain", "pose", "randomized"}),
       "training-time position ids for RoPE, PoPE, ALiBi, KERPLE and FIRE: plain (0..T-1), pose (PoSE: the window in chunks whose ids "
       "skip ahead, spanning position_span) or randomized (T sorted distinct ids of 0..position_span-1); evaluation "
       "always uses plain positions"},
      {GPT_KEY(train, position_span), between(0, kMaxContext),
       "L, the span the training position ids reach (ids 0..L-1); 0 = 16·model.context"},
      {GPT_KEY(train, pose_chunks), between(1, kMaxContext), "PoSE's chunks per training window (2 in the paper)"},
      {GPT_KEY(train, document_mask), one_of({"off", "on"}),
       "on: each training query sees only the keys of its own document (documents open at data.tokenizer's "
       "end-of-text id); masked key tiles are skipped. Evaluation is unmasked"},
      {GPT_KEY(train, window_start), between(0, kMaxContext),
       "window warm-up: training attends through a sliding window of this many keys, growing in stages of it to "
       "full attention over train.window_steps steps (modded-nanogpt's window warm-up); 0 = off. Evaluation is "
       "unwindowed"},
      {GPT_KEY(train, window_steps), at_least(0), "the steps over which the window warm-up reaches full attention"},
      {GPT_KEY(train, length_start), between(0, kMaxContext),
       "length schedule: training windows of this many tokens, doubling to model.context over train.length_steps "
       "steps (each step's tokens cut into more, shorter windows; model.context / it a power of two); 0 = off"},
      {GPT_KEY(train, length_steps), at_least(0), "the steps over which the length schedule reaches model.context"},
      {GPT_KEY(train, grow_yarn), one_of({"off", "on"}),
       "on: at each switch of the window warm-up or the length schedule (w to w' keys), YaRN's rule rescales "
       "RoPE's frequencies by their turns in w and the logits by (0.1 ln(w'/w) + 1)^2, as modded-nanogpt does; "
       "evaluation keeps the last stage's frequencies"},
      {GPT_KEY(train, document_positions), one_of({"continue", "restart"}),
       "with the document mask, restart: position ids (plain or train.positions ids) count from each "
       "document's first token"},

      {GPT_KEY(eval, multiples), increasing_list(1), "evaluated contexts, as multiples of model.context"},
      {GPT_KEY(eval, tokens), at_least(1), "validation tokens evaluated at each multiple"},
      {GPT_KEY(eval, every), at_least(0), "evaluate every N steps; 0 = only at the end"},
      {GPT_KEY(eval, profile_buckets), between(1, 4096), "buckets of the per-position loss profile"},
      {GPT_KEY(eval, span), between(0, 1LL << 40),
       "tokens of each scored window (the same tokens at every multiple, cut into sequences of m * model.context); "
       "0 = 16 * model.context"},
      {GPT_KEY(eval, protocol), one_of(std::vector<std::string_view>(eval_protocols().begin(), eval_protocols().end())),
       "chunks: non-overlapping sequences of m * model.context; sliding: windows of m * model.context advanced by "
       "eval.stride, scoring their last eval.stride positions; documents: windows opening documents that hold a "
       "whole span; llamacpp: llama.cpp's perplexity, chunks scoring only positions m*T/2 .. m*T - 2"},
      {GPT_KEY(eval, stride), between(0, 1 << 24), "sliding protocol: the stride S in tokens; 0 = model.context"},

      {GPT_KEY(attention, preset), one_of(preset_names()), "named attention variant (docs/attention.md)"},
      {GPT_KEY(attention, score), one_of(stage_names(kScoreNames)), "stage 1; \"preset\": the preset's"},
      {GPT_KEY(attention, scale), one_of(stage_names(kScaleNames)), "stage 2; \"preset\": the preset's"},
      {GPT_KEY(attention, positivity), one_of(stage_names(kPositivityNames)), "stage 3; \"preset\": the preset's"},
      {GPT_KEY(attention, normalize), one_of(stage_names(kNormalizeNames)), "stage 4; \"preset\": the preset's"},
      {GPT_KEY(attention, p), at_least(0),
       "stage 5, re-weighting exponent (0 = none); null: the preset's (lssar 15, else 0)"},
      {GPT_KEY(attention, offset_rows), between(0, kMaxContext), "re-weighting offset o_i is 0 for rows i <= this"},
      {GPT_KEY(attention, cosine_scale), above(0), "factor s of cosine scores; null: the preset's (cosine 32, else 1)"},
      {GPT_KEY(attention, scale_value), any(), "the factor of scale \"fixed\""},
      {GPT_KEY(attention, tau), above(0),
       "tau of scale \"scale_invariant\" (Anson et al. 2025): a key at distance t gets logit a_t x + m_t, "
       "a_t = sqrt(2 ln(t/tau + 1) + 1), m_t = -2 ln(t/tau + 1); the paper's best 10"},
      {GPT_KEY(attention, bias), any(),
       "added to the scores before positivity; null: -ln N for sigmoid (not under stick_breaking), else 0"},
      {GPT_KEY(attention, norm_const), above(0), "divisor of normalize \"fixed\"; null: N = model.context"},
      {GPT_KEY(attention, softcap), at_least(0),
       "logit soft-cap c (Gemma 2): every logit x (after scale, bias and position bias) becomes c tanh(x / c) "
       "before positivity; 0 = none (Gemma 2 uses 50)"},
      {GPT_KEY(attention, differential), one_of({"none", "on"}),
       "differential attention (Ye et al. 2024): each head's q and k split into halves, the two maps subtracted "
       "with a learned lambda, each head RMS-normalised with a learned gain and scaled by 1 - lambda_init"},
      {GPT_KEY(attention, output_gate), one_of({"none", "sigmoid"}),
       "gated attention (docs/contenders.md; Qiu et al. 2025, G1): sigmoid multiplies each head's output by "
       "sigmoid(x W_g + b_g), x the layer's normalised input, W_g (C x C) and b_g learned, before the output "
       "projection"},
      {GPT_KEY(attention, position_bias), one_of(names_of(kPositionBiasNames)),
       "stage 2's position bias b_h(i - j) (docs/contenders.md): alibi -m_h (i-j) (also model.position \"alibi\"), "
       "kerple_log -r1 ln(1 + r2 (i-j)), kerple_power -r1 (i-j)^r2, r1, r2 learned per layer and head; forget "
       "sum_{l=j+1..i} ln f_l, f_t = sigmoid(w_h x_t + b_h) learned (the Forgetting Transformer); fire an MLP "
       "1-32-H of ln(c (i-j) + 1) / ln(c max(i, L) + 1), MLP, c and L = m N/4 learned per layer"},

      {GPT_KEY(context, rope_scaling), one_of(names_of(kRopeScalingNames)),
       "RoPE frequency rule past the training context (docs/context_extension.md §1): pi, ntk, dynamic_ntk, yarn, "
       "llama3"},
      {GPT_KEY(context, factor), at_least(0),
       "scale factor s of the rope rule: 0 = evaluated length / model.context per window, or a fixed s >= 1"},
      {GPT_KEY(context, beta_fast), above(0), "yarn: pairs rotating more than this often in N keep their frequency"},
      {GPT_KEY(context, beta_slow), above(0), "yarn: pairs rotating fewer times than this in N are interpolated"},
      {GPT_KEY(context, yarn_truncate), between(0, 1),
       "yarn: 1 = the ramp's ends floored and ceiled to whole pairs (the paper, transformers' default); 0 = exact "
       "(transformers' truncate false, gpt-oss)"},
      {GPT_KEY(context, low_freq), above(0), "llama3 low_freq_factor l_f (wavelengths above N/l_f are interpolated)"},
      {GPT_KEY(context, high_freq), above(0), "llama3 high_freq_factor h_f (wavelengths below N/h_f are kept)"},
      {GPT_KEY(context, dynamic_alpha), above(0), "dynamic_ntk α: base b·(α·L/N − α + 1)^(d_r/(d_r−2)) for L > N"},
      {GPT_KEY(context, attn_factor), above(0),
       "YaRN's attention factor t (logits × t²) with rope_scaling or temperature yarn; null: 0.1·ln s + 1"},
      {GPT_KEY(context, mask), one_of(names_of(kContextMaskNames)),
       "keys a query sees: none, window (the last w keys), sinks (StreamingLLM: the first k_s keys and the last w), "
       "lambda (LM-Infinite: n_global first keys, n_local last ones, distances capped at n_local), chunked (Llama 4's "
       "chunked local attention: the keys of the query's own chunk of w tokens)"},
      {GPT_KEY(context, window), between(0, kMaxContext),
       "w of mask window/sinks, the chunk of mask chunked, n_local of lambda; 0 = model.context (sinks: minus k_s)"},
      {GPT_KEY(context, sinks), between(0, kMaxContext),
       "k_s, the sink keys of mask sinks (0 = 4), or n_global of lambda (0 = 10); 0 with other masks"},
      {GPT_KEY(context, sink_positions), one_of(names_of(kSinkPositionsNames)),
       "mask sinks: sink keys at their original positions, or at cache positions (StreamingLLM: a sink is seen at "
       "distance min(m, k_s + w - 1) - n)"},
      {GPT_KEY(context, remap), one_of(names_of(kContextRemapNames)),
       "relative-distance remapping (docs/context_extension.md §2): rerope (distances beyond w seen as w), self_extend "
       "(grouped distances beyond w_n), string (STRING: distances d >= S seen as d - S + W), dual_chunk (Dual Chunk "
       "Attention, ChunkLlama: chunks of s tokens; keys of earlier chunks seen at s + w - (n mod s))"},
      {GPT_KEY(context, remap_window), between(0, kMaxContext),
       "rerope w (0 = model.context/2), self_extend neighbour window w_n (0 = model.context/4), string shift S (0 = "
       "floor(0.33 model.context)), dual_chunk s + w, chunk plus local window (0 = floor(3 model.context/4))"},
      {GPT_KEY(context, remap_local), between(0, kMaxContext),
       "string: W, the distance the first shifted key (d = S) is seen at; 0 = max(1, model.context/1024), the "
       "paper's 128 at 128K; dual_chunk: w, the local window (0 = floor(model.context/16))"},
      {GPT_KEY(context, rerope_kappa), at_least(0),
       "rerope: 0 = distances beyond w are w; kappa > 1: w + (d - w)/kappa"},
      {GPT_KEY(context, group), between(0, kMaxContext),
       "self_extend group size G; 0 = per evaluated length L the smallest G with (L - w_n)/G + w_n <= model.context"},
      {GPT_KEY(context, row_index), one_of(names_of(kRowIndexNames)),
       "with a mask, the i of the logn/ssmax/infoscale/lssa scales and of re-weighting: the query position or the "
       "number of keys kept"},
      {GPT_KEY(context, temperature), one_of(names_of(kTemperatureNames)),
       "length-dependent temperature: yarn (logits × t², no frequency change), llama4 (q × 1 + β·ln(⌊i/F⌋ + 1)), "
       "swan (SWAN-GPT: logits of the NoPE layers × log_a(m + a), m the 0-based query position)"},
      {GPT_KEY(context, temp_beta), at_least(0), "llama4 temperature β"},
      {GPT_KEY(context, logit_scale), above(0),
       "a global temperature: every attention logit times this (what gpt eval --calibrate temperature fits)"},
      {GPT_KEY(context, temp_floor), between(0, kMaxContext), "llama4 temperature F; 0 = model.context"},
      {GPT_KEY(context, temp_base), at_least(0),
       "swan temperature a (log base and offset, > 1; the paper tunes it: gpt eval --calibrate swan_base); 0 = "
       "model.context"},
      {GPT_KEY(context, head_scale), between(0, 1),
       "1 = HeadScale: every q.k logit of a head times a learned temperature tau_h of its layer (the attnscale "
       "tensor); a checkpoint without it starts at tau = 1 (unchanged) and gpt eval --calibrate head_scale fits "
       "them"},

      {GPT_KEY(run, dir), non_empty(), "run directory (logs, checkpoints, results)"},
      {GPT_KEY(run, device), one_of({"cpu", "cuda"}), "compute backend"},
      {GPT_KEY(run, precision), one_of({"fp32", "tf32", "bf16"}),
       "GEMMs of the linear layers on cuda: fp32 strict float32, tf32 tensor cores, bf16 operands with float32 "
       "accumulation (and attention on tensor cores, bf16 q, k, v and weights: the forward in evaluation and "
       "sampling, both directions in training where the backward has tensor-core kernels, head size 64); cpu: fp32 "
       "only"},
      {GPT_KEY(run, storage), one_of({"fp32", "bf16"}),
       "activations and the parameters the ops read: fp32, or bf16 (rounded from float32 master parameters; "
       "gradients, AdamW state, statistics and losses stay float32); cpu and cuda"},
  };
}

#undef GPT_KEY

// d_r: the rotated channels of a head under model.rope_fraction.
int rope_dims(const Config& c) { return rope_rotated_dims(c.model); }
// Keys a masked row can keep: window plus sinks (the defaults as
// resolve_attention fills them in).
int64_t mask_reach(const Config& c) {
  const int64_t N = c.model.context;
  const int64_t sinks = c.context.mask == "sinks"    ? (c.context.sinks > 0 ? c.context.sinks : 4)
                        : c.context.mask == "lambda" ? (c.context.sinks > 0 ? c.context.sinks : 10)
                                                     : 0;
  const int64_t w = c.context.window > 0 ? c.context.window : c.context.mask == "sinks" ? N - sinks : N;
  return w + sinks;
}
// The longest context a run evaluates (or trains) at: max(eval.multiples) · N, at least N.
int64_t longest_context(const Config& c) {
  const int64_t m = c.eval.multiples.empty() ? 1 : std::max(1, c.eval.multiples.back());
  return std::max<int64_t>(m * c.model.context, c.model.context);
}
bool remaps(const Config& c) {
  return c.context.remap != "none" || c.context.mask == "lambda" || c.context.sink_positions == "cache";
}

std::vector<Rule> make_rules() {
  std::vector<Rule> rules = {
      {"\"data.mix_task\" and \"data.mix_fraction\" > 0 go together: a task mixed into training needs a share of "
       "the sequences, and a share needs a task",
       {"data.mix_task", "data.mix_fraction"},
       [](const Config& c) { return (c.data.mix_task == "none") == (c.data.mix_fraction == 0); }},
      {"\"data.mix_options\" belong to \"data.mix_task\"",
       {"data.mix_options", "data.mix_task"},
       [](const Config& c) { return c.data.mix_task != "none" || c.data.mix_options.empty(); }},
      {"\"model.n_kv_head\" must divide \"model.n_head\" (each key/value head serves a group of query heads)",
       {"model.n_kv_head", "model.n_head"},
       [](const Config& c) { return c.model.n_kv_head == 0 || c.model.n_head % c.model.n_kv_head == 0; }},
      {"\"train.muon_lr\", \"train.muon_momentum\" and \"train.muon_weight_decay\" apply to \"train.optimizer\" = "
       "\"muon\"",
       {"train.muon_lr", "train.muon_momentum", "train.muon_weight_decay", "train.optimizer"},
       [](const Config& c) {
         const TrainConfig d;
         return c.train.optimizer == "muon" ||
                (c.train.muon_lr == d.muon_lr && c.train.muon_momentum == d.muon_momentum &&
                 c.train.muon_weight_decay == d.muon_weight_decay);
       }},
      {"\"model.norm_eps\" applies to \"model.norm\" = \"rmsnorm\" and to \"model.qk_norm\"; LayerNorm's eps is "
       "1e-5",
       {"model.norm_eps", "model.norm", "model.qk_norm"},
       [](const Config& c) {
         return c.model.norm == "rmsnorm" || c.model.qk_norm != "none" || c.model.norm_eps == 1e-5;
       }},
      {"\"model.qk_norm_scale\" scales each head's logits after a per-head QK-norm: it needs \"model.qk_norm\" = "
       "\"rms\" or \"l2\" (with rms_full the op normalises the whole projection, not heads; not built)",
       {"model.qk_norm_scale", "model.qk_norm"},
       [](const Config& c) {
         return c.model.qk_norm_scale == "none" || c.model.qk_norm == "rms" || c.model.qk_norm == "l2";
       }},
      {"\"model.qk_norm\" = \"rms_full\" (OLMo 2) normalises the whole key projection, NKV·D channels with one gain "
       "each; with grouped key/value heads (\"model.n_kv_head\" < \"model.n_head\") this project normalises the "
       "repeated keys, whose gains would have to be tied within each group: not built",
       {"model.qk_norm", "model.n_kv_head", "model.n_head"},
       [](const Config& c) { return c.model.qk_norm != "rms_full" || c.model.kv_heads() == c.model.n_head; }},
      {"\"model.qk_norm\" normalises q and k, which \"attention.score\" = \"cosine\" already does (its scores "
       "are scale-free in both)",
       {"model.qk_norm", "attention.score", "attention.preset"},
       [](const Config& c) { return c.model.qk_norm == "none" || resolve_attention(c).score != Score::Cosine; }},
      {"\"model.n_embd\" must be divisible by \"model.n_head\" unless \"model.head_dim\" sets the head width",
       {"model.n_embd", "model.n_head", "model.head_dim"},
       [](const Config& c) { return c.model.head_dim > 0 || c.model.n_embd % c.model.n_head == 0; }},
      {"\"model.position\" = \"rope\" needs an even head size (\"model.head_dim\", or \"model.n_embd\" / "
       "\"model.n_head\")",
       {"model.position", "model.head_dim", "model.n_embd", "model.n_head"},
       [](const Config& c) { return c.model.position != "rope" || c.model.head_size() % 2 == 0; }},
      {"\"model.max_position\" must be 0 or >= \"model.context\" when \"model.position\" = \"learned\"",
       {"model.max_position", "model.context", "model.position"},
       [](const Config& c) {
         return c.model.position != "learned" || c.model.max_position == 0 || c.model.max_position >= c.model.context;
       }},
      {"the attention scales logn, ssmax and infoscale and sigmoid's default bias -ln N need \"model.context\" >= 2",
       {"model.context", "attention.preset", "attention.scale", "attention.positivity"},
       [](const Config& c) {
         const AttentionSpec s = resolve_attention(c);
         const bool uses_ln_n = s.scale == Scale::Logn || s.scale == Scale::Ssmax || s.scale == Scale::Infoscale ||
                                (s.positivity == Positivity::Sigmoid && !attn::stick_breaking(s) && !c.attention.bias);
         return c.model.context >= 2 || !uses_ln_n;
       }},
      {"\"train.positions\" pose and randomized give the position encoding its position ids: they need a layer with "
       "RoPE, PoPE, ALiBi, KERPLE or FIRE (their distances taken between ids) and none of the learned table "
       "(model.context rows), \"attention.scale\" = \"scale_invariant\" or a distance remapping, whose distances "
       "the attention kernels take from token indices; \"train.position_span\" must be at least \"model.context\" "
       "and \"train.pose_chunks\" at most it",
       {"train.positions", "train.position_span", "train.pose_chunks", "model.position", "model.context",
        "attention.position_bias", "attention.scale", "model.layer_plan", "model.layer_pattern", "model.layer_kinds"},
       [](const Config& c) {
         if (c.train.positions == "plain") return true;
         if (c.train.position_span != 0 && c.train.position_span < c.model.context) return false;
         if (c.train.pose_chunks > c.model.context) return false;
         return position_ids_refusal(c.model, layer_attention(c.model, resolve_attention(c))).empty();
       }},
      {"\"train.window_start\" (the window warm-up) must be below \"model.context\", with \"train.window_steps\" >= 1; "
       "it sets the training mask itself, so it needs \"context.mask\" = \"none\", no per-layer plan and no distance "
       "remapping",
       {"train.window_start", "train.window_steps", "model.context", "context.mask", "context.remap",
        "model.layer_plan", "model.layer_pattern"},
       [](const Config& c) {
         if (c.train.window_start == 0) return true;
         return c.train.window_start < c.model.context && c.train.window_steps >= 1 && c.context.mask == "none" &&
                c.context.remap == "none" && resolve_layer_plan(c.model).empty();
       }},
      {"\"train.length_start\" (the length schedule) must be below \"model.context\", with \"model.context\" / it "
       "a power of two and \"train.length_steps\" >= 1; it does not compose with the window warm-up "
       "(train.window_start)",
       {"train.length_start", "train.length_steps", "model.context", "train.window_start"},
       [](const Config& c) {
         const int l0 = c.train.length_start, n = c.model.context;
         if (l0 == 0) return true;
         if (l0 >= n || n % l0 != 0 || c.train.length_steps < 1 || c.train.window_start != 0) return false;
         const int f = n / l0;
         return (f & (f - 1)) == 0;
       }},
      {"\"train.grow_yarn\" = \"on\" grows RoPE's frequencies with a growing schedule: it needs \"train.window_start\" "
       "or \"train.length_start\" > 0, \"model.position\" = \"rope\" and at most 17 stages",
       {"train.grow_yarn", "train.window_start", "train.length_start", "model.position", "model.context"},
       [](const Config& c) {
         if (c.train.grow_yarn == "off") return true;
         const size_t stages = growth_stages(c.train, c.model.context).size();
         return c.model.position == "rope" && stages >= 2 && stages <= RopeSpec::kMaxGrowth + 1u;
       }},
      {"\"train.document_mask\" = \"on\" masks keys of other documents: it does not compose with the sink keys of "
       "\"context.mask\" sinks or lambda (they would reach across documents) or with a distance remapping",
       {"train.document_mask", "context.mask", "context.remap"},
       [](const Config& c) {
         return c.train.document_mask == "off" ||
                (c.context.mask != "sinks" && c.context.mask != "lambda" && c.context.remap == "none");
       }},
      {"\"train.document_positions\" = \"restart\" counts positions from each document's start: it needs "
       "\"train.document_mask\" = \"on\" and a model the position ids reach (as \"train.positions\")",
       {"train.document_positions", "train.document_mask", "model.position"},
       [](const Config& c) {
         if (c.train.document_positions == "continue") return true;
         return c.train.document_mask == "on" &&
                position_ids_refusal(c.model, layer_attention(c.model, resolve_attention(c))).empty();
       }},
      {"\"model.position\" = \"alibi\" is the alibi bias: \"attention.position_bias\" must then be \"none\" or "
       "\"alibi\"",
       {"model.position", "attention.position_bias"},
       [](const Config& c) {
         return c.model.position != "alibi" || c.attention.position_bias == "none" ||
                c.attention.position_bias == "alibi";
       }},
      {"\"attention.differential\" = \"on\" splits each head's q and k into two halves: the head size "
       "(\"model.head_dim\", or \"model.n_embd\" / \"model.n_head\") must be even, and a multiple of 4 with "
       "\"model.position\" = \"rope\" (each half is rotated on its own)",
       {"attention.differential", "model.head_dim", "model.n_embd", "model.n_head", "model.position"},
       [](const Config& c) {
         if (c.attention.differential != "on") return true;
         return c.model.head_size() % (c.model.position == "rope" ? 4 : 2) == 0;
       }},
      {"\"model.position\" = \"pope\" runs each head as one kernel head of 2D channels; \"attention.differential\" "
       "splits heads into halves of their own: use one of them",
       {"model.position", "attention.differential"},
       [](const Config& c) { return c.model.position != "pope" || c.attention.differential != "on"; }},
      {"\"model.rope_fraction\" must rotate an even number >= 2 of each head's channels (f·D >= 2) and applies only "
       "to \"model.position\" = \"rope\"",
       {"model.rope_fraction", "model.position", "model.head_dim", "model.n_embd", "model.n_head"},
       [](const Config& c) {
         if (c.model.position != "rope") return c.model.rope_fraction == 1.0;
         return rope_dims(c) >= 2;
       }},
      {"\"model.p_rope\" < 1 keeps some of RoPE's frequencies: it needs \"model.position\" = \"rope\" and at least "
       "one turning pair per head (floor(p·d_r/2) >= 1)",
       {"model.p_rope", "model.position", "model.rope_fraction", "model.head_dim", "model.n_embd", "model.n_head"},
       [](const Config& c) {
         if (c.model.p_rope == 1.0) return true;
         return c.model.position == "rope" && rope::kept_pairs(resolve_attention(c).rope, rope_dims(c)) >= 1;
       }},
      {"\"context.head_scale\" = 1 (HeadScale's tau_h) cannot join \"attention.scale\" = \"ssmax\", whose learned s_h "
       "is already a per-head temperature held in the same tensor, nor \"scale_invariant\", whose per-distance "
       "logit shift the temperature would leave unscaled (in any layer)",
       {"context.head_scale", "attention.preset", "attention.scale", "model.layer_plan", "model.layer_pattern",
        "model.layer_kinds"},
       [](const Config& c) {
         if (c.context.head_scale == 0) return true;
         for (const LayerAttention& l : layer_attention(c.model, resolve_attention(c)))
           if (l.spec.scale == Scale::Ssmax || l.spec.scale == Scale::ScaleInvariant) return false;
         return true;
       }},
      {"\"context.yarn_truncate\" = 0 (the exact ramp) belongs to \"context.rope_scaling\" = \"yarn\"",
       {"context.yarn_truncate", "context.rope_scaling"},
       [](const Config& c) { return c.context.yarn_truncate == 1 || c.context.rope_scaling == "yarn"; }},
      {"\"context.rope_scaling\" changes RoPE's frequencies and needs \"model.position\" = \"rope\"",
       {"context.rope_scaling", "model.position"},
       [](const Config& c) { return c.context.rope_scaling == "none" || c.model.position == "rope"; }},
      {"\"context.factor\" must be 0 (evaluated length / model.context) or a fixed s >= 1",
       {"context.factor"},
       [](const Config& c) { return c.context.factor == 0 || c.context.factor >= 1; }},
      {"\"context.rope_scaling\" = \"dynamic_ntk\" recomputes its base from each evaluated length: leave "
       "\"context.factor\" at 0 and set \"context.dynamic_alpha\" instead",
       {"context.rope_scaling", "context.factor"},
       [](const Config& c) { return c.context.rope_scaling != "dynamic_ntk" || c.context.factor == 0; }},
      {"\"context.rope_scaling\" ntk and dynamic_ntk need at least 4 rotated channels per head (d_r/(d_r-2))",
       {"context.rope_scaling", "model.rope_fraction", "model.head_dim", "model.n_embd", "model.n_head"},
       [](const Config& c) {
         const bool ntk = c.context.rope_scaling == "ntk" || c.context.rope_scaling == "dynamic_ntk";
         return !ntk || rope_dims(c) >= 4;
       }},
      {"yarn needs \"context.beta_fast\" > \"context.beta_slow\"",
       {"context.rope_scaling", "context.beta_fast", "context.beta_slow"},
       [](const Config& c) { return c.context.rope_scaling != "yarn" || c.context.beta_fast > c.context.beta_slow; }},
      {"llama3 needs \"context.high_freq\" > \"context.low_freq\"",
       {"context.rope_scaling", "context.high_freq", "context.low_freq"},
       [](const Config& c) { return c.context.rope_scaling != "llama3" || c.context.high_freq > c.context.low_freq; }},
      {"\"context.attn_factor\" is YaRN's attention factor: it needs \"context.rope_scaling\" = \"yarn\" or "
       "\"context.temperature\" = \"yarn\"",
       {"context.attn_factor", "context.rope_scaling", "context.temperature"},
       [](const Config& c) {
         return !c.context.attn_factor || c.context.rope_scaling == "yarn" || c.context.temperature == "yarn";
       }},
      {"\"context.temp_base\" is the swan temperature's a: 0 (model.context) or > 1 (log_a needs a > 1)",
       {"context.temp_base"},
       [](const Config& c) { return c.context.temp_base == 0 || c.context.temp_base > 1; }},
      {"\"context.temperature\" = \"swan\" scales the layers without position encoding (SWAN-GPT's NoPE layers); "
       "this model has none: use \"model.position\" = \"none\" or a layer plan with NoPE layers (model.layer_plan "
       "= swan)",
       {"context.temperature", "model.position", "model.layer_plan", "model.layer_pattern", "model.layer_kinds"},
       [](const Config& c) {
         if (c.context.temperature != "swan") return true;
         for (const LayerAttention& la : layer_attention(c.model, resolve_attention(c)))
           if (la.spec.temperature == Temperature::Swan) return true;
         return false;
       }},
      {"\"context.rope_scaling\" = \"yarn\" already applies YaRN's attention factor; \"context.temperature\" = "
       "\"yarn\" is that factor alone (without the frequency change): use one of them",
       {"context.rope_scaling", "context.temperature"},
       [](const Config& c) { return !(c.context.rope_scaling == "yarn" && c.context.temperature == "yarn"); }},
      {"\"context.window\" and \"context.row_index\" = \"keys\" need a mask: \"context.mask\" = \"window\", \"sinks\", "
       "\"lambda\" or \"chunked\"",
       {"context.window", "context.row_index", "context.mask"},
       [](const Config& c) {
         return c.context.mask != "none" || (c.context.window == 0 && c.context.row_index == "position");
       }},
      {"\"context.sinks\" counts the sink keys of \"context.mask\" = \"sinks\" or \"lambda\"; other masks have none",
       {"context.sinks", "context.mask"},
       [](const Config& c) { return c.context.sinks == 0 || c.context.mask == "sinks" || c.context.mask == "lambda"; }},
      {"\"context.mask\" = \"sinks\" with the default window N - k_s needs \"context.sinks\" < \"model.context\"",
       {"context.mask", "context.sinks", "context.window", "model.context"},
       [](const Config& c) {
         return c.context.mask != "sinks" || c.context.window > 0 ||
                (c.context.sinks > 0 ? c.context.sinks : 4) < c.model.context;
       }},
      {"the mask would never hide a key: \"context.window\" (plus \"context.sinks\" for mask sinks) must be "
       "smaller than the longest context it runs at, max(\"eval.multiples\") * \"model.context\"",
       {"context.mask", "context.window", "context.sinks", "eval.multiples", "model.context"},
       [](const Config& c) {
         if (c.context.mask == "none") return true;
         return mask_reach(c) < longest_context(c);
       }},
      {"a distance remapping (\"context.remap\", \"context.mask\" = \"lambda\", \"context.sink_positions\" = "
       "\"cache\") rotates q and k at other positions and needs \"model.position\" = \"rope\"; on alibi or none "
       "positions use mask window or sinks",
       {"context.remap", "context.mask", "context.sink_positions", "model.position"},
       [](const Config& c) { return !remaps(c) || c.model.position == "rope"; }},
      {"one distance remapping at a time: \"context.remap\", \"context.mask\" = \"lambda\" (its distance cap) and "
       "\"context.sink_positions\" = \"cache\" each remap distances",
       {"context.remap", "context.mask", "context.sink_positions"},
       [](const Config& c) {
         return (c.context.remap != "none") + (c.context.mask == "lambda") + (c.context.sink_positions == "cache") <= 1;
       }},
      {"\"context.sink_positions\" = \"cache\" needs \"context.mask\" = \"sinks\"",
       {"context.sink_positions", "context.mask"},
       [](const Config& c) { return c.context.sink_positions == "original" || c.context.mask == "sinks"; }},
      {"a distance remapping composes with the frequency rule yarn only (YaRN + ReRoPE, as in the YaRN repository); "
       "not with pi, ntk, dynamic_ntk or llama3 (string, which shifts positions only, composes with every rule, as "
       "its authors run it on Llama 3.1's llama3 frequencies)",
       {"context.remap", "context.mask", "context.sink_positions", "context.rope_scaling"},
       [](const Config& c) {
         return !remaps(c) || c.context.remap == "string" || c.context.rope_scaling == "none" ||
                c.context.rope_scaling == "yarn";
       }},
      {"\"context.remap_local\" is STRING's W or dual chunk attention's local window w: it needs "
       "\"context.remap\" = \"string\" with W < the shift S (\"context.remap_window\"; a W >= S would lengthen the "
       "distances it shifts) or \"dual_chunk\" with w < the chunk s = \"context.remap_window\" - w",
       {"context.remap_local", "context.remap", "context.remap_window", "model.context"},
       [](const Config& c) {
         if (c.context.remap != "string" && c.context.remap != "dual_chunk") return c.context.remap_local == 0;
         const RopeSpec r = resolve_attention(c).rope;  // with the defaults
         return c.context.remap == "string" ? r.remap_local < r.remap_window
                                            : r.remap_local < remap::dca_chunk(r);
       }},
      {"dual_chunk sees no distance beyond s + w (\"context.remap_window\"): it must be below \"model.context\", "
       "the distances the model was trained on",
       {"context.remap", "context.remap_window", "model.context"},
       [](const Config& c) {
         return c.context.remap != "dual_chunk" || resolve_attention(c).rope.remap_window < c.model.context;
       }},
      {"\"context.remap_window\", \"context.rerope_kappa\" and \"context.group\" need \"context.remap\"",
       {"context.remap_window", "context.rerope_kappa", "context.group", "context.remap"},
       [](const Config& c) {
         return c.context.remap != "none" ||
                (c.context.remap_window == 0 && c.context.rerope_kappa == 0 && c.context.group == 0);
       }},
      {"\"context.rerope_kappa\" must be 0 (distances beyond w are w) or > 1 (the leaky form; 1 changes nothing)",
       {"context.rerope_kappa"},
       [](const Config& c) { return c.context.rerope_kappa == 0 || c.context.rerope_kappa > 1; }},
      {"self_extend needs a neighbour window \"context.remap_window\" < \"model.context\"",
       {"context.remap", "context.remap_window", "model.context"},
       [](const Config& c) { return c.context.remap != "self_extend" || c.context.remap_window < c.model.context; }},
      {"the remapping would never act: \"context.remap_window\" must be smaller than the longest context it runs at, "
       "max(\"eval.multiples\") * \"model.context\"",
       {"context.remap", "context.remap_window", "eval.multiples", "model.context"},
       [](const Config& c) {
         if (c.context.remap == "none") return true;
         return c.context.remap_window < longest_context(c);
       }},
      {"\"train.lr_min\" must be <= \"train.lr\"",
       {"train.lr_min", "train.lr"},
       [](const Config& c) { return c.train.lr_min <= c.train.lr; }},
      {"\"train.warmup_steps\" must be <= \"train.steps\"",
       {"train.warmup_steps", "train.steps"},
       [](const Config& c) { return c.train.warmup_steps <= c.train.steps; }},
      {"the largest evaluated context max(\"eval.multiples\") * \"model.context\" must fit in one scored window "
       "\"eval.span\" (0: 16 * \"model.context\"); raise eval.span (every multiple scores the same span)",
       {"eval.span", "eval.multiples", "model.context"},
       [](const Config& c) {
         return c.eval.multiples.empty() ||
                static_cast<int64_t>(c.eval.multiples.back()) * c.model.context <= eval_span(c.eval, c.model.context);
       }},
      {"\"eval.tokens\" must cover one scored window: >= \"eval.span\" (0: 16 * \"model.context\")",
       {"eval.tokens", "eval.span", "model.context"},
       [](const Config& c) { return c.eval.tokens >= eval_span(c.eval, c.model.context); }},
      {"\"eval.stride\" of the sliding protocol must be at most the shortest evaluated context "
       "min(\"eval.multiples\") * \"model.context\"",
       {"eval.stride", "eval.multiples", "model.context"},
       [](const Config& c) {
         return c.eval.multiples.empty() || eval_stride(c.eval, c.model.context) <=
                                                static_cast<int64_t>(c.eval.multiples.front()) * c.model.context;
       }},
  };
  // The stages that do not compose: attn::kRefusals, the list the kernels refuse by too.
  for (const attn::Refusal& r : attn::kRefusals)
    rules.push_back({r.why,
                     {"attention.preset", "attention.positivity", "attention.normalize", "attention.p"},
                     [&r](const Config& c) { return !r.applies(resolve_attention(c)); }});
  return rules;
}

std::string join(const std::vector<std::string_view>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + std::string(p);
  return out;
}

}  // namespace

const std::vector<Key>& keys() {
  static const std::vector<Key> table = make_keys();
  return table;
}

const std::vector<Rule>& rules() {
  static const std::vector<Rule> table = make_rules();
  return table;
}

const std::vector<std::string_view>& sections() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const Key& k : keys())
      if (std::find(out.begin(), out.end(), k.section) == out.end()) out.push_back(k.section);
    return out;
  }();
  return names;
}

const Key* find_key(std::string_view section, std::string_view name) {
  for (const Key& k : keys())
    if (k.section == section && k.name == name) return &k;
  return nullptr;
}

const Key* find_key(std::string_view path) {
  auto dot = path.find('.');
  if (dot == std::string_view::npos) return nullptr;
  return find_key(path.substr(0, dot), path.substr(dot + 1));
}

std::string section_list() { return join(sections()); }

std::string key_list(std::string_view section) {
  std::vector<std::string_view> names;
  for (const Key& k : keys())
    if (k.section == section) names.push_back(k.name);
  return join(names);
}

}  // namespace gpt::config_schema
