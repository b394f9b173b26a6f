// Test helper: a small GPT-2 in llm.c's checkpoint layout, written from
// docs/formats.md alone (header of 256 int32, then 16 tensors in the
// documented order and shapes), and a plain double-precision forward pass of
// llm.c's model math over those tensors. Shared by the converter, eval and CLI
// tests; independent of the project's converter and model code.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace gpt::test {

struct LlmcModel {
  int T = 8, V = 50, L = 2, H = 2, C = 8, Vp = 128;
  // In file order: wte wpe ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw fcprojb lnfw lnfb.
  std::vector<std::vector<float>> t;

  std::vector<size_t> sizes() const {
    const size_t C_ = C, L_ = L;
    return {size_t(Vp) * C_,  size_t(T) * C_, L_ * C_,   L_ * C_,  L_ * 3 * C_ * C_, L_ * 3 * C_,
            L_ * C_ * C_,     L_ * C_,        L_ * C_,   L_ * C_,  L_ * 4 * C_ * C_, L_ * 4 * C_,
            L_ * C_ * 4 * C_, L_ * C_,        size_t(C), size_t(C)};
  }

  // Random weights: LayerNorm weights near 1, everything else ~U(-a, a); wte
  // rows V..Vp-1 zero. bf16_exact: every value representable in bfloat16, so
  // a version-5 file holds exactly these values.
  void randomize(uint64_t seed, bool bf16_exact = false) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    auto uniform = [&] {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      return static_cast<double>(x >> 11) / 9007199254740992.0 * 2 - 1;  // [-1, 1)
    };
    const auto n = sizes();
    t.assign(16, {});
    for (int k = 0; k < 16; ++k) {
      const bool ln_weight = k == 2 || k == 8 || k == 14;
      t[k].resize(n[k]);
      for (auto& v : t[k]) {
        v = static_cast<float>(ln_weight ? 1 + 0.2 * uniform() : 0.4 * uniform());
        if (bf16_exact) v = std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0xffff0000u);
      }
    }
    for (size_t i = size_t(V) * C; i < t[0].size(); ++i) t[0][i] = 0;
  }

  // version 3: float32; 5: bfloat16 (the upper 16 bits of each float32).
  void write(const std::string& path, int version = 3) const {
    int32_t hdr[256] = {};
    hdr[0] = 20240326, hdr[1] = version, hdr[2] = T, hdr[3] = V, hdr[4] = L, hdr[5] = H, hdr[6] = C, hdr[7] = Vp;
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(hdr, sizeof hdr, 1, f);
    for (const auto& v : t) {
      if (version == 3) {
        std::fwrite(v.data(), 4, v.size(), f);
      } else {
        for (float x : v) {
          const uint16_t b = static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16);
          std::fwrite(&b, 2, 1, f);
        }
      }
    }
    std::fclose(f);
  }

  // llm.c's math in double: logits (n x V) of tokens[0..n), n <= T.
  std::vector<double> logits(const std::vector<int32_t>& tokens) const {
    const int n = static_cast<int>(tokens.size()), D = C / H;
    const auto &wte = t[0], &wpe = t[1];
    std::vector<double> x(size_t(n) * C);
    for (int p = 0; p < n; ++p)
      for (int c = 0; c < C; ++c) x[p * C + c] = double(wte[size_t(tokens[p]) * C + c]) + wpe[size_t(p) * C + c];
    auto layernorm = [&](const std::vector<double>& in, const float* w, const float* b) {
      std::vector<double> out(in.size());
      for (int p = 0; p < n; ++p) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; ++c) mean += in[p * C + c] / C;
        for (int c = 0; c < C; ++c) var += (in[p * C + c] - mean) * (in[p * C + c] - mean) / C;
        for (int c = 0; c < C; ++c) out[p * C + c] = (in[p * C + c] - mean) / std::sqrt(var + 1e-5) * w[c] + b[c];
      }
      return out;
    };
    // y = in · Wᵀ + b, W (out, in)
    auto linear = [&](const std::vector<double>& in, int IN, const float* W, const float* b, int OUT) {
      std::vector<double> out(size_t(n) * OUT);
      for (int p = 0; p < n; ++p)
        for (int o = 0; o < OUT; ++o) {
          double s = b ? b[o] : 0.0;
          for (int i = 0; i < IN; ++i) s += in[size_t(p) * IN + i] * W[size_t(o) * IN + i];
          out[size_t(p) * OUT + o] = s;
        }
      return out;
    };
    for (int l = 0; l < L; ++l) {
      const size_t lc = size_t(l) * C;
      auto h = layernorm(x, &t[2][lc], &t[3][lc]);
      auto qkv = linear(h, C, &t[4][lc * 3 * C], &t[5][lc * 3], 3 * C);
      std::vector<double> y(size_t(n) * C, 0.0);
      for (int hh = 0; hh < H; ++hh)
        for (int p = 0; p < n; ++p) {
          std::vector<double> s(p + 1);
          double mx = -1e300, z = 0;
          for (int q = 0; q <= p; ++q) {
            double d = 0;
            for (int i = 0; i < D; ++i)
              d += qkv[size_t(p) * 3 * C + hh * D + i] * qkv[size_t(q) * 3 * C + C + hh * D + i];
            s[q] = d / std::sqrt(double(D));
            mx = std::max(mx, s[q]);
          }
          for (int q = 0; q <= p; ++q) z += s[q] = std::exp(s[q] - mx);
          for (int q = 0; q <= p; ++q)
            for (int i = 0; i < D; ++i)
              y[size_t(p) * C + hh * D + i] += s[q] / z * qkv[size_t(q) * 3 * C + 2 * C + hh * D + i];
        }
      auto proj = linear(y, C, &t[6][lc * C], &t[7][lc], C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
      auto h2 = layernorm(x, &t[8][lc], &t[9][lc]);
      auto u = linear(h2, C, &t[10][lc * 4 * C], &t[11][lc * 4], 4 * C);
      for (auto& v : u) v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      auto down = linear(u, 4 * C, &t[12][lc * 4 * C], &t[13][lc], C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
    }
    auto f = layernorm(x, t[14].data(), t[15].data());
    return linear(f, C, wte.data(), nullptr, V);  // tied head, first V rows
  }

  // Per-position cross-entropy of targets given inputs.
  std::vector<double> losses(const std::vector<int32_t>& in, const std::vector<int32_t>& tg) const {
    const auto lg = logits(in);
    std::vector<double> out(in.size());
    for (size_t p = 0; p < in.size(); ++p) {
      double mx = -1e300, z = 0;
      for (int v = 0; v < V; ++v) mx = std::max(mx, lg[p * V + v]);
      for (int v = 0; v < V; ++v) z += std::exp(lg[p * V + v] - mx);
      out[p] = std::log(z) + mx - lg[p * V + tg[p]];
    }
    return out;
  }
};

}  // namespace gpt::test
