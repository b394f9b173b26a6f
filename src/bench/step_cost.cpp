// The cost model of a training step (step_cost.h says what it counts).
#include "bench/step_cost.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <tuple>

#include "backend/backend.h"
#include "bench/bench.h"
#include "bench/bench_util.h"
#include "config/attention.h"
#include "core/check.h"
#include "model/gpt.h"
#include "train/optimizer.h"

namespace gpt {
namespace {
using bench_detail::attention_forward_flops;
using bench_detail::matmul_weights;

// Bytes of a tensor element as stored (sT: activations and working weights;
// sA: float32-side tensors) and as the float32 kernels move it.
struct Widths {
  double sT, sA;
};

// Records every op; computes nothing. Memory is addresses only: nothing
// reads or writes it (as with device memory, only upload and download cross
// to the host; download gives zeros).
class CostBackendBase : public Backend<float> {
 public:
  explicit CostBackendBase(double storage_bytes) : s_(storage_bytes) {}
  std::string name() const override { return "cost model"; }

  void* alloc_bytes(size_t bytes) override {
    const uintptr_t p = next_;
    next_ += (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    return reinterpret_cast<void*>(p);
  }
  void release_bytes(void*) override {}
  void upload_bytes(void*, const void*, size_t) override {}
  void download_bytes(void* host, const void*, size_t bytes) override { std::memset(host, 0, bytes); }

  using T = float;
  using Acc = float;
#define GPT_COST_UNMODELLED(name, params, args) \
  void name params override { unmodelled(#name); }
  GPT_BACKEND_PLAIN_OPS(GPT_COST_UNMODELLED)
#undef GPT_COST_UNMODELLED
  void muon_momentum(float*, float*, size_t, double) override { unmodelled("muon_momentum"); }
  void newton_schulz(float*, int, int, int, float*) override { unmodelled("newton_schulz"); }
  void muon_apply(float*, const float*, size_t, double, double, double) override { unmodelled("muon_apply"); }

  std::vector<StepCostRow> rows;
  std::vector<std::string> not_modelled;
  bool native_ops = true;         // the native bf16 ops (GPT_BACKEND_NATIVE_BF16_OPS), as CUDA has them
  const float* params = nullptr;  // the master parameters (their rounding is not the adapter's)
  size_t n_params = 0;

  void reset() {
    rows.clear();
    not_modelled.clear();
  }

 protected:
  // Storage widths (the minimum) and the float32 kernels' (the code).
  Widths stored() const { return {s_, 4}; }
  static Widths wide() { return {4, 4}; }

  // One call: flops, and bytes(w) for the minimum and the code's widths.
  template <typename Bytes>
  void record(const std::string& op, char unit, double flops, Bytes bytes) {
    if (native_)  // the op's native bf16 form: storage widths in the code too
      add(op + " (bf16 native)", unit, flops, bytes(stored()), bytes(stored()));
    else
      add(op, unit, flops, bytes(stored()), bytes(wide()));
  }
  void add(const std::string& op, char unit, double flops, double min_bytes, double code_bytes,
           double seconds = -1) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const StepCostRow& r) { return r.op == op; });
    if (it == rows.end()) {
      rows.push_back({op, 0, 0, 0, 0, unit, 0, 0, ""});
      it = rows.end() - 1;
    }
    ++it->calls;
    it->flops += flops;
    it->min_bytes += min_bytes;
    it->code_bytes += code_bytes;
    it->seconds += seconds;  // -1 per call: the roofline decides (fixed up in predict_step)
  }
  void unmodelled(const char* op) {
    if (std::find(not_modelled.begin(), not_modelled.end(), op) == not_modelled.end()) not_modelled.push_back(op);
  }

  // A bf16 tensor's address as the float op's parameter (never read).
  static float* as_float(bf16* p) { return reinterpret_cast<float*>(p); }
  static const float* as_float(const bf16* p) { return reinterpret_cast<const float*>(p); }
  template <typename A>
  static A as_float(A a) {
    return a;
  }

  // The bf16 adapter splits an op into chunks of rows, each reading the
  // whole weight again (the code's bytes count that); a native kernel reads
  // it once. Consecutive calls of one op on the same weight are such chunks:
  // true for the first, whose minimum counts the weight.
  bool first_chunk(const char* op, const void* w) {
    const bool first = op != last_op_ || w != last_w_;
    last_op_ = op;
    last_w_ = w;
    return first;
  }

  double s_;
  bool native_ = false;  // a native bf16 op is being recorded (record)
  uintptr_t next_ = uintptr_t(1) << 44;
  const char* last_op_ = nullptr;
  const void* last_w_ = nullptr;
};

class CostBackend final : public CostBackendBase {
 public:
  CostBackend(double storage_bytes, const GpuUnits& gpu) : CostBackendBase(storage_bytes), gpu_(gpu) {}

  void zero_bytes(void*, size_t bytes) override {
    add("zero (gradients, buffers)", 'm', 0, static_cast<double>(bytes), static_cast<double>(bytes));
  }
  // bf16 -> float32 reads 2 and writes 4 bytes an element, and back. The
  // adapter's passes have no counterpart in a native bf16 kernel (minimum
  // 0); rounding the master parameters into the working copy has.
  void convert(float*, const bf16*, size_t n) override { add("bf16 adapter: widen", 'm', n, 0, 6.0 * n); }
  void convert(bf16*, const float* src, size_t n) override {
    if (params && src >= params && src < params + n_params)
      add("round master parameters to bf16", 'm', n, 6.0 * n, 6.0 * n);
    else
      add("bf16 adapter: round results", 'm', n, 0, 6.0 * n);
  }

  double sum_squares(const float*, size_t n) override {
    add("sum_squares (gradient norm)", 'm', 2.0 * n, 4.0 * n, 4.0 * n);
    return 0;
  }
  void scale_inplace(float*, float, size_t n) override { add("scale_inplace", 'm', n, 8.0 * n, 8.0 * n); }
  // param, m, v read and written, grad read: 28 bytes an element.
  void adamw_update(float*, const float*, float*, float*, size_t n, double, double, double, double, double,
                    long) override {
    add("adamw_update", 'm', 12.0 * n, 28.0 * n, 28.0 * n);
  }

  void encoder_forward(float*, const int32_t*, const float*, const float* wpe, int B, int Tn, int C, int) override {
    const double N = double(B) * Tn, pos = wpe ? double(Tn) * C : 0;
    record("encoder_forward", 'm', N * C, [&](Widths w) { return 4 * N + (N * C + pos + N * C) * w.sT; });
  }
  bool encoder_forward_bf16(float*, const int32_t*, const bf16*, const bf16* wpe, int B, int Tn, int C,
                            int) override {
    const double N = double(B) * Tn, pos = wpe ? double(Tn) * C : 0;
    add("encoder_forward (bf16 in)", 'm', N * C, 4 * N + (N * C + pos + N * C) * 2,
        4 * N + (N * C + pos) * 2 + N * C * 4);
    return true;
  }
  // dwte[tokens] += dout, dwpe[t] += dout: the touched rows read and written.
  void encoder_backward(float*, float* dwpe, const float*, const int32_t*, int B, int Tn, int C) override {
    const double N = double(B) * Tn, pos = dwpe ? double(Tn) * C : 0;
    record("encoder_backward", 'm', 2 * N * C,
           [&](Widths w) { return 4 * N + N * C * w.sT + 2 * (N * C + pos) * w.sA; });
  }

  // The native bf16 ops (GPT_BACKEND_NATIVE_BF16_OPS), as the CUDA backend
  // has them: the float32 op's formulas at the storage widths, whole calls.
#define GPT_COST_NATIVE(name, params, args)                                \
  bool name##_bf16 params override {                                       \
    if (!native_ops) return false;                                         \
    native_ = true;                                                        \
    std::apply([this](auto... a) { name(as_float(a)...); }, std::tuple args); \
    native_ = false;                                                       \
    return true;                                                           \
  }
  GPT_BACKEND_NATIVE_BF16_OPS(GPT_COST_NATIVE)
#undef GPT_COST_NATIVE

  void layernorm_forward(float*, float*, float*, const float*, const float* wt, const float*, int N,
                         int C) override {
    const double once = first_chunk("layernorm_forward", wt) ? 1 : 0;
    if (native_) {
      record("layernorm_forward", 'm', 7.0 * N * C,
             [&](Widths w) { return (2.0 * N * C + 2.0 * C) * w.sT + 2.0 * N * w.sA; });
      return;
    }
    auto bytes = [&](Widths w, double weights) { return (2.0 * N * C + weights * 2.0 * C) * w.sT + 2.0 * N * w.sA; };
    add("layernorm_forward", 'm', 7.0 * N * C, bytes(stored(), once), bytes(wide(), 1));
  }
  // dinp += (accumulates: read and written), dw, db +=.
  void layernorm_backward(float*, float*, float*, const float*, const float*, const float* wt, const float*,
                          const float*, int N, int C) override {
    const double once = first_chunk("layernorm_backward", wt) ? 1 : 0;
    auto bytes = [&](Widths w, double weights) {
      return (4.0 * N * C + weights * C) * w.sT + (weights * 4.0 * C + 2.0 * N) * w.sA;
    };
    if (native_)
      record("layernorm_backward", 'm', 12.0 * N * C, [&](Widths w) { return bytes(w, 1); });
    else
      add("layernorm_backward", 'm', 12.0 * N * C, bytes(stored(), once), bytes(wide(), 1));
  }
  void rmsnorm_forward(float*, float*, const float*, const float*, int N, int C, double) override {
    record("rmsnorm_forward", 'm', 4.0 * N * C, [&](Widths w) { return (2.0 * N * C + C) * w.sT + N * w.sA; });
  }
  void rmsnorm_backward(float*, float*, const float*, const float*, const float*, const float*, int N,
                        int C) override {
    record("rmsnorm_backward", 'm', 8.0 * N * C,
           [&](Widths w) { return (4.0 * N * C + C) * w.sT + (2.0 * C + N) * w.sA; });
  }

  void matmul_forward(float*, const float*, const float*, const float* bias, int N, int C, int OC) override {
    const double n = N, c = C, oc = OC, b = bias ? oc : 0;
    record("matmul_forward", 'g', 2 * n * c * oc, [&](Widths w) { return (n * c + oc * c + b + n * oc) * w.sT; });
  }
  bool matmul_forward_bf16(float*, const bf16*, const bf16* wt, const float* bias, int N, int C, int OC) override {
    const double n = N, c = C, oc = OC, b = bias ? oc : 0;
    const double once = first_chunk("matmul_forward_bf16", wt) ? 1 : 0;
    add("matmul_forward (bf16 in)", 'g', 2 * n * c * oc, (n * c + once * oc * c + n * oc) * 2 + once * b * 4,
        (n * c + oc * c) * 2 + (b + n * oc) * 4);
    return true;
  }
  // dinp, dw, dbias += (read and written); dout, inp, w read.
  void matmul_backward(float* dinp, float* dw, float* dbias, const float*, const float*, const float*, int N, int C,
                       int OC) override {
    const double n = N, c = C, oc = OC;
    const double fl = (dinp ? 2 * n * c * oc : 0) + (dw ? 2 * n * c * oc : 0) + (dbias ? n * oc : 0);
    record("matmul_backward", 'g', fl, [&](Widths w) {
      return (n * oc + n * c + oc * c) * w.sT + (dinp ? 2 * n * c * w.sT : 0) + (dw ? 2 * oc * c * w.sA : 0) +
             (dbias ? 2 * oc * w.sA : 0);
    });
  }
  bool matmul_backward_bf16(float* dinp, float* dw, float* dbias, const bf16*, const bf16*, const bf16* wt, int N,
                            int C, int OC) override {
    const double n = N, c = C, oc = OC;
    const double once = first_chunk("matmul_backward_bf16", wt) ? 1 : 0;
    const double fl = (dinp ? 2 * n * c * oc : 0) + (dw ? 2 * n * c * oc : 0) + (dbias ? n * oc : 0);
    const double act = (n * oc + n * c) * 2, grads = (dw ? 2 * oc * c : 0) + (dbias ? 2 * oc : 0);
    // The minimum: dinp is the bf16 activation gradient (+=); the code
    // writes it in float32 scratch, which the adapter adds back.
    add("matmul_backward (bf16 in)", 'g', fl, act + once * (oc * c * 2 + grads * 4) + (dinp ? 2 * n * c * 2 : 0),
        act + oc * c * 2 + grads * 4 + (dinp ? n * c * 4 : 0));
    return true;
  }

  void attention_forward(float*, float*, const float*, int B, int Tn, int C, int NH, const AttentionSpec& spec,
                         const HeadParams<float>&, double*, const float*) override {
    const CostPrediction p = predict_forward(spec, B, Tn, NH, C / NH, false, gpu_);
    const double N = double(B) * Tn;
    auto bytes = [&](Widths w) { return 4 * N * C * w.sT + 2.0 * N * NH * w.sA; };
    add("attention_forward", 'a', attention_forward_flops(B, Tn, C), bytes(stored()), bytes(wide()), p.seconds);
  }
  void attention_backward(float*, const HeadGrads<float>&, const float*, const float*, const float*, const float*,
                          int B, int Tn, int C, int NH, const AttentionSpec& spec, const HeadParams<float>&, float*,
                          const float*) override {
    const CostPrediction p = predict_forward(spec, B, Tn, NH, C / NH, false, gpu_);
    const double N = double(B) * Tn;
    // qkv, out, dout read; dqkv read and written (+=); the statistics read.
    auto bytes = [&](Widths w) { return 11 * N * C * w.sT + 2.0 * N * NH * w.sA; };
    add("attention_backward", 'a', 2.5 * attention_forward_flops(B, Tn, C), bytes(stored()), bytes(wide()),
        2.5 * p.seconds);
  }

  void gelu_forward(float*, const float*, size_t n) override {
    record("gelu_forward", 'm', 20.0 * n, [&](Widths w) { return 2.0 * n * w.sT; });
  }
  void gelu_backward(float*, const float*, const float*, size_t n) override {
    record("gelu_backward", 'm', 30.0 * n, [&](Widths w) { return 4.0 * n * w.sT; });
  }
  void swiglu_forward(float*, const float*, int N, int F) override {
    const double nf = double(N) * F;
    record("swiglu_forward", 'm', 20.0 * nf, [&](Widths w) { return 3.0 * nf * w.sT; });
  }
  void swiglu_backward(float*, const float*, const float*, int N, int F) override {
    const double nf = double(N) * F;
    record("swiglu_backward", 'm', 30.0 * nf, [&](Widths w) { return 7.0 * nf * w.sT; });
  }
  // RoPE: qkv (N, 3C) read and written (v copied), the q and k channels
  // rotated (sincos and 6 instructions a pair: about 8 an element).
  void rope_forward(float*, const float*, int B, int Tn, int C, int, const RopeSpec&, int, const int32_t*) override {
    const double N = double(B) * Tn;
    record("rope_forward", 'm', 8 * N * 2 * C, [&](Widths w) { return 2 * N * 3 * C * w.sT; });
  }
  void rope_backward(float*, const float*, int B, int Tn, int C, int, const RopeSpec&, int, const int32_t*) override {
    const double N = double(B) * Tn;
    // dinp += the rotation back: dout read, dinp read and written.
    record("rope_backward", 'm', 8 * N * 2 * C, [&](Widths w) { return 3 * N * 3 * C * w.sT; });
  }
  void qknorm_forward(float*, float*, const float*, const float*, const float*, const float*, int N, int NH, int D,
                      double) override {
    const double n = N, C = double(NH) * D;
    record("qknorm_forward", 'm', 4 * n * 2 * C,
           [&](Widths w) { return (2 * n * 3 * C + 2.0 * D + NH) * w.sT + 2 * n * NH * w.sA; });
  }
  void qknorm_backward(float*, float*, float*, float*, const float*, const float*, const float*, const float*,
                       const float*, const float*, int N, int NH, int D) override {
    const double n = N, C = double(NH) * D;
    record("qknorm_backward", 'm', 10 * n * 2 * C, [&](Widths w) {
      return (3 * n * 3 * C + 2.0 * D + NH) * w.sT + (2 * n * NH + 2.0 * (2.0 * D + NH)) * w.sA;
    });
  }
  void gqa_expand(float*, const float*, int N, int NH, int NKV, int D) override {
    const double n = N, C = double(NH) * D, G = C + 2.0 * NKV * D;
    record("gqa_expand", 'm', 0, [&](Widths w) { return (n * G + n * 3 * C) * w.sT; });
  }
  void gqa_reduce(float*, const float*, int N, int NH, int NKV, int D) override {
    const double n = N, C = double(NH) * D, G = C + 2.0 * NKV * D;
    record("gqa_reduce", 'm', n * 2 * C, [&](Widths w) { return (n * 3 * C + 2 * n * G) * w.sT; });
  }
  void sigmoid_gate_forward(float*, const float*, const float*, size_t n) override {
    record("sigmoid_gate_forward", 'm', 16.0 * n, [&](Widths w) { return 3.0 * n * w.sT; });
  }
  void sigmoid_gate_backward(float*, float*, const float*, const float*, const float*, size_t n) override {
    record("sigmoid_gate_backward", 'm', 20.0 * n, [&](Widths w) { return 7.0 * n * w.sT; });
  }
  void gelu_erf_forward(float*, const float*, size_t n) override {
    record("gelu_erf_forward", 'm', 20.0 * n, [&](Widths w) { return 2.0 * n * w.sT; });
  }
  void gelu_erf_backward(float*, const float*, const float*, size_t n) override {
    record("gelu_erf_backward", 'm', 30.0 * n, [&](Widths w) { return 4.0 * n * w.sT; });
  }
  void relu2_forward(float*, const float*, size_t n) override {
    record("relu2_forward", 'm', 2.0 * n, [&](Widths w) { return 2.0 * n * w.sT; });
  }
  void relu2_backward(float*, const float*, const float*, size_t n) override {
    record("relu2_backward", 'm', 4.0 * n, [&](Widths w) { return 4.0 * n * w.sT; });
  }
  // The forget gate: g (B,T,NH) to the prefix sums c (B,NH,T) and back.
  void forget_forward(float*, const float*, int B, int Tn, int NH) override {
    const double n = double(B) * Tn * NH;
    record("forget_forward", 'm', 20 * n, [&](Widths w) { return n * w.sT + n * w.sA; });
  }
  void forget_backward(float*, const float*, const float*, int B, int Tn, int NH) override {
    const double n = double(B) * Tn * NH;
    record("forget_backward", 'm', 20 * n, [&](Widths w) { return 3 * n * w.sT + n * w.sA; });
  }
  // FIRE: the (NH,T,T) table from its MLP, and its gradient from the
  // (B,NH,T,T) dtable the attention backward writes.
  void fire_forward(float*, const float*, int Tn, int NH, double) override {
    const double n = double(NH) * Tn * Tn;
    record("fire_forward", 'm', 40 * n, [&](Widths w) { return n * w.sA; });
  }
  void fire_backward(float*, const float*, const float*, int B, int Tn, int NH, double) override {
    const double n = double(B) * NH * Tn * Tn;
    record("fire_backward", 'm', 40 * n, [&](Widths w) { return n * w.sA; });
  }
  // The distance biases under position ids: a (B,NH,T,T) table per layer
  // from the ids (FIRE: its MLP per pair, all heads at once) and back.
  void position_table_forward(float*, const float*, const int32_t*, int B, int Tn, int NH,
                              const AttentionSpec& s) override {
    const double n = double(B) * NH * Tn * Tn, per = s.fire() ? 40.0 : 10.0;
    record("position_table_forward", 'm', per * n, [&](Widths w) { return n * w.sA + double(B) * Tn * 4; });
  }
  void position_table_backward(float*, const float*, const float*, const int32_t*, int B, int Tn, int NH,
                               const AttentionSpec& s) override {
    if (attn::position_table::param_count(s, NH) == 0) return;
    const double n = double(B) * NH * Tn * Tn;
    record("position_table_backward", 'm', 40 * n, [&](Widths w) { return n * w.sA + double(B) * Tn * 4; });
  }
  // PoPE: qkv (N,3C) into the 2D-channel kernel heads qkv2 (N,6C) and back;
  // the outputs' first D channels of each kernel head.
  void pope_forward(float*, const float*, const float*, int B, int Tn, int C, int, double, const int32_t*) override {
    const double N = double(B) * Tn;
    record("pope_forward", 'm', 30 * N * 2 * C, [&](Widths w) { return (N * 3 * C + N * 6 * C + C) * w.sT; });
  }
  void pope_backward(float*, float*, const float*, const float*, const float*, int B, int Tn, int C, int, double,
                     const int32_t*) override {
    const double N = double(B) * Tn;
    record("pope_backward", 'm', 40 * N * 2 * C,
           [&](Widths w) { return (N * 6 * C + 3 * N * 3 * C + C) * w.sT + 2.0 * C * w.sA; });
  }
  void pope_output_forward(float*, const float*, int N, int C, int) override {
    record("pope_output_forward", 'm', 0, [&](Widths w) { return 1.5 * N * C * w.sT * 2; });
  }
  void pope_output_backward(float*, const float*, int N, int C, int) override {
    record("pope_output_backward", 'm', 0, [&](Widths w) { return 3.0 * N * C * w.sT; });
  }
  // Differential attention: the split of qkv (N,3C) into kernel heads
  // (N,6C), and the combination of their outputs (N,2C) into out (N,C).
  void diff_split_forward(float*, const float*, int N, int C, int) override {
    record("diff_split_forward", 'm', 0, [&](Widths w) { return 9.0 * N * C * w.sT; });
  }
  void diff_split_backward(float*, const float*, int N, int C, int) override {
    record("diff_split_backward", 'm', 3.0 * N * C, [&](Widths w) { return 12.0 * N * C * w.sT; });
  }
  void diff_combine_forward(float*, float*, const float*, const float*, const float*, int N, int C, int NH,
                            double) override {
    record("diff_combine_forward", 'm', 8.0 * N * C,
           [&](Widths w) { return 3.0 * N * C * w.sT + double(N) * NH * w.sA; });
  }
  void diff_combine_backward(float*, float*, float*, const float*, const float*, const float*, const float*,
                             const float*, int N, int C, int NH, double) override {
    record("diff_combine_backward", 'm', 16.0 * N * C,
           [&](Widths w) { return 5.0 * N * C * w.sT + double(N) * NH * w.sA; });
  }
  // Per-head float32-side inputs repeated over a head's group, and back.
  void head_repeat(float*, const float*, size_t outer, int NH, size_t inner, int group) override {
    const double n = double(outer) * NH * inner;
    add("head_repeat", 'm', 0, 4 * n * (1 + group), 4 * n * (1 + group));
  }
  void head_reduce(float*, const float*, size_t outer, int NH, size_t inner, int group) override {
    const double n = double(outer) * NH * inner;
    add("head_reduce", 'm', n * group, 4 * n * (2 + group), 4 * n * (2 + group));
  }
  void residual_forward(float*, const float*, const float*, size_t n) override {
    record("residual_forward", 'm', double(n), [&](Widths w) { return 3.0 * n * w.sT; });
  }
  void add_inplace(float*, const float*, size_t n) override {
    record("add_inplace", 'm', double(n), [&](Widths w) { return 3.0 * n * w.sT; });
  }
  // Reads V of each row's Vp logits; the backward writes all Vp (padding 0).
  void crossentropy_forward(float*, const float*, const int32_t*, int N, int V, int) override {
    const double n = N, v = V;
    record("crossentropy_forward", 'm', 4 * n * v, [&](Widths w) { return n * v * w.sT + 4 * n + n * w.sA; });
  }
  void crossentropy_backward(float*, const float*, const int32_t*, const float*, int N, int V, int Vp) override {
    const double n = N, v = V, vp = Vp;
    record("crossentropy_backward", 'm', 4 * n * v,
           [&](Widths w) { return (n * v + n * vp) * w.sT + 4 * n + n * w.sA; });
  }

 private:
  const GpuUnits& gpu_;
};

const GpuPeak& peak_of(const std::string& gpu) {
  const GpuPeak* p = cuda_peak(gpu == "h200" ? "H200" : "H100");
  GPT_CHECK(p, "bench: no peak figures for ", gpu);
  return *p;
}

}  // namespace

StepCost predict_step(const Config& cfg, const std::string& storage, const std::string& precision,
                      const std::string& gpu_name, bool native_bf16) {
  const GpuUnits* gpu = gpu_units(gpu_name);
  GPT_CHECK(gpu, "bench --gpu: \"", gpu_name, "\" has no cost model; valid: h100, h200");
  GPT_CHECK(storage == "fp32" || storage == "bf16", "bench step-cost: storage \"", storage, "\"; valid: fp32, bf16");
  const GpuPeak& peak = peak_of(gpu_name);
  double gemm_tflops = 0;
  if (precision == "fp32")
    gemm_tflops = peak.fp32;
  else if (precision == "tf32")
    gemm_tflops = peak.tf32;
  else if (precision == "bf16")
    gemm_tflops = peak.bf16;
  GPT_CHECK(gemm_tflops > 0, "bench step-cost: precision \"", precision, "\"; valid: fp32, tf32, bf16");

  auto owned = std::make_unique<CostBackend>(storage == "bf16" ? 2.0 : 4.0, *gpu);
  CostBackend* cost = owned.get();
  cost->native_ops = native_bf16;
  std::unique_ptr<Model<float>> model = make_model(cfg.model, resolve_attention(cfg), std::move(owned), storage);
  model->init(cfg.train.seed);
  cost->params = model->params();
  cost->n_params = model->num_params();
  Optimizer<float> optimizer(*model, cfg.train);
  const int B = cfg.train.batch_size, Tn = cfg.model.context;
  const std::vector<int32_t> tokens(static_cast<size_t>(B) * Tn, 1);
  // One step as the trainer runs it (bench_model's timed step).
  cost->reset();
  model->zero_grad();
  model->forward(tokens.data(), tokens.data(), B, Tn);
  model->backward();
  optimizer.clip(cfg.train.grad_clip);
  optimizer.step(cfg.train.lr);

  StepCost sc;
  sc.storage = storage;
  sc.native_bf16 = storage == "bf16" && native_bf16;
  sc.precision = precision;
  sc.gemm_peak_tflops = gemm_tflops;
  sc.not_modelled = cost->not_modelled;
  const double hbm = gpu->hbm_tbytes * 1e12, fp32 = gpu->fp32_tinstr * 1e12;
  for (StepCostRow r : cost->rows) {
    if (r.unit == 'a') {
      r.min_seconds = r.seconds;  // the attention model's time (its bytes included)
      r.bound = "attention model";
    } else {
      const double compute = r.flops / (r.unit == 'g' ? gemm_tflops * 1e12 : fp32);
      r.bound = compute >= r.code_bytes / hbm ? (r.unit == 'g' ? "GEMM peak" : "fp32 rate") : "memory";
      r.seconds = std::max(compute, r.code_bytes / hbm);
      // A pass with no minimum (the adapter's) has no counterpart at all.
      r.min_seconds = r.min_bytes == 0 ? 0 : std::max(compute, r.min_bytes / hbm);
    }
    sc.seconds += r.seconds;
    sc.min_seconds += r.min_seconds;
    sc.rows.push_back(r);
  }
  const ModelConfig& m = cfg.model;
  const double tokens_per_step = double(B) * Tn;
  sc.model_flops =
      6 * matmul_weights(m) * tokens_per_step + 3 * m.n_layer * attention_forward_flops(B, Tn, m.attn_width());
  return sc;
}

void run_step_cost(const Config& cfg, const std::string& gpu, std::ostream& out) {
  const ModelConfig& m = cfg.model;
  const int B = cfg.train.batch_size, Tn = m.context;
  const GpuUnits* units = gpu_units(gpu);
  GPT_CHECK(units, "bench --gpu: \"", gpu, "\" has no cost model; valid: h100, h200");
  const GpuPeak& peak = peak_of(gpu);
  char line[256];
  out << "cost model of one training step on " << units->name << " (no GPU used): " << m.n_layer << " layers, C="
      << m.n_embd << ", V=" << m.vocab_size << ", B=" << B << ", T=" << Tn << ", attention " << cfg.attention.preset
      << ", optimizer " << cfg.train.optimizer << "\n";
  std::snprintf(line, sizeof line,
                "peaks: %.0f bf16 / %.0f tf32 / %.1f fp32 dense TFLOP/s (GEMMs), %.1fe12 fp32 instructions/s, "
                "%.2f TB/s memory\n",
                peak.bf16, peak.tf32, peak.fp32, units->fp32_tinstr, units->hbm_tbytes);
  out << line;
  struct Case {
    const char* storage;
    const char* precision;
    bool native;
  };
  for (const Case c : {Case{"fp32", "tf32", false}, Case{"bf16", "bf16", false}, Case{"bf16", "bf16", true}}) {
    const StepCost sc = predict_step(cfg, c.storage, c.precision, gpu, c.native);
    out << "\nrun.storage " << sc.storage << ", run.precision " << sc.precision
        << (c.storage == std::string("fp32") ? ""
            : c.native ? ", with the native bf16 ops (LayerNorm, GELU, residual adds, classifier: as the CUDA backend "
                         "runs them)"
                       : ", every op through the bf16 adapter (without the native bf16 ops)")
        << "\n";
    out << "| op | calls | GFLOP | min MB | code MB | bound | ms | share | ms at min MB |\n";
    out << "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n";
    for (const StepCostRow& r : sc.rows) {
      std::snprintf(line, sizeof line, "| %s | %ld | %.1f | %.1f | %.1f | %s | %.3f | %.1f%% | %.3f |\n",
                    r.op.c_str(), r.calls, r.flops / 1e9, r.min_bytes / 1e6, r.code_bytes / 1e6, r.bound,
                    r.seconds * 1e3, 100 * r.seconds / sc.seconds, r.min_seconds * 1e3);
      out << line;
    }
    const double tokens = double(B) * Tn;
    std::snprintf(line, sizeof line,
                  "predicted step %.2f ms (%.0f tokens/s), model %.1f TFLOP: MFU %.1f%% of the bf16 peak, %.1f%% "
                  "of the %s peak; every op at its minimum bytes: %.2f ms (MFU %.1f%% of bf16)\n",
                  sc.seconds * 1e3, tokens / sc.seconds, sc.model_flops / 1e12,
                  100 * sc.model_flops / (sc.seconds * peak.bf16 * 1e12),
                  100 * sc.model_flops / (sc.seconds * sc.gemm_peak_tflops * 1e12), sc.precision.c_str(),
                  sc.min_seconds * 1e3, 100 * sc.model_flops / (sc.min_seconds * peak.bf16 * 1e12));
    out << line;
    double adapter = 0;
    for (const StepCostRow& r : sc.rows)
      if (r.op.rfind("bf16 adapter", 0) == 0) adapter += r.seconds;
    if (adapter > 0) {
      std::snprintf(line, sizeof line, "the bf16 adapter's passes (widen, round): %.2f ms, %.1f%% of the step\n",
                    adapter * 1e3, 100 * adapter / sc.seconds);
      out << line;
    }
    if (!sc.not_modelled.empty()) {
      out << "not modelled (left out of the sum):";
      for (const std::string& s : sc.not_modelled) out << " " << s;
      out << "\n";
    }
  }
}

}  // namespace gpt
