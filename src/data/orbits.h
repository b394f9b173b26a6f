// Orbital trajectories as token sequences (docs/orbits.md): the data of the
// physics probe of Vafa et al. 2025 ("What Has a Foundation Model Found?",
// ICML; repository keyonvafa/inductive-bias-probes), which the LSSA/LSSAR
// paper (arXiv 2501.13428, v5) reuses. A planetary system (a star and 1 to
// 10 planets, masses, eccentricities and semi-major axes drawn from fits to
// exoplanet catalogues) is simulated in AU, solar masses and years
// (G = 4π²); each planet orbits the star as its own two-body problem, as in
// the source (planets do not attract each other), integrated here by
// leapfrog (kick-drift-kick, symplectic) from a Kepler initial state. The
// positions are sampled every dt (about a week, or half a year), bodies
// listed planet by planet then the star at each time, and every coordinate
// becomes one of `bins` uniform bins over [−range, range] AU: a sequence is
// the dt token, then x and y tokens of each listed position.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpt {

struct Rng;

namespace orbits {

inline constexpr double kPi = 3.14159265358979323846;
inline constexpr double kG = 4.0 * kPi * kPi;  // AU^3 / (M_sun yr^2)
// The source's two sampling intervals in years: 7 and 180 "days" of 0.0027 yr.
inline constexpr double kDtWeek = 7 * 0.0027, kDtHalfYear = 180 * 0.0027;

struct Options {
  int bins = 7000;      // position bins over [−range, range] AU per coordinate
  double range = 50;    // AU
  int rows = 1000;      // rows per sequence: the dt row and rows − 1 positions (the source's 1,000)
  int min_planets = 1;  // planets per system, uniform in [min, max] (the source: 1..10)
  int max_planets = 10;
  double eta = 0.05;         // leapfrog step: at most eta · sqrt(r_p^3 / mu) (the periapsis time scale)
  int max_substeps = 20000;  // per sampling interval and planet (a cap for extreme orbits; reported)
};

// A sampled system: the star, each planet's elements, the sampling interval.
struct Planet {
  double mass = 0, a = 0, e = 0;  // M_sun, AU
  double omega = 0;               // periapsis angle (rad)
  double mean_anomaly = 0;        // at the first sample
};
struct System {
  double star_mass = 0;
  double com_x = 0, com_y = 0;  // the frame's offset (AU)
  double dt = 0;                // years
  std::vector<Planet> planets;
};

// One body at one sampled time: its true position, the gravitational force
// on it (M_sun AU / yr^2), its distance to the star and the two masses.
struct Row {
  int step = 0, body = 0;  // body: planet index, or the number of planets for the star
  double x = 0, y = 0, fx = 0, fy = 0, r = 0, mass = 0, star_mass = 0;
};

struct Sequence {
  System system;
  std::vector<Row> rows;        // rows − 1 positions
  std::vector<int32_t> tokens;  // 1 + 2·(rows − 1)
  double energy_drift = 0;      // max |ΔE/E| of any planet's two-body energy over the sequence
  double momentum_drift = 0;    // max |ΔL/L| likewise
  int max_substeps = 0;         // the largest leapfrog substep count used
};

// Distributions (fits of the source to its exoplanet table, as its code
// uses them): star mass lognormal (s 0.20045, loc −0.67936, scale 1.62715)
// clipped to [0.1, 5]; planet mass gamma (shape 0.32020, loc 6.0098e-8,
// scale 1.10559e-3) clipped to [1e-9, 1e-3]; eccentricity Beta(0.867, 3.03);
// semi-major axis uniform on [0.3, 32] AU; periapsis angle and mean anomaly
// uniform; frame offset N(0, 1) per axis; dt a week or half a year, even odds.
System sample_system(Rng& rng, const Options& opt);
double sample_gamma(Rng& rng, double shape);  // Marsaglia and Tsang, scale 1
double sample_beta(Rng& rng, double a, double b);
double sample_normal(Rng& rng);

// The Kepler relative state (planet minus star) at mean anomaly M for
// elements a, e, periapsis angle omega and mu = G (M + m): position and
// velocity. E − e sin E = M solved by Newton's method.
void kepler_state(double a, double e, double omega, double M, double mu, double* r, double* v);
// n kick-drift-kick steps of h on r'' = −mu r / |r|^3.
void leapfrog(double* r, double* v, double mu, double h, int n);
// The substeps of one sampling interval dt for a planet (at least 1).
int substeps(const Planet& p, double mu, double dt, const Options& opt);

// Positions to tokens and back: bin of v (clipped to the range), and the
// bin's centre.
int32_t bin_of(double v, const Options& opt);
double bin_centre(int32_t bin, const Options& opt);
// The dt tokens (after the bins) and the vocabulary.
inline int32_t dt_token(double dt, const Options& opt) { return opt.bins + (dt == kDtWeek ? 0 : 1); }
inline int vocab_size(const Options& opt) { return opt.bins + 2; }

// Sequence i of a stream: deterministic in (seed, stream, i).
Sequence simulate(const System& s, const Options& opt);
Sequence make_sequence(uint64_t seed, uint64_t stream, uint64_t i, const Options& opt);

struct DataOptions {
  std::string out_dir, name = "orbits";
  int64_t train_sequences = 0, val_sequences = 0;
  uint64_t seed = 1;
  Options orbit;
};
struct DataResult {
  std::vector<std::string> files;
  uint64_t train_tokens = 0, val_tokens = 0;
  double max_energy_drift = 0, median_energy_drift = 0, max_momentum_drift = 0;
  int max_substeps = 0;
};
// NAME_train_000001.bin, NAME_val_000000.bin (uint16 token shards), their
// rows beside them (NAME_*.rows: per listed position, float64: sequence,
// step, body, x, y, fx, fy, r, mass, star mass) and orbits.json (the options,
// the vocabulary, the integrator and its drift over the data).
DataResult write_orbit_data(const DataOptions& opt);
// The rows file's layout.
inline constexpr int kRowColumns = 10;

}  // namespace orbits
}  // namespace gpt
