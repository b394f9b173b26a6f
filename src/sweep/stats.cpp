#include "sweep/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/check.h"

namespace gpt::stats {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The continued fraction of the incomplete beta function (its even and odd
// terms d_2m = m(b−m)x / ((a+2m−1)(a+2m)), d_2m+1 = −(a+m)(a+b+m)x /
// ((a+2m)(a+2m+1))), evaluated by the modified Lentz method.
double beta_continued_fraction(double a, double b, double x) {
  constexpr double tiny = 1e-300, eps = 1e-15;
  auto guard = [](double v) { return std::fabs(v) < tiny ? tiny : v; };
  double c = 1, d = 1 / guard(1 - (a + b) * x / (a + 1)), h = d;
  for (int m = 1; m <= 10000; ++m) {
    const double even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
    d = 1 / guard(1 + even * d);
    c = guard(1 + even / c);
    h *= d * c;
    const double odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
    d = 1 / guard(1 + odd * d);
    c = guard(1 + odd / c);
    const double step = d * c;
    h *= step;
    if (std::fabs(step - 1) < eps) return h;
  }
  return h;  // 10000 terms: far past convergence for the df a sweep has
}

// I_x(a, b), the regularised incomplete beta function; y = 1 − x is passed
// as computed by the caller (exactly, where x is near 1 and 1 − x would
// round away).
double incomplete_beta(double a, double b, double x, double y) {
  if (x <= 0) return 0;
  if (y <= 0) return 1;
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log(y));
  // The fraction converges fast for x < (a+1)/(a+b+2); the symmetry
  // I_x(a, b) = 1 − I_{1−x}(b, a) covers the rest.
  if (x < (a + 1) / (a + b + 2)) return front * beta_continued_fraction(a, b, x) / a;
  return 1 - front * beta_continued_fraction(b, a, y) / b;
}

}  // namespace

double t_cdf(double t, double df) {
  GPT_CHECK(df > 0, "t_cdf: degrees of freedom ", df, " must be > 0");
  if (std::isnan(t)) return kNaN;
  if (std::isinf(t)) return t > 0 ? 1 : 0;
  // P(|T| > |t|) = I_{df/(df+t²)}(df/2, 1/2).
  const double tail = incomplete_beta(df / 2, 0.5, df / (df + t * t), t * t / (df + t * t));
  return t > 0 ? 1 - tail / 2 : tail / 2;
}

double t_quantile(double q, double df) {
  GPT_CHECK(q > 0 && q < 1, "t_quantile: q = ", q, " must lie in (0, 1)");
  GPT_CHECK(df > 0, "t_quantile: degrees of freedom ", df, " must be > 0");
  double lo = -1, hi = 1;
  while (t_cdf(lo, df) > q) lo *= 2;
  while (t_cdf(hi, df) < q) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-13 * std::fmax(1, std::fabs(lo)); ++i) {
    const double mid = 0.5 * (lo + hi);
    (t_cdf(mid, df) < q ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

MeanInterval mean_interval(const std::vector<double>& xs, double level) {
  GPT_CHECK(level > 0 && level < 1, "mean_interval: level ", level, " must lie in (0, 1)");
  MeanInterval r;
  double sum = 0;
  for (double x : xs)
    if (std::isfinite(x)) sum += x, ++r.n;
  if (r.n == 0) {
    r.mean = r.sd = r.lo = r.hi = kNaN;
    return r;
  }
  r.mean = sum / r.n;
  if (r.n < 2) {
    r.sd = r.lo = r.hi = kNaN;
    return r;
  }
  double ss = 0;
  for (double x : xs)
    if (std::isfinite(x)) ss += (x - r.mean) * (x - r.mean);
  r.sd = std::sqrt(ss / (r.n - 1));
  const double half = t_quantile(0.5 + level / 2, r.n - 1) * r.sd / std::sqrt(static_cast<double>(r.n));
  r.lo = r.mean - half;
  r.hi = r.mean + half;
  return r;
}

PairedTest paired_t(const std::vector<double>& a, const std::vector<double>& b, double level) {
  GPT_CHECK(a.size() == b.size(), "paired_t: ", a.size(), " values against ", b.size(), "; pairs must match");
  std::vector<double> d;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::isfinite(a[i]) && std::isfinite(b[i])) d.push_back(a[i] - b[i]);
  const MeanInterval m = mean_interval(d, level);
  PairedTest r;
  r.n = m.n, r.mean = m.mean, r.sd = m.sd, r.lo = m.lo, r.hi = m.hi;
  if (r.n < 2) {
    r.t = r.p = kNaN;
    return r;
  }
  if (r.sd == 0) {
    r.t = r.mean == 0 ? 0 : std::copysign(std::numeric_limits<double>::infinity(), r.mean);
    r.p = r.mean == 0 ? 1 : 0;
    return r;
  }
  r.t = r.mean / (r.sd / std::sqrt(static_cast<double>(r.n)));
  r.p = 2 * t_cdf(-std::fabs(r.t), r.n - 1);
  return r;
}

PairedTest paired_bootstrap(const std::vector<double>& a, const std::vector<double>& b, double level,
                            const BootstrapOptions& opt) {
  GPT_CHECK(a.size() == b.size(), "paired_bootstrap: ", a.size(), " values against ", b.size(), "; pairs must match");
  GPT_CHECK(opt.resamples >= 1, "paired_bootstrap: resamples must be >= 1");
  std::vector<double> d;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::isfinite(a[i]) && std::isfinite(b[i])) d.push_back(a[i] - b[i]);
  const MeanInterval m = mean_interval(d, level);
  PairedTest r;
  r.n = m.n, r.mean = m.mean, r.sd = m.sd, r.t = kNaN;
  if (r.n < 2) {
    r.lo = r.hi = r.p = kNaN;
    return r;
  }
  std::mt19937_64 rng(opt.seed);
  const size_t n = d.size();
  std::vector<double> means(static_cast<size_t>(opt.resamples));
  int le = 0, ge = 0;
  for (auto& x : means) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += d[rng() % n];
    x = s / static_cast<double>(n);
    le += x <= 0, ge += x >= 0;
  }
  std::sort(means.begin(), means.end());
  const size_t cut = static_cast<size_t>(std::floor((1 - level) / 2 * opt.resamples));
  r.lo = means[cut];
  r.hi = means[means.size() - 1 - cut];
  r.p = std::clamp(2.0 * std::min(le, ge) / opt.resamples, 1.0 / opt.resamples, 1.0);
  return r;
}

}  // namespace gpt::stats
