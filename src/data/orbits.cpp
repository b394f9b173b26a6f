#include "data/orbits.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "core/files.h"
#include "data/rng.h"
#include "data/shard.h"
#include "data/synthetic.h"

namespace gpt::orbits {

namespace fs = std::filesystem;

double sample_normal(Rng& rng) {
  const double u1 = 1.0 - rng.uniform();  // (0, 1]
  const double u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

// Marsaglia and Tsang (2000), "A simple method for generating gamma
// variables"; shape < 1 through Gamma(shape + 1)·U^(1/shape).
double sample_gamma(Rng& rng, double shape) {
  GPT_CHECK(shape > 0, "orbits: gamma shape must be positive, got ", shape);
  if (shape < 1.0) {
    const double u = 1.0 - rng.uniform();
    return sample_gamma(rng, shape + 1.0) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = sample_normal(rng);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = 1.0 - rng.uniform();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

double sample_beta(Rng& rng, double a, double b) {
  const double x = sample_gamma(rng, a), y = sample_gamma(rng, b);
  return x / (x + y);
}

System sample_system(Rng& rng, const Options& opt) {
  System s;
  // lognormal (s, loc, scale): loc + scale·exp(s·z)
  s.star_mass = std::clamp(-0.67936 + 1.62715 * std::exp(0.20045 * sample_normal(rng)), 0.1, 5.0);
  s.com_x = sample_normal(rng);
  s.com_y = sample_normal(rng);
  s.dt = rng.uniform() < 0.5 ? kDtWeek : kDtHalfYear;
  const int n = opt.min_planets + static_cast<int>(rng.below(opt.max_planets - opt.min_planets + 1));
  for (int i = 0; i < n; ++i) {
    Planet p;
    p.a = 0.3 + (32.0 - 0.3) * rng.uniform();
    p.e = sample_beta(rng, 0.867, 3.03);
    p.mass = std::clamp(6.0098e-8 + 1.10559e-3 * sample_gamma(rng, 0.32020), 1e-9, 1e-3);
    p.omega = 2.0 * kPi * rng.uniform();
    p.mean_anomaly = 2.0 * kPi * rng.uniform();
    s.planets.push_back(p);
  }
  return s;
}

void kepler_state(double a, double e, double omega, double M, double mu, double* r, double* v) {
  GPT_CHECK(a > 0 && e >= 0 && e < 1 && mu > 0, "orbits: a bound orbit needs a > 0, 0 <= e < 1, mu > 0");
  double E = e < 0.8 ? M : kPi;
  for (int it = 0; it < 100; ++it) {
    const double f = E - e * std::sin(E) - M, step = f / (1.0 - e * std::cos(E));
    E -= step;
    if (std::fabs(step) < 1e-15) break;
  }
  const double n = std::sqrt(mu / (a * a * a)), q = 1.0 - e * std::cos(E), s1 = std::sqrt(1.0 - e * e);
  const double px = a * (std::cos(E) - e), py = a * s1 * std::sin(E);
  const double vx = -n * a * std::sin(E) / q, vy = n * a * s1 * std::cos(E) / q;
  const double c = std::cos(omega), s = std::sin(omega);
  r[0] = c * px - s * py;
  r[1] = s * px + c * py;
  v[0] = c * vx - s * vy;
  v[1] = s * vx + c * vy;
}

void leapfrog(double* r, double* v, double mu, double h, int n) {
  auto kick = [&](double dt) {
    const double d2 = r[0] * r[0] + r[1] * r[1], inv3 = 1.0 / (d2 * std::sqrt(d2));
    v[0] -= mu * r[0] * inv3 * dt;
    v[1] -= mu * r[1] * inv3 * dt;
  };
  for (int i = 0; i < n; ++i) {
    kick(0.5 * h);
    r[0] += v[0] * h;
    r[1] += v[1] * h;
    kick(0.5 * h);
  }
}

int substeps(const Planet& p, double mu, double dt, const Options& opt) {
  const double rp = p.a * (1.0 - p.e), scale = std::sqrt(rp * rp * rp / mu);
  const double k = std::ceil(dt / (opt.eta * scale));
  return static_cast<int>(std::clamp(k, 1.0, static_cast<double>(opt.max_substeps)));
}

int32_t bin_of(double v, const Options& opt) {
  const double w = 2.0 * opt.range / opt.bins;
  const double k = std::floor((v + opt.range) / w);
  return static_cast<int32_t>(std::clamp(k, 0.0, static_cast<double>(opt.bins - 1)));
}

double bin_centre(int32_t bin, const Options& opt) {
  const double w = 2.0 * opt.range / opt.bins;
  return -opt.range + (bin + 0.5) * w;
}

Sequence simulate(const System& sys, const Options& opt) {
  Sequence out;
  out.system = sys;
  const int np = static_cast<int>(sys.planets.size()), bodies = np + 1, positions = opt.rows - 1;
  const int steps = (positions + bodies - 1) / bodies;
  struct State {
    double r[2], v[2], mu, e0, l0;
    int k;
  };
  std::vector<State> st(np);
  for (int i = 0; i < np; ++i) {
    const Planet& p = sys.planets[i];
    State& s = st[i];
    s.mu = kG * (sys.star_mass + p.mass);
    kepler_state(p.a, p.e, p.omega, p.mean_anomaly, s.mu, s.r, s.v);
    s.e0 = 0.5 * (s.v[0] * s.v[0] + s.v[1] * s.v[1]) - s.mu / std::hypot(s.r[0], s.r[1]);
    s.l0 = s.r[0] * s.v[1] - s.r[1] * s.v[0];
    s.k = substeps(p, s.mu, sys.dt, opt);
    out.max_substeps = std::max(out.max_substeps, s.k);
  }
  out.tokens.push_back(dt_token(sys.dt, opt));
  for (int t = 0; t < steps && static_cast<int>(out.rows.size()) < positions; ++t) {
    if (t > 0)
      for (State& s : st) leapfrog(s.r, s.v, s.mu, sys.dt / s.k, s.k);
    double star_fx = 0, star_fy = 0, star_x = sys.com_x, star_y = sys.com_y;
    if (np == 1) {  // barycentric: the star moves (the source's one-planet frame)
      const double m = sys.planets[0].mass, M = sys.star_mass;
      star_x -= m / (m + M) * st[0].r[0];
      star_y -= m / (m + M) * st[0].r[1];
    }
    std::vector<Row> step_rows;
    for (int i = 0; i < np; ++i) {
      const State& s = st[i];
      const Planet& p = sys.planets[i];
      const double d = std::hypot(s.r[0], s.r[1]);
      const double f = kG * p.mass * sys.star_mass / (d * d);  // toward the star
      Row row;
      row.step = t;
      row.body = i;
      row.x = star_x + s.r[0];
      row.y = star_y + s.r[1];
      row.fx = -f * s.r[0] / d;
      row.fy = -f * s.r[1] / d;
      row.r = d;
      row.mass = p.mass;
      row.star_mass = sys.star_mass;
      star_fx -= row.fx;
      star_fy -= row.fy;
      step_rows.push_back(row);
      const double e = 0.5 * (s.v[0] * s.v[0] + s.v[1] * s.v[1]) - s.mu / d;
      const double l = s.r[0] * s.v[1] - s.r[1] * s.v[0];
      out.energy_drift = std::max(out.energy_drift, std::fabs((e - s.e0) / s.e0));
      out.momentum_drift = std::max(out.momentum_drift, std::fabs((l - s.l0) / s.l0));
    }
    Row star;
    star.step = t;
    star.body = np;
    star.x = star_x;
    star.y = star_y;
    star.fx = star_fx;
    star.fy = star_fy;
    star.mass = star.star_mass = sys.star_mass;
    step_rows.push_back(star);
    for (const Row& row : step_rows) {
      if (static_cast<int>(out.rows.size()) == positions) break;
      out.rows.push_back(row);
      out.tokens.push_back(bin_of(row.x, opt));
      out.tokens.push_back(bin_of(row.y, opt));
    }
  }
  return out;
}

Sequence make_sequence(uint64_t seed, uint64_t stream, uint64_t i, const Options& opt) {
  Rng rng(synthetic_seed(seed, stream, i));
  return simulate(sample_system(rng, opt), opt);
}

namespace {

void check_options(const DataOptions& d) {
  const Options& o = d.orbit;
  GPT_CHECK(o.bins >= 2 && o.bins <= 65534, "orbits: --bins must be in [2, 65534] (uint16 tokens), got ", o.bins);
  GPT_CHECK(o.range > 0, "orbits: --range must be positive, got ", o.range);
  GPT_CHECK(o.rows >= 2, "orbits: --rows must be >= 2 (the dt row and a position), got ", o.rows);
  GPT_CHECK(o.min_planets >= 1 && o.max_planets >= o.min_planets && o.max_planets <= 100,
            "orbits: planets per system must satisfy 1 <= min <= max <= 100, got ", o.min_planets, "..", o.max_planets);
  GPT_CHECK(o.eta > 0 && o.eta <= 1, "orbits: --eta must be in (0, 1], got ", o.eta);
  GPT_CHECK(d.train_sequences >= 1 && d.val_sequences >= 1, "orbits: train and validation sequences must be >= 1");
}

void write_rows(const std::string& path, const std::vector<double>& rows) {
  std::ofstream out(path, std::ios::binary);
  GPT_CHECK(out, "orbits: cannot write ", path);
  const char magic[8] = {'G', 'P', 'T', 'O', 'R', 'B', 'T', '1'};
  const uint64_t n = rows.size() / kRowColumns, cols = kRowColumns;
  out.write(magic, 8);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(reinterpret_cast<const char*>(&cols), 8);
  out.write(reinterpret_cast<const char*>(rows.data()), static_cast<std::streamsize>(rows.size() * sizeof(double)));
  GPT_CHECK(out.good(), "orbits: writing ", path, " failed");
}

}  // namespace

DataResult write_orbit_data(const DataOptions& opt) {
  check_options(opt);
  fs::create_directories(opt.out_dir);
  DataResult res;
  std::vector<double> drifts;
  for (int split = 0; split < 2; ++split) {
    const int64_t count = split == 0 ? opt.train_sequences : opt.val_sequences;
    std::vector<uint32_t> tokens;
    std::vector<double> rows;
    for (int64_t i = 0; i < count; ++i) {
      const Sequence s = make_sequence(opt.seed, split, static_cast<uint64_t>(i), opt.orbit);
      tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
      for (const Row& r : s.rows)
        rows.insert(rows.end(), {static_cast<double>(i), static_cast<double>(r.step), static_cast<double>(r.body), r.x,
                                 r.y, r.fx, r.fy, r.r, r.mass, r.star_mass});
      drifts.push_back(s.energy_drift);
      res.max_energy_drift = std::max(res.max_energy_drift, s.energy_drift);
      res.max_momentum_drift = std::max(res.max_momentum_drift, s.momentum_drift);
      res.max_substeps = std::max(res.max_substeps, s.max_substeps);
    }
    const std::string base =
        (fs::path(opt.out_dir) / (opt.name + (split == 0 ? "_train_000001" : "_val_000000"))).string();
    write_shard(base + ".bin", tokens, 2);
    write_rows(base + ".rows", rows);
    res.files.push_back(base + ".bin");
    res.files.push_back(base + ".rows");
    (split == 0 ? res.train_tokens : res.val_tokens) = tokens.size();
  }
  std::sort(drifts.begin(), drifts.end());
  res.median_energy_drift = drifts[drifts.size() / 2];
  const Options& o = opt.orbit;
  const nlohmann::json meta = {
      {"kind", "orbits"},
      {"name", opt.name},
      {"seed", opt.seed},
      {"train_sequences", opt.train_sequences},
      {"val_sequences", opt.val_sequences},
      {"bins", o.bins},
      {"range_au", o.range},
      {"rows", o.rows},
      {"tokens_per_sequence", 1 + 2 * (o.rows - 1)},
      {"vocab_size", vocab_size(o)},
      {"dt_tokens", {{"week", dt_token(kDtWeek, o)}, {"half_year", dt_token(kDtHalfYear, o)}}},
      {"dt_years", {kDtWeek, kDtHalfYear}},
      {"planets", {o.min_planets, o.max_planets}},
      {"integrator", "leapfrog (kick-drift-kick) per star-planet pair, step <= eta sqrt(r_p^3/mu)"},
      {"eta", o.eta},
      {"max_substeps", res.max_substeps},
      {"energy_drift", {{"max", res.max_energy_drift}, {"median", res.median_energy_drift}}},
      {"angular_momentum_drift_max", res.max_momentum_drift},
      {"rows_columns", {"sequence", "step", "body", "x", "y", "fx", "fy", "r", "mass", "star_mass"}}};
  const std::string meta_path = (fs::path(opt.out_dir) / "orbits.json").string();
  write_json_file(meta_path, meta);
  res.files.push_back(meta_path);
  return res;
}

}  // namespace gpt::orbits
