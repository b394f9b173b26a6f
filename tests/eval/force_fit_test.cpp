// The power-law fit of a force probe's predictions and the nearest-neighbour
// oracle (eval/force_fit.h): Newton's law recovered exactly from the true
// forces of gpt data orbits' rows; a reference least-squares solution
// written here (normal equations by Cramer's rule on the uncentred design);
// the intervals' coverage over noisy replicates; the oracle; the refusals.
#include "eval/force_fit.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/check.h"
#include "data/orbits.h"
#include "data/rng.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

std::vector<ForceSample> newton_samples(Rng& rng, int n, double noise) {
  std::vector<ForceSample> s;
  for (int i = 0; i < n; ++i) {
    ForceSample f;
    f.r = 0.3 + 30 * rng.uniform();
    f.m1 = std::exp(std::log(1e-9) + (std::log(1e-3) - std::log(1e-9)) * rng.uniform());
    f.m2 = 0.1 + 4.9 * rng.uniform();
    f.force = orbits::kG * f.m1 * f.m2 / (f.r * f.r) * std::exp(noise * orbits::sample_normal(rng));
    s.push_back(f);
  }
  return s;
}

// det of a 4×4 matrix by cofactor expansion (the reference's Cramer's rule).
double det4(const double m[4][4]) {
  auto det3 = [](double a, double b, double c, double d, double e, double f, double g, double h, double i) {
    return a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g);
  };
  double d = 0;
  for (int c = 0; c < 4; ++c) {
    double sub[9];
    int k = 0;
    for (int r = 1; r < 4; ++r)
      for (int cc = 0; cc < 4; ++cc)
        if (cc != c) sub[k++] = m[r][cc];
    d += (c % 2 ? -1 : 1) * m[0][c] * det3(sub[0], sub[1], sub[2], sub[3], sub[4], sub[5], sub[6], sub[7], sub[8]);
  }
  return d;
}

TEST(ForceFit, TrueForcesOfTheOrbitsGiveNewtonsLaw) {
  const fs::path dir = fs::temp_directory_path() / ("gpt_force_fit_" + std::to_string(::getpid()));
  orbits::DataOptions d;
  d.out_dir = dir.string();
  d.train_sequences = 20;
  d.val_sequences = 1;
  d.orbit.rows = 60;
  orbits::write_orbit_data(d);
  const std::vector<ForceSample> s = read_planet_forces((dir / "orbits_train_000001.rows").string());
  fs::remove_all(dir);
  ASSERT_GT(s.size(), 100u);
  const PowerLawFit f = fit_power_law(s);
  std::printf("[force fit] %d planet rows: ln C %.6f (ln G %.6f), a %.6f, b %.6f, c %.6f\n", f.n, f.coef[0],
              std::log(orbits::kG), f.coef[1], f.coef[2], f.coef[3]);
  EXPECT_NEAR(f.coef[0], std::log(orbits::kG), 1e-6);
  EXPECT_NEAR(f.coef[1], 1.0, 1e-7);
  EXPECT_NEAR(f.coef[2], 1.0, 1e-7);
  EXPECT_NEAR(f.coef[3], -2.0, 1e-7);
  EXPECT_LT(f.rmse_log, 1e-7);
}

// Least squares from its definition: the normal equations XᵀX β = Xᵀy of the
// uncentred design, solved by Cramer's rule, against the fit.
TEST(ForceFit, MatchesNormalEquationsSolvedByCramersRule) {
  Rng rng(4);
  const std::vector<ForceSample> s = newton_samples(rng, 300, 0.3);
  double A[4][4] = {}, b[4] = {};
  for (const auto& f : s) {
    const double x[4] = {1.0, std::log(f.m1), std::log(f.m2), std::log(f.r)};
    for (int i = 0; i < 4; ++i) {
      b[i] += x[i] * std::log(f.force);
      for (int j = 0; j < 4; ++j) A[i][j] += x[i] * x[j];
    }
  }
  const double D = det4(A);
  const PowerLawFit fit = fit_power_law(s);
  for (int c = 0; c < 4; ++c) {
    double Ac[4][4];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) Ac[i][j] = j == c ? b[i] : A[i][j];
    EXPECT_NEAR(fit.coef[c], det4(Ac) / D, 1e-6 * (1 + std::fabs(fit.coef[c]))) << "coefficient " << c;
  }
}

// With log-normal noise of sd 0.2 the 95% intervals hold the true exponents
// in about 95% of 400 replicates of 60 samples (each exponent: between 90%
// and 99%, a band about 4 binomial standard errors wide).
TEST(ForceFit, IntervalsCoverTheTruthAtTheirLevel) {
  Rng rng(8);
  int cover[4] = {0, 0, 0, 0};
  const double truth[4] = {std::log(orbits::kG), 1.0, 1.0, -2.0};
  const int reps = 400;
  for (int r = 0; r < reps; ++r) {
    const PowerLawFit f = fit_power_law(newton_samples(rng, 60, 0.2));
    for (int j = 0; j < 4; ++j) cover[j] += f.lo[j] <= truth[j] && truth[j] <= f.hi[j];
  }
  for (int j = 0; j < 4; ++j) {
    std::printf("[force fit] coverage of coefficient %d: %.3f\n", j, cover[j] / double(reps));
    EXPECT_GT(cover[j], 0.90 * reps);
    EXPECT_LT(cover[j], 0.99 * reps);
  }
}

TEST(ForceFit, NearestNeighboursAndRefusals) {
  Rng rng(2);
  const std::vector<ForceSample> train = newton_samples(rng, 2000, 0.0);
  // A training point is its own nearest neighbour.
  const std::vector<double> own = nearest_neighbour_forces(train, {train[5]}, 1);
  EXPECT_EQ(own[0], train[5].force);
  // k = 3 averages the three closest in log space (here: near the query).
  const std::vector<ForceSample> q = newton_samples(rng, 50, 0.0);
  const std::vector<double> p = nearest_neighbour_forces(train, q, 3);
  double worst = 0;
  for (size_t i = 0; i < q.size(); ++i) worst = std::max(worst, std::fabs(std::log(p[i] / q[i].force)));
  EXPECT_LT(worst, 1.0) << "dense samples of a smooth law: within a factor e";
  EXPECT_THROW(nearest_neighbour_forces(train, q, 0), Error);
  std::vector<ForceSample> flat = train;
  for (auto& f : flat) f.m2 = 1.0;
  try {
    fit_power_law(flat);
    ADD_FAILURE() << "a constant star mass must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("m2 does not vary"), std::string::npos) << e.what();
  }
  flat[3].force = 0;
  EXPECT_THROW(fit_power_law(flat), Error);
  EXPECT_THROW(fit_power_law({}), Error);
}

}  // namespace
}  // namespace gpt
