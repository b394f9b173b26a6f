// The run configuration: typed structs, one per JSON section. The schema
// (every key, its type, default, allowed range or values, help text) is
// declared once in config/schema.cpp (defaults: the member initializers
// below, nowhere else); parsing, validation, defaults, --set overrides,
// the resolved JSON and the README/--help key list are all derived from it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpt {

struct ModelConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int head_dim = 0;  // each head's width D; 0 = n_embd / n_head (Qwen3-0.6B: 128 with n_embd 1024 and 16 heads)
  int vocab_size = 257;           // real vocabulary (byte tokenizer: 256 + end-of-text)
  int vocab_pad_multiple = 64;    // padded vocabulary Vp = round_up(V, this); 64 or 128
  int context = 128;              // training context T
  std::string position = "rope";  // "learned" | "rope" | "none" | "alibi"
  double rope_theta = 10000.0;
  std::string rope_pairing = "half";  // RoPE's channel pairs: "half" (i, i + d/2) | "interleaved" (2i, 2i + 1)
  double rope_fraction = 1.0;         // partial RoPE: share of each head's channels rotated (d_r = even part of f·D)
  double p_rope = 1.0;                // p-RoPE: share p of the frequencies kept (the highest); the rest turn at 0
  int max_position = 0;               // rows of the learned position table; 0 = context
  double init_std = 0.02;
  // Per-layer plans (config/layer_plan.h): the kind of each layer, by one
  // letter per layer repeated over n_layer, and what each kind changes.
  std::string layer_plan = "none";                        // none | swan | irope: a named pattern with its kinds
  std::string layer_pattern;                              // e.g. "LLLG"; "" = the named plan's (or no plan)
  nlohmann::json layer_kinds = nlohmann::json::object();  // letter -> {position, window, temperature, attention}

  // The block (docs/blocks.md); the defaults are GPT-2's. A preset
  // (config/block_presets.h) fills the keys a config leaves out.
  std::string block = "custom";         // "custom" | "gpt2" | "llama" | "neox" | "qwen2" | "qwen3"
  int n_kv_head = 0;                    // key/value heads (grouped-query attention); 0 = n_head
  std::string norm = "layernorm";       // "layernorm" | "rmsnorm"
  double norm_eps = 1e-5;               // RMSNorm's eps (LayerNorm's is 1e-5, as GPT-2's and GPT-NeoX's)
  std::string mlp = "gelu";             // "gelu" (tanh form) | "gelu_erf" | "swiglu" | "relu2"
  int mlp_hidden = 0;                   // the MLP's hidden width F; 0 = mlp_width()'s default
  std::string bias = "all";             // linear-layer biases: "all" | "none" | "qkv" (Qwen2: the qkv projection only)
  std::string head = "tied";            // the LM head: "tied" (reads wte, GPT-2) | "untied" (its own matrix)
  // "none" | "rms" (a gain per head channel, Qwen3) | "l2" (no gain, Llama 4) | "rms_full" (the whole q and k
  // projections, a gain per channel, OLMo 2)
  std::string qk_norm = "none";
  std::string qk_norm_scale = "none";   // "none" | "learned": a learned scalar per query head times its logits
  std::string residual = "sequential";  // "sequential" | "parallel" (GPT-NeoX: x + attn(ln1 x) + mlp(ln2 x))
  // Outputs of a regression head (a linear map of the final norm's output,
  // tensors regw and regb) beside the LM head; 0: none. gpt probe force
  // sets 1 on a pretrained model (docs/orbits.md, "The force probe").
  int regression_outputs = 0;

  // F: mlp_hidden, or 4C (gelu, relu2), or for swiglu Llama's rounding of
  // 8C/3 up to a multiple of 256.
  int mlp_width() const {
    if (mlp_hidden > 0) return mlp_hidden;
    if (mlp != "swiglu") return 4 * n_embd;
    const int f = 8 * n_embd / 3;
    return (f + 255) / 256 * 256;
  }
  // D, a head's width, and A = n_head·D, the attention's width: that of q,
  // of the attention output and of the output projection's input. A = C
  // unless model.head_dim says otherwise.
  int head_size() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
  int attn_width() const { return n_head * head_size(); }
  // QK-norm's groups of channels in q (and in k): each head's, or one over
  // the whole projection (rms_full); qk_norm_heads() groups of A / it.
  int qk_norm_heads() const { return qk_norm == "rms_full" ? 1 : n_head; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  // The width of the qkv projection: q (A) and NKV key and value heads.
  int qkv_width() const { return attn_width() + 2 * kv_heads() * head_size(); }
  // The width of the MLP's first projection: [gate | up] (2F) for swiglu.
  int mlp_in_width() const { return mlp == "swiglu" ? 2 * mlp_width() : mlp_width(); }

  int padded_vocab() const { return (vocab_size + vocab_pad_multiple - 1) / vocab_pad_multiple * vocab_pad_multiple; }
  int position_rows() const { return max_position > 0 ? max_position : context; }
};

struct DataConfig {
  std::string train = "data/kjv/kjv_train_*.bin";         // glob pattern of training shards
  std::string val = "data/kjv/kjv_val_*.bin";             // glob pattern of validation shards
  std::string order = "shuffle";                          // "sequential" | "shuffle"
  std::string windows = "stream";                         // "stream" | "documents" (data/loader.h)
  std::string tokenizer = "byte";                         // tokenizer of the shards (passkey text, sampling)
  double passkey_fraction = 0.0;                          // share of training sequences made passkey examples
  int passkey_digits = 5;                                 // digits of the passkey (training and eval --task passkey)
  std::string mix_task = "none";                          // synthetic task mixed into training (data/synthetic.h)
  double mix_fraction = 0.0;                              // share of training sequences replaced by its examples
  nlohmann::json mix_options = nlohmann::json::object();  // the task's options, as in its task.json
};

struct TrainConfig {
  int batch_size = 16;  // B sequences per micro-batch
  int grad_accum = 1;   // micro-batches per optimizer step
  int steps = 1000;
  double lr = 1e-3;
  double lr_min = 1e-4;  // floor of the decay
  int warmup_steps = 50;
  // After the warmup (train/schedule.h): cosine to lr_min, or wsd
  // (warmup-stable-decay: lr until the last decay_fraction of the steps, then
  // linear to lr_min).
  std::string lr_schedule = "cosine";  // cosine | wsd
  double decay_fraction = 0.2;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // max global gradient norm; 0 disables clipping
  uint64_t seed = 1337;
  int log_every = 10;
  int checkpoint_every = 0;  // 0: only at the end
  std::vector<int> checkpoint_steps;  // further steps to checkpoint at
  int threads = 0;           // OpenMP threads; 0 = all cores
  std::string init_from;     // checkpoint or run dir whose matching tensors initialise a fresh run
  int zero = 0;              // 1: ZeRO-1, optimizer state sharded across ranks
  int overlap_reduce = 1;    // 1: each layer's gradient all-reduce starts as its backward ends (several ranks)
  // adamw | muon: Muon for the hidden weight matrices, AdamW for the rest (docs/optimizers.md).
  std::string optimizer = "adamw";
  double muon_lr = 0.02;            // Muon's peak learning rate; the schedule scales it as it scales lr
  double muon_momentum = 0.95;      // Muon's Nesterov momentum β
  double muon_weight_decay = 0.0;   // Muon's decoupled weight decay (the reference's default 0)
  // Training-time position ids (train/position_ids.h): plain | pose | randomized,
  // the span L the ids reach (0: 16·model.context) and PoSE's chunk count.
  std::string positions = "plain";
  int position_span = 0;
  int pose_chunks = 2;
  // The document mask (queries see only their own document's keys, from the
  // data's end-of-text id) and whether position ids restart per document.
  std::string document_mask = "off";           // off | on
  std::string document_positions = "continue";  // continue | restart
  // The attention window's warm-up (train/schedule.h): a sliding window of
  // window_start keys growing in stages to full attention over window_steps
  // steps; 0 = off.
  int window_start = 0;
  int window_steps = 0;
  // The length schedule (train/schedule.h): training windows of
  // length_start tokens doubling to model.context over length_steps steps
  // (each step's tokens cut into more, shorter windows); 0 = off.
  int length_start = 0;
  int length_steps = 0;
  // on: at each switch of the window warm-up or the length schedule, YaRN's
  // rule rescales RoPE's frequencies and the logits (modded-nanogpt's).
  std::string grow_yarn = "off";  // off | on
};

struct EvalConfig {
  std::vector<int> multiples = {1, 2, 4, 8, 16};
  // Validation tokens evaluated at each multiple. On the quickstart model 131072
  // tokens put the loss within 0.005 nats of the whole KJV validation set (65536:
  // within 0.015).
  int64_t tokens = 131072;
  int every = 0;             // evaluate every N steps; 0 = only at the end
  int profile_buckets = 16;  // buckets of the per-position loss profile
  // The scored tokens: eval.tokens / span windows of `span` tokens spread over
  // the validation stream (or opening its documents), the same at every
  // multiple and independent of which multiples are asked.
  int64_t span = 0;                 // tokens per scored window; 0 = 16 * model.context
  std::string protocol = "chunks";  // chunks | sliding | documents
  int stride = 0;                   // sliding: windows advance by S tokens; 0 = model.context
};

// The evaluation protocols (eval.protocol, gpt eval --protocol, sweep evals[].protocol).
inline const std::vector<std::string>& eval_protocols() {
  static const std::vector<std::string> names = {"chunks", "sliding", "documents", "llamacpp"};
  return names;
}

// The span of eval (0: 16 times the training context T).
inline int64_t eval_span(const EvalConfig& e, int T) { return e.span > 0 ? e.span : int64_t{16} * T; }
// The stride of the sliding protocol (0: T).
inline int eval_stride(const EvalConfig& e, int T) { return e.stride > 0 ? e.stride : T; }

// The attention variant: a preset (kernels/attention_spec.h) whose stages
// and constants can each be overridden. "preset" and null mean "the
// preset's choice"; config/attention.h resolves them into an AttentionSpec.
struct AttentionConfig {
  std::string preset = "softmax";
  std::string score = "preset";        // dot | cosine
  std::string scale = "preset";        // none | logn | ssmax | infoscale | lssa | fixed
  std::string positivity = "preset";   // exp | softplus | sigmoid | relu
  std::string normalize = "preset";    // l1 | none | fixed | off_by_one | sink | softpick | stick_breaking
  std::optional<double> p;             // re-weighting exponent; 0 = no re-weighting
  int offset_rows = 3;                 // re-weighting: rows i <= this use offset 0
  std::optional<double> cosine_scale;  // factor of cosine scores
  double scale_value = 1.0;            // λ of scale "fixed"
  double tau = 10.0;                   // τ of scale "scale_invariant"
  std::optional<double> bias;          // added to the scores before φ; null: -ln N for sigmoid, else 0
  std::optional<double> norm_const;    // divisor of normalize "fixed"; null: N (the training context)
  double softcap = 0;                  // logit soft-cap c: x -> c tanh(x / c) before φ; 0 = none
  std::string output_gate = "none";    // none | sigmoid (y ⊙ σ(x·W_g + b_g) before the output projection)
  std::string differential = "none";   // none | on (differential attention: two maps subtracted, attn::diff)
  std::string position_bias =
      "none";  // none | alibi | kerple_log | kerple_power | forget (alibi also from model.position)
};

// Context extension (docs/context_extension.md): a RoPE frequency
// rule, a mask and a temperature, each composable with every attention
// variant; config/attention.h folds them into the AttentionSpec. Used for
// training, and overridden at evaluation by gpt eval --context.
struct ContextConfig {
  std::string rope_scaling = "none";        // none | pi | ntk | dynamic_ntk | yarn | llama3
  double factor = 0;                        // s; 0 = evaluated length / model.context
  double beta_fast = 32;                    // yarn
  double beta_slow = 1;                     // yarn
  int yarn_truncate = 1;                    // yarn: 1 = ramp ends floored/ceiled (the paper), 0 = exact (gpt-oss)
  double low_freq = 1;                      // llama3 l_f
  double high_freq = 4;                     // llama3 h_f
  double dynamic_alpha = 1;                 // dynamic_ntk α
  std::optional<double> attn_factor;        // YaRN's t; null: 0.1 ln s + 1
  std::string mask = "none";                // none | window | sinks | lambda
  int window = 0;                           // w; 0: N for window and lambda, N - sinks for sinks
  int sinks = 0;                            // k_s of mask sinks (0: 4) or n_global of lambda (0: 10)
  std::string sink_positions = "original";  // sinks: original positions, or cache (re-indexed, StreamingLLM)
  std::string remap = "none";               // none | rerope | self_extend | string | dual_chunk
  // rerope w (0: N/2), self_extend w_n (0: N/4), string S (0: ⌊0.33·N⌋), dual_chunk s + w (0: ⌊3N/4⌋)
  int remap_window = 0;
  int remap_local = 0;  // string W (0: max(1, ⌊N/1024⌋), the paper's 128 at 128K), dual_chunk w (0: ⌊N/16⌋)
  double rerope_kappa = 0;                  // rerope: 0 = Δ' = w beyond w; κ > 1: leaky w + (Δ - w)/κ
  int group = 0;                            // self_extend G; 0 = the smallest G that keeps distances below N
  std::string row_index = "position";       // position | keys: the i of the scales and of re-weighting
  std::string temperature = "none";         // none | yarn | llama4 | swan
  double logit_scale = 1;                   // a global temperature: every logit × this
  double temp_beta = 0.1;                   // llama4 β
  int temp_floor = 0;                       // llama4 F; 0 = model.context
  double temp_base = 0;                     // swan a of log_a(m + a); 0 = model.context
  int head_scale = 0;                       // 1 = HeadScale: a learned temperature per layer and head (attnscale)
};

struct RunConfig {
  std::string dir = "runs/default";  // run directory
  std::string device = "cpu";        // "cpu" or "cuda" (make_backend, src/backend/backend.h)
  std::string precision = "fp32";    // GEMMs on cuda: "fp32", "tf32" or "bf16" (operands); cpu: "fp32" only
  std::string storage = "fp32";      // activations and working parameters: "fp32" or "bf16" (make_model, model/gpt.h)
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  EvalConfig eval;
  AttentionConfig attention;
  ContextConfig context;
  RunConfig run;
};

// Parses and validates a JSON object. Missing keys take their defaults; an
// unknown key, a wrong type or an out-of-range value throws gpt::Error naming
// the full key path (e.g. "model.n_head") and what is allowed. Cross-field
// checks (n_embd divisible by n_head, even head size for rope, ...) too.
// Integer keys accept whole-valued numbers (3, 3.0, 2e4) and reject 3.5.
Config config_from_json(const nlohmann::json& j);

// The range, enum and cross-field checks of config_from_json, for a Config
// built in code. Throws gpt::Error like config_from_json.
void validate_config(const Config& c);

// Reads a JSON file (error names the file on I/O or parse failure; // and /* */
// comments are allowed), applies overrides of the form "section.key=value"
// (value parsed as JSON when it parses, else taken as a string; string keys
// always take the text unless it is a quoted JSON string; an unknown path is
// an error listing the valid keys of that section), then validates. An empty
// path starts from the defaults. A file with "extends": "BASE.json" (relative
// to it) is laid over that file, section by section and key by key.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Applies one "a.b=value" override to a JSON object (before validation).
void apply_override(nlohmann::json& j, const std::string& assignment);

// An attention section given as JSON (as in a config file, the "sharpen"
// shorthand included), parsed and range-checked from the schema's attention
// keys; errors name `where` (e.g. "model.layer_kinds.G.attention") and the key.
AttentionConfig attention_config_from_json(const nlohmann::json& body, const std::string& where);
// The cross-field rules of the schema (throws like validate_config).
void check_config_rules(const Config& c);

// The resolved config: every key with its value (defaults filled in).
nlohmann::json config_to_json(const Config& c);

// Markdown table of every key: path, type, default, allowed, description.
std::string config_reference_markdown();

}  // namespace gpt
