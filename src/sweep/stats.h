// Statistics of a sweep's seeds: the mean with a Student-t confidence
// interval, and the paired t-test of one variant against a baseline over the
// seeds they share. Written from the textbook definitions (the t density's
// CDF through the regularised incomplete beta function, evaluated by its
// continued fraction); tests/sweep/stats_test.cpp checks them against
// published quantiles and a numerical integration of the density.
#pragma once
#include <vector>

namespace gpt::stats {

// P(T <= t) for Student's t with `df` > 0 degrees of freedom.
double t_cdf(double t, double df);
// The q-quantile (0 < q < 1) of Student's t with `df` degrees of freedom.
double t_quantile(double q, double df);

// Mean, sample sd (n - 1) and a two-sided `level` confidence interval of the
// mean (mean ± t_{(1+level)/2, n-1} · sd / √n). Non-finite values are left
// out; with fewer than 2 values sd and the interval are NaN.
struct MeanInterval {
  int n = 0;
  double mean = 0, sd = 0, lo = 0, hi = 0;
};
MeanInterval mean_interval(const std::vector<double>& xs, double level = 0.95);

// The paired t-test of a against b (a[i] and b[i] from the same seed):
// d = a - b, its mean and `level` interval, t = mean / (sd / √n) with n - 1
// degrees of freedom, and the two-sided p-value. With n < 2 sd, the interval,
// t and p are NaN (no test is possible); with every difference equal
// (sd = 0) the interval is that difference and p is 0 (1 if it is 0), the
// limits of the test as the spread vanishes.
struct PairedTest {
  int n = 0;
  double mean = 0, sd = 0, lo = 0, hi = 0, t = 0, p = 0;
  // The interval contains 0: the difference is inside the seed noise.
  bool distinguishable() const { return n >= 2 && lo == lo && (lo > 0 || hi < 0); }
};
PairedTest paired_t(const std::vector<double>& a, const std::vector<double>& b, double level = 0.95);

// The paired bootstrap of a against b over shared units (the validation
// windows of one seed, a[k] and b[k] from window k): d = a - b; `resamples`
// times, n windows are drawn with replacement (index = rng() % n, rng =
// std::mt19937_64 seeded with `seed`) and their mean difference kept. The
// interval is the percentile interval of those means (the floor((1-level)/2
// · R)-th and the R-1-floor(...)-th of them sorted); p is twice the smaller
// share of means <= 0 and >= 0, at most 1 and at least 1/R. mean is the
// observed mean difference, sd the sample sd of d; t is NaN. With n < 2 the
// interval and p are NaN.
struct BootstrapOptions {
  int resamples = 10000;
  unsigned long long seed = 20261202;
};
PairedTest paired_bootstrap(const std::vector<double>& a, const std::vector<double>& b, double level = 0.95,
                            const BootstrapOptions& opt = {});

}  // namespace gpt::stats
