#include "model/params.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "config/layer_plan.h"
#include "core/check.h"
#include "data/rng.h"

namespace gpt {

size_t ParamSpec::numel() const {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

ParamLayout::ParamLayout(const ModelConfig& m, const AttentionSpec& attn) {
  const int64_t C = m.n_embd, Vp = m.padded_vocab(), P = m.position_rows(), L = m.n_layer, H = m.n_head;
  const bool learned_positions = m.position == "learned";
  const int64_t F = m.mlp_width(), FI = m.mlp_in_width(), QKV = m.qkv_width();
  const bool norm_bias = m.norm == "layernorm";
  const bool qkv_bias = m.bias != "none", all_bias = m.bias == "all";
  const bool untied_head = m.head == "untied";
  const int64_t R = m.regression_outputs;
  const bool regression_head = R > 0;
  const bool qk_norm_gain = m.qk_norm == "rms" || m.qk_norm == "rms_full";
  const int64_t A = m.attn_width(), D = m.head_size();  // the attention's width n_head·D, a head's D
  const int64_t QN = A / m.qk_norm_heads();  // channels of a QK-norm group (a head's, or all of them)
  const bool qk_norm_scale = m.qk_norm != "none" && m.qk_norm_scale == "learned";
  // A tensor is present when some layer uses it (a per-layer plan may give
  // layers different variants; the other layers' slices stay unused).
  const LearnedAttention learned = learned_attention(layer_attention(m, attn));
  const bool learned_attn_scale = learned.scale;
  const bool learned_attn_sink = learned.sink;
  const bool learned_kerple = learned.kerple;
  const bool learned_forget = learned.forget;
  const bool learned_fire = learned.fire;
  const bool output_gate = learned.output_gate;
  const bool differential = learned.differential;
  const bool pope = m.position == "pope";
  const InitKind attnscale_init = learned.head_temperature ? InitKind::Ones : InitKind::AttnScale;
  const InitKind kerple_init =
      learned.kerple_kind == PositionBias::KerplePower ? InitKind::KerplePower : InitKind::KerpleLog;
  auto add = [&](const char* name, Shape shape, InitKind init, bool decay, bool present, bool per_layer,
                 const char* what) {
    if (!present) return;
    if (per_layer) shape.insert(shape.begin(), L);
    specs.push_back(ParamSpec{name, shape, init, decay, per_layer, total, what, {}});
    total += specs.back().numel();
  };
#define GPT_ADD_GLOBAL(name, shape, init, decay, present, what) add(#name, shape, init, decay, present, false, what);
#define GPT_ADD_LAYER(name, shape, init, decay, present, what) add(#name, shape, init, decay, present, true, what);
  GPT_GLOBAL_HEAD_PARAMS(GPT_ADD_GLOBAL)
  GPT_LAYER_PARAMS(GPT_ADD_LAYER)
  GPT_GLOBAL_TAIL_PARAMS(GPT_ADD_GLOBAL)
#undef GPT_ADD_GLOBAL
#undef GPT_ADD_LAYER
  const int64_t KV = static_cast<int64_t>(m.kv_heads()) * D;
  for (ParamSpec& s : specs) {
    if (!s.hidden_matrix()) continue;
    GPT_CHECK(s.shape.size() == 3, "parameter table: hidden matrix ", s.name, " is not (L, rows, cols)");
    if (s.name == "qkvw")
      s.row_blocks = {A, KV, KV};
    else if (s.name == "fcw" && m.mlp == "swiglu")
      s.row_blocks = {F, F};
    else
      s.row_blocks = {s.shape[1]};
  }
}

const ParamSpec& ParamLayout::find(const std::string& name) const {
  for (const auto& s : specs)
    if (s.name == name) return s;
  fail("no parameter tensor named \"", name, "\" in this model");
}

bool ParamLayout::has(const std::string& name) const {
  for (const auto& s : specs)
    if (s.name == name) return true;
  return false;
}

std::vector<std::pair<size_t, size_t>> ParamLayout::ranges_of_layer(int layer) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto add = [&out](size_t offset, size_t count) {
    if (!out.empty() && out.back().first + out.back().second == offset)
      out.back().second += count;
    else
      out.emplace_back(offset, count);
  };
  for (const auto& s : specs) {
    if (!s.per_layer) {
      if (layer < 0) add(s.offset, s.numel());
      continue;
    }
    const int64_t L = s.shape.front();
    GPT_CHECK(layer < L, "ranges_of_layer: layer ", layer, " of a model with ", L, " layers");
    if (layer < 0) continue;
    const size_t per = s.numel() / static_cast<size_t>(L);
    add(s.offset + static_cast<size_t>(layer) * per, per);
  }
  return out;
}

ParamDifference param_difference(const ParamLayout& from, const ParamLayout& to) {
  ParamDifference d;
  for (const ParamSpec& t : to.specs) {
    if (!from.has(t.name)) {
      d.added.push_back(t);
      continue;
    }
    const ParamSpec& f = from.find(t.name);
    if (f.shape != t.shape || f.init != t.init) d.changed.push_back(t);
  }
  for (const ParamSpec& f : from.specs)
    if (!to.has(f.name)) d.dropped.push_back(f);
  return d;
}

std::string describe_tensors(const std::vector<ParamSpec>& specs) {
  std::string out;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i) out += i + 1 == specs.size() ? " and " : ", ";
    out += specs[i].what + " (" + specs[i].name + ")";
  }
  return out;
}

void check_attention_compatible(const ModelConfig& m, const AttentionSpec& trained, const AttentionSpec& wanted,
                                const std::string& trained_name, const std::string& wanted_name) {
  GPT_CHECK(trained.score == wanted.score, "attention ", wanted_name, " uses ", stage_name(wanted.score),
            " scores but the checkpoint was trained with ", trained_name, " (", stage_name(trained.score),
            " scores); the score type cannot change after training");
  ParamDifference d = param_difference(ParamLayout(m, trained), ParamLayout(m, wanted));
  const std::vector<std::string> identity = identity_tensors_added(m, trained, wanted);
  std::erase_if(d.added, [&](const ParamSpec& s) {
    return std::find(identity.begin(), identity.end(), s.name) != identity.end();
  });
  const std::string why = "; a learned tensor cannot be added, dropped or exchanged after training";
  GPT_CHECK(d.added.empty(), "attention ", wanted_name, " needs ", describe_tensors(d.added),
            ", which the checkpoint (trained with ", trained_name, ") does not have", why);
  GPT_CHECK(d.dropped.empty(), "attention ", wanted_name, " would drop ", describe_tensors(d.dropped),
            " that the checkpoint (trained with ", trained_name, ") holds", why);
  GPT_CHECK(d.changed.empty(), "attention ", wanted_name, " reads ", describe_tensors(d.changed),
            " otherwise than the checkpoint (trained with ", trained_name, ") learned them", why);
}

std::vector<std::string> identity_tensors_added(const ModelConfig& m, const AttentionSpec& trained,
                                                const AttentionSpec& wanted) {
  const LearnedAttention was = learned_attention(layer_attention(m, trained));
  const LearnedAttention now = learned_attention(layer_attention(m, wanted));
  if (now.head_temperature && !was.scale) return {"attnscale"};
  return {};
}

template <typename T>
ParamViews<T> make_views(const ParamLayout& layout, T* base, int n_layer) {
  ParamViews<T> v;
  v.layers.resize(n_layer);
  auto global = [&](const char* name) -> T* { return layout.has(name) ? base + layout.find(name).offset : nullptr; };
#define GPT_SET_GLOBAL(name, shape, init, decay, present, what) v.name = global(#name);
  GPT_GLOBAL_HEAD_PARAMS(GPT_SET_GLOBAL)
  GPT_GLOBAL_TAIL_PARAMS(GPT_SET_GLOBAL)
#undef GPT_SET_GLOBAL
  // (L, shape...): layer l starts l * (numel / L) into the stacked tensor.
#define GPT_SET_LAYER(name, shape, init, decay, present, what)                               \
  {                                                                                          \
    if (layout.has(#name)) {                                                                 \
      const ParamSpec& s = layout.find(#name);                                               \
      for (int l = 0; l < n_layer; ++l)                                                      \
        v.layers[l].name = base + s.offset + static_cast<size_t>(l) * (s.numel() / n_layer); \
    }                                                                                        \
  }
  GPT_LAYER_PARAMS(GPT_SET_LAYER)
#undef GPT_SET_LAYER
  return v;
}

template <typename T>
void init_params_in_pieces(const ParamLayout& layout, const ModelConfig& m, uint64_t seed, size_t piece,
                           const std::function<void(size_t offset, size_t n, const T* values)>& put) {
  Rng rng(seed);
  const double residual_std = m.init_std / std::sqrt(2.0 * m.n_layer);
  const size_t V = static_cast<size_t>(m.vocab_size), C = static_cast<size_t>(m.n_embd);
  size_t largest = 0;
  for (const auto& s : layout.specs) largest = std::max(largest, s.numel());
  std::vector<T> buf(std::min(std::max<size_t>(piece, 1), largest));
  for (const auto& s : layout.specs) {
    const size_t n = s.numel();
    // Padding rows of the tied embedding (V..Vp-1) must stay zero: no token
    // selects them and the classifier ignores their logits, so their gradient
    // is zero too and they remain zero through training. (Their draws are
    // still taken, so the values do not depend on the padding.)
    const size_t keep = s.name == "wte" ? V * C : n;
    for (size_t first = 0; first < n; first += buf.size()) {
      const size_t k = std::min(buf.size(), n - first);
      T* p = buf.data();
      switch (s.init) {
        case InitKind::Normal:
          for (size_t i = 0; i < k; ++i) p[i] = static_cast<T>(m.init_std * rng.normal());
          break;
        case InitKind::NormalResidual:
          for (size_t i = 0; i < k; ++i) p[i] = static_cast<T>(residual_std * rng.normal());
          break;
        case InitKind::Ones:
          for (size_t i = 0; i < k; ++i) p[i] = T(1);
          break;
        case InitKind::Zeros:
          for (size_t i = 0; i < k; ++i) p[i] = T(0);
          break;
        case InitKind::AttnScale:
          for (size_t i = 0; i < k; ++i) p[i] = static_cast<T>(attn::ssmax_init(m.context));
          break;
        case InitKind::KerpleLog:
        case InitKind::KerplePower: {  // (ρ₁, ρ₂) pairs; first + i even: ρ₁
          const bool power = s.init == InitKind::KerplePower;
          const PositionBias kind = power ? PositionBias::KerplePower : PositionBias::KerpleLog;
          for (size_t i = 0; i < k; ++i) {
            const bool second = (first + i) % 2 == 1;
            const double hi = second == power ? 2.0 : 1.0;  // r₁ ~ U(0, 2) for log, r₂ for power
            double r = std::max(0.01, hi * rng.uniform());
            if (power && second) r = std::min(r, 1.99);
            p[i] = static_cast<T>(second ? attn::kerple_rho2(kind, r) : attn::kerple_rho1(r));
          }
          break;
        }
        case InitKind::DiffLambda:
          for (size_t i = 0; i < k; ++i) p[i] = static_cast<T>(attn::diff::kInitStd * rng.normal());
          break;
        case InitKind::Fire: {  // one block per layer (attn::fire's layout)
          namespace f = attn::fire;
          const int H = m.n_head;
          for (size_t i = 0; i < k; ++i) {
            const int e = static_cast<int>((first + i) % static_cast<size_t>(f::count(H)));
            double v;
            if (e == f::c(H))
              v = f::kInitC;
            else if (e == f::m(H))
              v = f::kInitMultiplier;
            else {
              const double bound = e < f::w2() ? 1.0 : 1.0 / std::sqrt(static_cast<double>(f::kWidth));
              v = bound * (2.0 * rng.uniform() - 1.0);
            }
            p[i] = static_cast<T>(v);
          }
          break;
        }
      }
      for (size_t i = std::max(first, keep); i < first + k; ++i) p[i - first] = T(0);
      put(s.offset + first, k, p);
    }
  }
}

template <typename T>
void init_params(const ParamLayout& layout, const ModelConfig& m, uint64_t seed, T* host) {
  size_t largest = 0;
  for (const auto& s : layout.specs) largest = std::max(largest, s.numel());
  init_params_in_pieces<T>(layout, m, seed, largest,
                           [host](size_t offset, size_t n, const T* v) { std::copy(v, v + n, host + offset); });
}

template ParamViews<float> make_views(const ParamLayout&, float*, int);
template ParamViews<double> make_views(const ParamLayout&, double*, int);
template ParamViews<bf16> make_views(const ParamLayout&, bf16*, int);
template void init_params(const ParamLayout&, const ModelConfig&, uint64_t, float*);
template void init_params(const ParamLayout&, const ModelConfig&, uint64_t, double*);
template void init_params_in_pieces(const ParamLayout&, const ModelConfig&, uint64_t, size_t,
                                    const std::function<void(size_t, size_t, const float*)>&);
template void init_params_in_pieces(const ParamLayout&, const ModelConfig&, uint64_t, size_t,
                                    const std::function<void(size_t, size_t, const double*)>&);

}  // namespace gpt
