// The law a force probe has learned (docs/orbits.md, "Fitting the law"):
// predicted force magnitudes F at separations r and masses m1 (the planet)
// and m2 (the star) fitted by least squares in log space,
//   ln F = ln C + a·ln m1 + b·ln m2 + c·ln r,
// with standard errors and 95% intervals (Student's t, n − 4 degrees of
// freedom), Newton's law being a = b = 1, c = −2, C = G. And the source's
// baseline oracle: the mean force of the k nearest training samples in
// (ln r, ln m1, ln m2). The rows files of gpt data orbits give the true
// forces (data/orbits.h).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gpt {

struct ForceSample {
  double r = 0, m1 = 0, m2 = 0, force = 0;
};

struct PowerLawFit {
  int n = 0;
  double coef[4] = {0, 0, 0, 0};  // ln C, a, b, c
  double se[4] = {0, 0, 0, 0};
  double lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};  // 95% intervals
  double rmse_log = 0;                                // residual sd of ln F
};

// Throws gpt::Error when fewer than 5 samples, a non-positive value, or a
// variable that does not vary (its exponent cannot be told apart from C).
PowerLawFit fit_power_law(const std::vector<ForceSample>& samples);

// For each query, the mean force of its k nearest samples in (ln r, ln m1,
// ln m2) (Euclidean; ties by index).
std::vector<double> nearest_neighbour_forces(const std::vector<ForceSample>& train,
                                             const std::vector<ForceSample>& queries, int k);

// One record of a rows file (gpt data orbits): a body at a sampled time.
struct OrbitRecord {
  int64_t sequence = 0;
  int step = 0, body = 0;  // body: a planet's index, or the planet count for the star
  double x = 0, y = 0, fx = 0, fy = 0, r = 0, mass = 0, star_mass = 0;
};
// Streams the records of a rows file to visit in file order (a sequence's
// listed positions in token order) until visit returns false; the file is
// read one record at a time (a rows file of 10M tokens is 400 MB).
void for_each_orbit_record(const std::string& rows_path, const std::function<bool(const OrbitRecord&)>& visit);

// The planets' rows of a rows file (gpt data orbits): their true force
// magnitudes, separations and masses.
std::vector<ForceSample> read_planet_forces(const std::string& rows_path);

}  // namespace gpt
