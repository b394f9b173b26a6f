// The orbital data (data/orbits.h, docs/orbits.md): Kepler's laws against
// the integrator, conservation over a sequence, the tokenisation, the
// sequence layout and forces, the sampling distributions, determinism and
// the files.
#include "data/orbits.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/files.h"
#include "data/rng.h"
#include "data/shard.h"

namespace fs = std::filesystem;

namespace gpt::orbits {
namespace {

// The Kepler initial state against the two-body invariants (vis-viva: the
// specific energy is −mu/(2a); the specific angular momentum is
// sqrt(mu a (1 − e²))), and the distance at periapsis a(1 − e).
TEST(Orbits, KeplerStateHasTheOrbitsInvariants) {
  for (double e : {0.0, 0.3, 0.9})
    for (double M : {0.0, 1.0, 4.0}) {
      const double a = 2.5, mu = kG * 1.2;
      double r[2], v[2];
      kepler_state(a, e, 0.7, M, mu, r, v);
      const double d = std::hypot(r[0], r[1]);
      const double energy = 0.5 * (v[0] * v[0] + v[1] * v[1]) - mu / d;
      EXPECT_NEAR(energy, -mu / (2 * a), 1e-12 * mu / a) << "e " << e << " M " << M;
      EXPECT_NEAR(r[0] * v[1] - r[1] * v[0], std::sqrt(mu * a * (1 - e * e)), 1e-12 * std::sqrt(mu * a));
      if (M == 0.0) {
        EXPECT_NEAR(d, a * (1 - e), 1e-12 * a);
        EXPECT_NEAR(std::atan2(r[1], r[0]), 0.7, 1e-12) << "periapsis at the angle omega";
      }
    }
}

// Kepler's third law through the integrator: after T = 2π sqrt(a³/mu) the
// leapfrog orbit is back where it started (and is not at 0.9 T).
TEST(Orbits, LeapfrogOrbitReturnsAfterKeplersPeriod) {
  for (double a : {0.5, 5.0, 30.0})
    for (double e : {0.0, 0.5}) {
      const double mu = kG * (1.0 + 1e-5);
      const double T = 2 * kPi * std::sqrt(a * a * a / mu);
      double r0[2], v0[2];
      kepler_state(a, e, 0.3, 0.0, mu, r0, v0);
      double r[2] = {r0[0], r0[1]}, v[2] = {v0[0], v0[1]};
      const int n = 200000;
      leapfrog(r, v, mu, 0.9 * T / n, n);
      EXPECT_GT(std::hypot(r[0] - r0[0], r[1] - r0[1]), 0.05 * a) << "a " << a << " e " << e;
      leapfrog(r, v, mu, 0.1 * T / (n / 9), n / 9);
      const double miss = std::hypot(r[0] - r0[0], r[1] - r0[1]) / a;
      std::printf("[kepler] a %5.1f AU e %.1f: period %.4f yr, miss after one period %.1e a\n", a, e, T, miss);
      EXPECT_LT(miss, 1e-4) << "a " << a << " e " << e;
    }
}

// Over a sequence of the source's length the step rule keeps each planet's
// two-body energy within 1% and its angular momentum to rounding
// (leapfrog conserves r × v exactly in a central field).
TEST(Orbits, SequencesConserveEnergyAndAngularMomentum) {
  Options opt;
  double worst = 0, worst_l = 0;
  for (uint64_t i = 0; i < 40; ++i) {
    const Sequence s = make_sequence(7, 0, i, opt);
    worst = std::max(worst, s.energy_drift);
    worst_l = std::max(worst_l, s.momentum_drift);
  }
  std::printf("[orbits] 40 sequences: max relative energy drift %.2e, angular momentum %.2e\n", worst, worst_l);
  EXPECT_LT(worst, 1e-2);
  EXPECT_LT(worst_l, 1e-10);
}

// Every value in range comes back within half a bin; values outside are
// clipped to the end bins; the dt tokens follow the bins.
TEST(Orbits, TokensRoundTripWithinABin) {
  Options opt;
  const double w = 2 * opt.range / opt.bins;
  Rng rng(3);
  for (int i = 0; i < 10000; ++i) {
    const double v = -opt.range + 2 * opt.range * rng.uniform();
    const int32_t b = bin_of(v, opt);
    ASSERT_GE(b, 0);
    ASSERT_LT(b, opt.bins);
    EXPECT_LE(std::fabs(bin_centre(b, opt) - v), 0.5 * w * (1 + 1e-9)) << v;
  }
  EXPECT_EQ(bin_of(-1e9, opt), 0);
  EXPECT_EQ(bin_of(1e9, opt), opt.bins - 1);
  EXPECT_EQ(bin_of(0.0, opt), opt.bins / 2);
  EXPECT_EQ(dt_token(kDtWeek, opt), 7000);
  EXPECT_EQ(dt_token(kDtHalfYear, opt), 7001);
  EXPECT_EQ(vocab_size(opt), 7002);
}

// The layout: the dt token, then x and y of each listed position (planets in
// order, then the star, at each time); the forces are Newton's on each
// planet (toward the star) and their opposite sum on the star; one planet
// orbits the barycentre, which stays put.
TEST(Orbits, SequenceLayoutAndForces) {
  Options opt;
  opt.rows = 101;
  Rng rng(11);
  System sys = sample_system(rng, opt);
  sys.planets.resize(3);
  const Sequence s = simulate(sys, opt);
  ASSERT_EQ(s.tokens.size(), 1u + 2 * 100);
  ASSERT_EQ(s.rows.size(), 100u);
  EXPECT_EQ(s.tokens[0], dt_token(sys.dt, opt));
  for (size_t k = 0; k < s.rows.size(); ++k) {
    const Row& r = s.rows[k];
    EXPECT_EQ(r.body, static_cast<int>(k % 4));
    EXPECT_EQ(r.step, static_cast<int>(k / 4));
    EXPECT_EQ(s.tokens[1 + 2 * k], bin_of(r.x, opt));
    EXPECT_EQ(s.tokens[2 + 2 * k], bin_of(r.y, opt));
    if (r.body < 3) {
      const size_t si = k - r.body + 3;  // the star of the same time
      if (si >= s.rows.size()) continue;
      const Row& star = s.rows[si];
      const double dx = star.x - r.x, dy = star.y - r.y, d = std::hypot(dx, dy);
      EXPECT_NEAR(r.r, d, 1e-9 * d);
      const double f = kG * r.mass * r.star_mass / (d * d);
      EXPECT_NEAR(r.fx, f * dx / d, 1e-9 * f);
      EXPECT_NEAR(r.fy, f * dy / d, 1e-9 * f);
    } else {
      double sx = 0, sy = 0;
      for (int b = 0; b < 3; ++b) sx += s.rows[k - 3 + b].fx, sy += s.rows[k - 3 + b].fy;
      EXPECT_NEAR(r.fx, -sx, 1e-12 + 1e-9 * std::fabs(sx));
      EXPECT_NEAR(r.fy, -sy, 1e-12 + 1e-9 * std::fabs(sy));
      EXPECT_EQ(r.x, sys.com_x) << "with several planets the star stays at the frame's centre";
    }
  }
  sys.planets.resize(1);
  const Sequence one = simulate(sys, opt);
  const double m = sys.planets[0].mass, M = sys.star_mass;
  for (size_t k = 0; k + 1 < one.rows.size(); k += 2) {
    const Row &p = one.rows[k], &st = one.rows[k + 1];
    EXPECT_NEAR((m * p.x + M * st.x) / (m + M), sys.com_x, 1e-9);
    EXPECT_NEAR((m * p.y + M * st.y) / (m + M), sys.com_y, 1e-9);
  }
}

// Sampling: the means and variances of the gamma and beta generators within
// 5 standard errors of the formulas (Gamma(k, 1): mean k, variance k;
// Beta(a, b): mean a/(a+b)); the system's ranges; determinism in the seed.
TEST(Orbits, DistributionsRangesAndDeterminism) {
  Rng rng(5);
  const int n = 40000;
  for (double k : {0.3202, 2.5}) {
    double s = 0, s2 = 0;
    for (int i = 0; i < n; ++i) {
      const double x = sample_gamma(rng, k);
      s += x, s2 += x * x;
    }
    const double mean = s / n, var = s2 / n - mean * mean;
    EXPECT_NEAR(mean, k, 5 * std::sqrt(k / n)) << "gamma shape " << k;
    EXPECT_NEAR(var, k, 0.1 * k) << "gamma shape " << k;
  }
  double sb = 0;
  for (int i = 0; i < n; ++i) sb += sample_beta(rng, 0.867, 3.03);
  const double a = 0.867, b = 3.03, vb = a * b / ((a + b) * (a + b) * (a + b + 1));
  EXPECT_NEAR(sb / n, a / (a + b), 5 * std::sqrt(vb / n));
  Options opt;
  for (int i = 0; i < 200; ++i) {
    const System s = sample_system(rng, opt);
    ASSERT_GE(s.planets.size(), 1u);
    ASSERT_LE(s.planets.size(), 10u);
    EXPECT_GE(s.star_mass, 0.1);
    EXPECT_LE(s.star_mass, 5.0);
    EXPECT_TRUE(s.dt == kDtWeek || s.dt == kDtHalfYear);
    for (const Planet& p : s.planets) {
      EXPECT_GE(p.a, 0.3);
      EXPECT_LE(p.a, 32.0);
      EXPECT_GE(p.e, 0.0);
      EXPECT_LT(p.e, 1.0);
      EXPECT_GE(p.mass, 1e-9);
      EXPECT_LE(p.mass, 1e-3);
    }
  }
  opt.rows = 50;
  EXPECT_EQ(make_sequence(9, 0, 4, opt).tokens, make_sequence(9, 0, 4, opt).tokens);
  EXPECT_NE(make_sequence(9, 0, 4, opt).tokens, make_sequence(9, 0, 5, opt).tokens);
  EXPECT_NE(make_sequence(9, 0, 4, opt).tokens, make_sequence(9, 1, 4, opt).tokens);
}

// The files: token shards of the vocabulary, the rows beside them (one per
// listed position), and orbits.json with the integrator's drift.
TEST(Orbits, WritesShardsRowsAndMetadata) {
  const fs::path dir = fs::temp_directory_path() / ("gpt_orbits_" + std::to_string(::getpid()));
  DataOptions d;
  d.out_dir = dir.string();
  d.train_sequences = 6;
  d.val_sequences = 2;
  d.orbit.rows = 40;
  const DataResult r = write_orbit_data(d);
  EXPECT_EQ(r.train_tokens, 6u * (1 + 2 * 39));
  EXPECT_EQ(r.val_tokens, 2u * (1 + 2 * 39));
  const ShardInfo info = read_shard_header((dir / "orbits_train_000001.bin").string());
  EXPECT_EQ(info.ntokens, r.train_tokens);
  std::ifstream rows(dir / "orbits_train_000001.rows", std::ios::binary);
  char magic[8];
  uint64_t n = 0, cols = 0;
  rows.read(magic, 8);
  rows.read(reinterpret_cast<char*>(&n), 8);
  rows.read(reinterpret_cast<char*>(&cols), 8);
  EXPECT_EQ(std::string(magic, 8), "GPTORBT1");
  EXPECT_EQ(n, 6u * 39);
  EXPECT_EQ(cols, static_cast<uint64_t>(kRowColumns));
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "orbits.json"));
  EXPECT_EQ(j.at("vocab_size"), 7002);
  EXPECT_LT(j.at("energy_drift").at("max").get<double>(), 1e-2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpt::orbits
