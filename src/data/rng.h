// The project's own random numbers: xoshiro256** seeded through splitmix64
// (Blackman & Vigna, https://prng.di.unimi.it/). Our own generator rather than
// <random>, whose distributions differ between standard libraries, so a seed
// gives the same shuffle and the same initial weights on every machine. The
// four state words are exposed so checkpoints can resume the exact sequence.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

#include "core/check.h"

namespace gpt {

struct Rng {
  using State = std::array<uint64_t, 4>;

  // splitmix64 spreads any seed (0 included) over the 256-bit state, which
  // xoshiro needs to be non-zero.
  explicit Rng(uint64_t seed) {
    for (auto& w : s_) w = splitmix64(seed);
  }

  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // [0, 1) with 53 random bits, the full precision of a double.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  // Standard normal by Box-Muller. One value per call (the second is dropped)
  // so the generator's state is only the four words. Identical on machines
  // whose libm agrees on log/cos/sqrt (glibc does across x86-64 and arm64).
  float normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log(u1) is finite
    const double u2 = uniform();
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
  }

  // Uniform in [0, n), unbiased: draws below 2^64 mod n are rejected so that
  // every residue is hit equally often.
  uint64_t below(uint64_t n) {
    GPT_CHECK(n > 0, "Rng::below(n) needs n > 0");
    const uint64_t threshold = (0 - n) % n;  // = 2^64 mod n
    for (;;) {
      const uint64_t x = next_u64();
      if (x >= threshold) return x % n;
    }
  }

  State state() const { return s_; }
  void set_state(const State& s) {
    GPT_CHECK(s[0] | s[1] | s[2] | s[3], "Rng state must not be all zero");
    s_ = s;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  State s_;
};

}  // namespace gpt
