// The argument checks every backend's attention op makes, written once: the
// shapes, the per-head inputs its stages need, and the stage combinations
// that are refused (attn::kRefusals). `fn` names the op in the message; the
// CUDA kernels add their own limits (head sizes, grid) after these.
#pragma once
#include <cmath>

#include "core/check.h"
#include "kernels/attention_spec.h"

namespace gpt {

template <typename T, typename A>
inline void check_attention_args(const char* fn, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                                 const HeadParams<T, A>& head) {
  GPT_CHECK(B > 0 && Tn > 0 && C > 0 && NH > 0, fn, ": B, T, C, NH must be positive, got B=", B, " T=", Tn, " C=", C,
            " NH=", NH);
  GPT_CHECK(C % NH == 0, fn, ": C=", C, " must be a multiple of NH=", NH);
  GPT_CHECK(spec.p >= 0 && std::isfinite(spec.p), fn, ": sharpening exponent p must be >= 0, got ", spec.p);
  GPT_CHECK(spec.normalize != Normalize::Fixed || spec.norm_const > 0, fn,
            ": the fixed normalisation constant must be > 0, got ", spec.norm_const);
  GPT_CHECK(!spec.learned_scale() || head.scale, fn, ": the ssmax scale and HeadScale need the per-head scales");
  GPT_CHECK(!spec.head_temperature || (spec.scale != Scale::Ssmax && spec.scale != Scale::ScaleInvariant), fn,
            ": HeadScale's per-head temperature cannot join the ssmax or scale_invariant scale (context.head_scale)");
  GPT_CHECK(!spec.learned_sink() || head.sink, fn, ": normalisation \"sink\" needs the per-head sink logits");
  GPT_CHECK(!spec.kerple() || head.kerple, fn, ": the KERPLE bias needs its per-head parameters r1, r2");
  GPT_CHECK(!spec.forget() || head.fcum, fn, ": the forget gate needs its cumulative log gates c (B, NH, T)");
  GPT_CHECK(!spec.fire() || head.fire, fn, ": FIRE needs its bias table (NH, T, T)");
  if (const attn::Refusal* r = attn::refusal(spec)) fail(fn, ": ", r->why);
  GPT_CHECK(spec.window >= 0 && spec.sinks >= 0, fn,
            ": the window and the sinks must be >= 0, got window=", spec.window, " sinks=", spec.sinks);
  GPT_CHECK(spec.head_group >= 1 && NH % spec.head_group == 0, fn, ": NH=", NH,
            " must be a multiple of the head group ", spec.head_group);
}

}  // namespace gpt
