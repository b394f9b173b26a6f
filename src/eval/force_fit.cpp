#include "eval/force_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "core/check.h"
#include "data/orbits.h"
#include "sweep/stats.h"

namespace gpt {

namespace {

// Solves A x = b (4×4, A symmetric positive definite) by Gauss–Jordan with
// partial pivoting; also returns A⁻¹.
bool invert4(const double A[4][4], double inv[4][4]) {
  double m[4][8];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) m[i][j] = j < 4 ? A[i][j] : (j - 4 == i ? 1.0 : 0.0);
  for (int col = 0; col < 4; ++col) {
    int piv = col;
    for (int r = col + 1; r < 4; ++r)
      if (std::fabs(m[r][col]) > std::fabs(m[piv][col])) piv = r;
    if (std::fabs(m[piv][col]) < 1e-300) return false;
    if (piv != col)
      for (int j = 0; j < 8; ++j) std::swap(m[piv][j], m[col][j]);
    const double d = m[col][col];
    for (int j = 0; j < 8; ++j) m[col][j] /= d;
    for (int r = 0; r < 4; ++r)
      if (r != col) {
        const double f = m[r][col];
        for (int j = 0; j < 8; ++j) m[r][j] -= f * m[col][j];
      }
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) inv[i][j] = m[i][j + 4];
  return true;
}

}  // namespace

PowerLawFit fit_power_law(const std::vector<ForceSample>& samples) {
  const int n = static_cast<int>(samples.size());
  GPT_CHECK(n >= 5, "force fit: needs at least 5 samples, got ", n);
  std::vector<std::array<double, 4>> x(n);
  std::vector<double> y(n);
  for (int i = 0; i < n; ++i) {
    const ForceSample& s = samples[i];
    GPT_CHECK(s.r > 0 && s.m1 > 0 && s.m2 > 0 && s.force > 0, "force fit: sample ", i, " has a non-positive value (r ",
              s.r, ", m1 ", s.m1, ", m2 ", s.m2, ", F ", s.force, "): the law is fitted in log space");
    x[i] = {1.0, std::log(s.m1), std::log(s.m2), std::log(s.r)};
    y[i] = std::log(s.force);
  }
  // Centre the regressors (better conditioning), fit, then restore ln C.
  double mean[4] = {0, 0, 0, 0}, ymean = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 1; j < 4; ++j) mean[j] += x[i][j] / n;
    ymean += y[i] / n;
  }
  const char* names[4] = {"", "m1", "m2", "r"};
  for (int j = 1; j < 4; ++j) {
    double var = 0;
    for (int i = 0; i < n; ++i) var += (x[i][j] - mean[j]) * (x[i][j] - mean[j]);
    GPT_CHECK(var > 1e-12 * n, "force fit: ", names[j],
              " does not vary over the samples; its exponent cannot be fitted");
  }
  double xtx[4][4] = {}, xty[4] = {};
  for (int i = 0; i < n; ++i) {
    const double v[4] = {1.0, x[i][1] - mean[1], x[i][2] - mean[2], x[i][3] - mean[3]};
    for (int a = 0; a < 4; ++a) {
      xty[a] += v[a] * (y[i] - ymean);
      for (int b = 0; b < 4; ++b) xtx[a][b] += v[a] * v[b];
    }
  }
  double inv[4][4];
  GPT_CHECK(invert4(xtx, inv), "force fit: the regressors are collinear (m1, m2 and r must vary independently)");
  double beta[4] = {0, 0, 0, 0};
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) beta[a] += inv[a][b] * xty[b];
  PowerLawFit f;
  f.n = n;
  double rss = 0;
  for (int i = 0; i < n; ++i) {
    const double pred =
        ymean + beta[0] + beta[1] * (x[i][1] - mean[1]) + beta[2] * (x[i][2] - mean[2]) + beta[3] * (x[i][3] - mean[3]);
    rss += (y[i] - pred) * (y[i] - pred);
  }
  const double s2 = rss / (n - 4);
  f.rmse_log = std::sqrt(rss / n);
  for (int j = 1; j < 4; ++j) {
    f.coef[j] = beta[j];
    f.se[j] = std::sqrt(s2 * inv[j][j]);
  }
  // ln C at the centre, moved to the origin: ln C = ȳ + β0 − Σ β_j·mean_j;
  // its variance through the same covariance (Var of a linear combination).
  const double w[4] = {1.0, -mean[1], -mean[2], -mean[3]};
  f.coef[0] = ymean + beta[0] - beta[1] * mean[1] - beta[2] * mean[2] - beta[3] * mean[3];
  double v0 = 0;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) v0 += w[a] * w[b] * inv[a][b];
  f.se[0] = std::sqrt(s2 * v0);
  const double t = stats::t_quantile(0.975, n - 4);
  for (int j = 0; j < 4; ++j) f.lo[j] = f.coef[j] - t * f.se[j], f.hi[j] = f.coef[j] + t * f.se[j];
  return f;
}

std::vector<double> nearest_neighbour_forces(const std::vector<ForceSample>& train,
                                             const std::vector<ForceSample>& queries, int k) {
  GPT_CHECK(k >= 1 && k <= static_cast<int>(train.size()), "force oracle: k must be in [1, ", train.size(), "], got ",
            k);
  auto key = [](const ForceSample& s) { return std::array<double, 3>{std::log(s.r), std::log(s.m1), std::log(s.m2)}; };
  std::vector<std::array<double, 3>> keys(train.size());
  for (size_t i = 0; i < train.size(); ++i) keys[i] = key(train[i]);
  std::vector<double> out;
  std::vector<std::pair<double, size_t>> d(train.size());
  for (const ForceSample& q : queries) {
    const auto kq = key(q);
    for (size_t i = 0; i < train.size(); ++i) {
      double s = 0;
      for (int j = 0; j < 3; ++j) s += (keys[i][j] - kq[j]) * (keys[i][j] - kq[j]);
      d[i] = {s, i};
    }
    std::partial_sort(d.begin(), d.begin() + k, d.end());
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += train[d[j].second].force;
    out.push_back(sum / k);
  }
  return out;
}

void for_each_orbit_record(const std::string& rows_path, const std::function<bool(const OrbitRecord&)>& visit) {
  std::ifstream in(rows_path, std::ios::binary);
  GPT_CHECK(in, "cannot read the rows file ", rows_path);
  char magic[8];
  uint64_t n = 0, cols = 0;
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&n), 8);
  in.read(reinterpret_cast<char*>(&cols), 8);
  GPT_CHECK(in && std::memcmp(magic, "GPTORBT1", 8) == 0 && cols == static_cast<uint64_t>(orbits::kRowColumns),
            rows_path, " is not a rows file of gpt data orbits");
  std::vector<double> rec(cols);
  for (uint64_t i = 0; i < n; ++i) {
    in.read(reinterpret_cast<char*>(rec.data()), static_cast<std::streamsize>(cols * sizeof(double)));
    GPT_CHECK(in, rows_path, " ends before its ", n, " records");
    if (!visit({static_cast<int64_t>(rec[0]), static_cast<int>(rec[1]), static_cast<int>(rec[2]), rec[3], rec[4],
                rec[5], rec[6], rec[7], rec[8], rec[9]}))
      return;
  }
}

std::vector<ForceSample> read_planet_forces(const std::string& rows_path) {
  std::vector<ForceSample> out;
  for_each_orbit_record(rows_path, [&](const OrbitRecord& r) {
    if (r.r != 0) out.push_back({r.r, r.mass, r.star_mass, std::hypot(r.fx, r.fy)});  // not the star's row
    return true;
  });
  return out;
}

}  // namespace gpt
