#include "data/synthetic.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "core/check.h"
#include "core/files.h"
#include "core/json.h"
#include "core/tokens.h"
#include "data/rng.h"
#include "data/shard.h"

namespace gpt {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace synth;

uint64_t synthetic_seed(uint64_t seed, uint64_t stream, uint64_t i) {
  uint64_t h = seed ^ 0xD1B54A32D192ED03ull;
  for (uint64_t x : {stream, i}) {
    h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
  }
  return h;
}

namespace {

// `count` distinct ids from [first, first + n), in random order.
std::vector<int32_t> distinct(Rng& rng, int count, int32_t first, int n) {
  std::vector<int32_t> pool(n);
  std::iota(pool.begin(), pool.end(), first);
  for (int i = 0; i < count; ++i) std::swap(pool[i], pool[i + rng.below(n - i)]);
  pool.resize(count);
  return pool;
}

std::vector<int32_t> uniform_ids(Rng& rng, int count, int32_t first, int n) {
  std::vector<int32_t> v(count);
  for (auto& x : v) x = first + static_cast<int32_t>(rng.below(n));
  return v;
}

double draw_depth(double depth, Rng& rng) { return depth < 0 ? rng.uniform() : depth; }

// Where a needle goes among n haystack tokens at that depth.
int depth_slot(double depth, int n) { return static_cast<int>(std::lround(depth * n)); }

void append(std::vector<int32_t>& out, const std::vector<int32_t>& v) { out.insert(out.end(), v.begin(), v.end()); }

const std::vector<SyntheticOption> kHaystackOptions = {
    {"haystack", "random", 0, 0, {}, "haystack: random noise symbols, or DIR of token shards (gpt data text)", true},
    {"haystack_vocab", 257, 1, 1 << 24, {}, "with a text haystack: the shards' vocabulary; task ids start above it"},
};

std::vector<SyntheticOption> with_haystack(std::vector<SyntheticOption> v) {
  v.insert(v.end(), kHaystackOptions.begin(), kHaystackOptions.end());
  return v;
}

constexpr int64_t kBig = 1 << 20;

const std::map<std::string, std::vector<SyntheticOption>>& option_table() {
  static const std::map<std::string, std::vector<SyntheticOption>> t = {
      {"mqar",
       {{"pairs", 8, 1, kBig, {}, "key-value pairs per example"},
        {"keys", 64, 1, 60000, {}, "key vocabulary (distinct keys in an example, so >= pairs)"},
        {"values", 64, 1, 60000, {}, "value vocabulary"},
        {"queries", 0, 0, kBig, {}, "keys asked per example (0 = every pair)"},
        {"scale", "gap", 0, 0, {"gap", "pairs"}, "what grows at m x the context: the gap, or pairs and queries"}}},
      {"copy",
       {{"min_length", 4, 1, kBig, {}, "shortest string copied"},
        {"max_length", 16, 1, kBig, {}, "longest string copied"},
        {"alphabet", 32, 2, 60000, {}, "symbols of the strings"},
        {"scale", "length", 0, 0, {"length", "gap"}, "what grows at m x the context: the string, or the gap"}}},
      {"induction", {{"alphabet", 64, 2, 60000, {}, "symbols of the repeated string"}}},
      {"passkey", with_haystack({{"digits", 5, 1, 32, {}, "digits of the key"},
                                 {"noise", 16, 1, 60000, {}, "noise symbols of a random haystack"}})},
      {"niah_multikey", with_haystack({{"needles", 4, 2, 4096, {}, "needles per example (one asked)"},
                                       {"names", 16, 2, 60000, {}, "needle names (distinct, so >= needles)"},
                                       {"digits", 5, 1, 32, {}, "digits of each needle's value"},
                                       {"noise", 16, 1, 60000, {}, "noise symbols of a random haystack"},
                                       {"query", "name", 0, 0, {"name", "alias"},
                                        "how the question names its needle: by the needle's own name token, or "
                                        "by the name's alias, a second token per name that never appears in a "
                                        "needle (no literal overlap, as NoLiMa asks)"}})},
      {"variable_tracking",
       with_haystack({{"chains", 2, 1, 256, {}, "chains per example (one asked)"},
                      {"hops", 4, 1, 256, {}, "assignments after a chain's first (hops + 1 names)"},
                      {"names", 32, 2, 60000, {}, "variable names (distinct, so >= chains x (hops + 1))"},
                      {"digits", 5, 1, 32, {}, "digits of each chain's value"},
                      {"noise", 16, 1, 60000, {}, "noise symbols of a random haystack"}})},
  };
  return t;
}

std::string option_list(const std::vector<SyntheticOption>& defs) {
  std::string s;
  for (const auto& d : defs) {
    std::string flag = d.name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    s += (s.empty() ? "--" : ", --") + flag;
  }
  return s;
}

// The digit run starting at p (digit tokens), as local digit ids.
std::vector<int32_t> digit_run(const std::vector<int32_t>& t, size_t p, int base) {
  std::vector<int32_t> d;
  while (p < t.size() && t[p] - base >= kDigit0 && t[p] - base < kDigit0 + 10) d.push_back(t[p++]);
  return d;
}

// The last position holding `token`, or npos.
size_t last_of(const std::vector<int32_t>& t, int32_t token) {
  for (size_t i = t.size(); i-- > 0;)
    if (t[i] == token) return i;
  return std::string::npos;
}

// ---------------------------------------------------------------- mqar

class Mqar final : public SyntheticTask {
 public:
  explicit Mqar(json o) : SyntheticTask("mqar", std::move(o)) {
    GPT_CHECK(opt("queries") <= opt("pairs"), "synthetic mqar: --queries ", opt("queries"), " exceeds --pairs ",
              opt("pairs"), " (each query asks a distinct key)");
    GPT_CHECK(opt("keys") >= opt("pairs"), "synthetic mqar: --keys ", opt("keys"), " is below --pairs ", opt("pairs"),
              " (the keys of an example are distinct)");
  }
  int min_length(int m) const override {
    const auto [p, q] = counts(m);
    return static_cast<int>(1 + 2 * p + 2 * q);
  }
  std::vector<SyntheticAnswer> answers(const std::vector<int32_t>& t) const override {
    // A key seen before: the token after its first occurrence is the answer.
    std::vector<SyntheticAnswer> a;
    std::map<int32_t, size_t> first;
    for (size_t p = 0; p + 1 < t.size(); ++p) {
      const int32_t l = local(t[p]);
      if (l < kFirstSymbol || l >= kFirstSymbol + opt("keys")) continue;
      auto [it, fresh] = first.emplace(t[p], p);
      if (!fresh) a.push_back({static_cast<int>(p + 1), t[it->second + 1]});
    }
    return a;
  }

 private:
  std::pair<int64_t, int64_t> counts(int m) const {
    const int64_t k = word("scale") == "pairs" ? m : 1;
    const int64_t p = opt("pairs") * k;
    return {p, (opt("queries") == 0 ? opt("pairs") : opt("queries")) * k};
  }
  int local_vocab() const override { return static_cast<int>(kFirstSymbol + opt("keys") + opt("values")); }
  void build(SyntheticExample& ex, int length, int m, double, SyntheticSplit, Rng& rng) const override {
    const auto [p, q] = counts(m);
    GPT_CHECK(p <= opt("keys"), "synthetic mqar at ", m, "x the context has ", p,
              " pairs (--scale pairs) but --keys is ", opt("keys"),
              ": the keys must number at least pairs x the largest multiple");
    const std::vector<int32_t> keys =
        distinct(rng, static_cast<int>(p), id(kFirstSymbol), static_cast<int>(opt("keys")));
    const std::vector<int32_t> vals =
        uniform_ids(rng, static_cast<int>(p), id(kFirstSymbol + static_cast<int32_t>(opt("keys"))),
                    static_cast<int>(opt("values")));
    const std::vector<int32_t> asked = distinct(rng, static_cast<int>(q), 0, static_cast<int>(p));
    auto& t = ex.tokens;
    for (int64_t i = 0; i < p; ++i) t.insert(t.end(), {keys[i], vals[i]});
    t.resize(length - 2 * q, id(kPad));
    for (int32_t i : asked) t.insert(t.end(), {keys[i], vals[i]});
    for (int64_t i = 0; i < q; ++i) ex.scored[length - 2 * q + 2 * i + 1] = 1;
  }
};

// ---------------------------------------------------------------- copy

class Copy final : public SyntheticTask {
 public:
  explicit Copy(json o) : SyntheticTask("copy", std::move(o)) {
    GPT_CHECK(opt("min_length") <= opt("max_length"), "synthetic copy: --min-length ", opt("min_length"),
              " exceeds --max-length ", opt("max_length"));
  }
  int min_length(int m) const override { return static_cast<int>(2 + 2 * opt("max_length") * grow(m)); }
  std::vector<SyntheticAnswer> answers(const std::vector<int32_t>& t) const override {
    // The string is the alphabet symbols before the separator.
    const auto sep = std::find(t.begin(), t.end(), id(kSep));
    std::vector<int32_t> s;
    for (auto it = t.begin(); it != sep; ++it)
      if (is_symbol(*it)) s.push_back(*it);
    std::vector<SyntheticAnswer> a;
    const size_t q = static_cast<size_t>(sep - t.begin());
    for (size_t i = 0; i < s.size() && q + 1 + i < t.size(); ++i) a.push_back({static_cast<int>(q + 1 + i), s[i]});
    return a;
  }

 private:
  int64_t grow(int m) const { return word("scale") == "length" ? m : 1; }
  bool is_symbol(int32_t x) const { return local(x) >= kFirstSymbol && local(x) < kFirstSymbol + opt("alphabet"); }
  int local_vocab() const override { return static_cast<int>(kFirstSymbol + opt("alphabet")); }
  void build(SyntheticExample& ex, int length, int m, double, SyntheticSplit, Rng& rng) const override {
    const int64_t lo = opt("min_length") * grow(m), hi = opt("max_length") * grow(m);
    const int n = static_cast<int>(lo + static_cast<int64_t>(rng.below(hi - lo + 1)));
    const std::vector<int32_t> s = uniform_ids(rng, n, id(kFirstSymbol), static_cast<int>(opt("alphabet")));
    auto& t = ex.tokens;
    const int gap = length - 2 - 2 * n;
    if (word("scale") == "length") t.resize(1 + gap, id(kPad));
    append(t, s);
    if (word("scale") == "gap") t.resize(1 + n + gap, id(kPad));
    t.push_back(id(kSep));
    append(t, s);
    std::fill(ex.scored.end() - n, ex.scored.end(), 1);
  }
};

// ---------------------------------------------------------------- induction

class Induction final : public SyntheticTask {
 public:
  explicit Induction(json o) : SyntheticTask("induction", std::move(o)) {}
  int min_length(int) const override { return 5; }
  std::vector<SyntheticAnswer> answers(const std::vector<int32_t>& t) const override {
    // Positions 1..2n hold the string and its repeat; each repeat token after
    // the first is the token n positions back.
    size_t c = 0;
    while (1 + c < t.size() && local(t[1 + c]) >= kFirstSymbol) ++c;
    const size_t n = c / 2;
    std::vector<SyntheticAnswer> a;
    for (size_t i = 1; i < n; ++i) a.push_back({static_cast<int>(1 + n + i), t[1 + i]});
    return a;
  }

 private:
  int local_vocab() const override { return static_cast<int>(kFirstSymbol + opt("alphabet")); }
  void build(SyntheticExample& ex, int length, int, double, SyntheticSplit, Rng& rng) const override {
    const int n = (length - 1) / 2;
    const std::vector<int32_t> h = uniform_ids(rng, n, id(kFirstSymbol), static_cast<int>(opt("alphabet")));
    append(ex.tokens, h);
    append(ex.tokens, h);
    ex.tokens.resize(length, id(kPad));
    std::fill(ex.scored.begin() + 2 + n, ex.scored.begin() + 1 + 2 * n, 1);
  }
};

// ---------------------------------------------------------------- passkey

class Passkey final : public SyntheticTask {
 public:
  explicit Passkey(json o) : SyntheticTask("passkey", std::move(o)) { open_haystack(); }
  bool has_depth() const override { return true; }
  int min_length(int) const override { return static_cast<int>(4 + 2 * opt("digits")); }
  std::vector<SyntheticAnswer> answers(const std::vector<int32_t>& t) const override {
    const size_t key = std::find(t.begin(), t.end(), id(kKey)) - t.begin();
    const size_t q = last_of(t, id(kQuery));
    std::vector<SyntheticAnswer> a;
    if (key >= t.size() || q == std::string::npos) return a;
    const std::vector<int32_t> d = digit_run(t, key + 1, base_);
    for (size_t i = 0; i < d.size() && q + 1 + i < t.size(); ++i) a.push_back({static_cast<int>(q + 1 + i), d[i]});
    return a;
  }

 private:
  int local_vocab() const override { return static_cast<int>(kFirstSymbol + (hay_train_ ? 0 : opt("noise"))); }
  void build(SyntheticExample& ex, int length, int, double depth, SyntheticSplit split, Rng& rng) const override {
    const int k = static_cast<int>(opt("digits"));
    const int h = length - 3 - 2 * k;
    std::vector<int32_t> hay;
    haystack(hay, h, id(kFirstSymbol), split, rng);
    const std::vector<int32_t> key = uniform_ids(rng, k, id(kDigit0), 10);
    const int at = depth_slot(draw_depth(depth, rng), h);
    auto& t = ex.tokens;
    t.insert(t.end(), hay.begin(), hay.begin() + at);
    t.push_back(id(kKey));
    append(t, key);
    t.insert(t.end(), hay.begin() + at, hay.end());
    t.push_back(id(kQuery));
    append(t, key);
    std::fill(ex.scored.end() - k, ex.scored.end(), 1);
  }
};

// ---------------------------------------------------------------- niah_multikey

class NiahMultikey final : public SyntheticTask {
 public:
  explicit NiahMultikey(json o) : SyntheticTask("niah_multikey", std::move(o)) {
    GPT_CHECK(opt("names") >= opt("needles"), "synthetic niah_multikey: --names ", opt("names"), " is below --needles ",
              opt("needles"), " (the needles' names are distinct)");
    open_haystack();
  }
  bool has_depth() const override { return true; }
  int min_length(int) const override {
    return static_cast<int>(1 + opt("needles") * (2 + opt("digits")) + 2 + opt("digits") + 1);
  }
  std::vector<SyntheticAnswer> answers(const std::vector<int32_t>& t) const override {
    std::vector<SyntheticAnswer> a;
    const size_t q = last_of(t, id(kQuery));
    if (q == std::string::npos || q + 1 >= t.size()) return a;
    // The asked name: the token after the query, or the name its alias stands for.
    const int32_t name = alias() ? t[q + 1] - static_cast<int32_t>(opt("names")) : t[q + 1];
    for (size_t p = 0; p + 1 < q; ++p)
      if (t[p] == id(kKey) && t[p + 1] == name) {
        const std::vector<int32_t> d = digit_run(t, p + 2, base_);
        for (size_t i = 0; i < d.size() && q + 2 + i < t.size(); ++i) a.push_back({static_cast<int>(q + 2 + i), d[i]});
        break;
      }
    return a;
  }

 private:
  // --query alias: name i (local kFirstSymbol + i) is asked by its alias,
  // local kFirstSymbol + names + i; the noise symbols follow the aliases.
  bool alias() const { return word("query") == "alias"; }
  int32_t name_symbols() const { return static_cast<int32_t>(opt("names") * (alias() ? 2 : 1)); }
  int local_vocab() const override {
    return static_cast<int>(kFirstSymbol + name_symbols() + (hay_train_ ? 0 : opt("noise")));
  }
  void build(SyntheticExample& ex, int length, int, double depth, SyntheticSplit split, Rng& rng) const override {
    const int n = static_cast<int>(opt("needles")), k = static_cast<int>(opt("digits"));
    const int h = length - min_length(1) + 1;
    std::vector<int32_t> hay;
    haystack(hay, h, id(kFirstSymbol + name_symbols()), split, rng);
    const std::vector<int32_t> names = distinct(rng, n, id(kFirstSymbol), static_cast<int>(opt("names")));
    std::vector<std::vector<int32_t>> vals(n);
    std::vector<std::pair<int, int>> slots(n);  // (haystack slot, needle); needle 0 is asked
    for (int i = 0; i < n; ++i) {
      vals[i] = uniform_ids(rng, k, id(kDigit0), 10);
      slots[i] = {i == 0 ? depth_slot(draw_depth(depth, rng), h) : static_cast<int>(rng.below(h + 1)), i};
    }
    std::sort(slots.begin(), slots.end());
    auto& t = ex.tokens;
    int from = 0;
    for (const auto& [at, i] : slots) {
      t.insert(t.end(), hay.begin() + from, hay.begin() + at);
      from = at;
      t.insert(t.end(), {id(kKey), names[i]});
      append(t, vals[i]);
    }
    t.insert(t.end(), hay.begin() + from, hay.end());
    t.insert(t.end(), {id(kQuery), alias() ? names[0] + static_cast<int32_t>(opt("names")) : names[0]});
    append(t, vals[0]);
    std::fill(ex.scored.end() - k, ex.scored.end(), 1);
  }
};

// ---------------------------------------------------------------- variable_tracking

class VariableTracking final : public SyntheticTask {
 public:
  explicit VariableTracking(json o) : SyntheticTask("variable_tracking", std::move(o)) {
    GPT_CHECK(opt("names") >= opt("chains") * (opt("hops") + 1), "synthetic variable_tracking: --names ", opt("names"),
              " is below --chains x (--hops + 1) = ", opt("chains") * (opt("hops") + 1),
              " (every variable of an example has its own name)");
    GPT_CHECK(opt("chains") == 1 || std::pow(10.0, static_cast<double>(opt("digits"))) >= 10.0 * opt("chains"),
              "synthetic variable_tracking: --digits ", opt("digits"), " leave too few values for ", opt("chains"),
              " chains of distinct values");
    open_haystack();
  }
  bool has_depth() const override { return true; }
  int min_length(int) const override {
    const int64_t c = opt("chains"), h = opt("hops"), k = opt("digits");
    return static_cast<int>(1 + c * (k + 3 + 4 * h) + 1 + k + 1 + h + 1 + 1);
  }
  std::vector<SyntheticAnswer> answers(const std::vector<int32_t>& t) const override {
    // Statements before the question: "name = digits" binds the name to the
    // value, "name = name2" to name2's value. The answer lists, in the order
    // of their statements, the names bound to the question's value.
    std::vector<SyntheticAnswer> a;
    const size_t q = last_of(t, id(kQuery));
    if (q == std::string::npos) return a;
    const std::vector<int32_t> asked = digit_run(t, q + 1, base_);
    const size_t eq = q + 1 + asked.size();
    if (asked.empty() || eq >= t.size() || t[eq] != id(kEq)) return a;
    std::map<int32_t, std::vector<int32_t>> value;
    std::vector<int32_t> order;
    for (size_t p = 0; p + 2 < q; ++p) {
      if (!is_name(t[p]) || t[p + 1] != id(kEq)) continue;
      std::vector<int32_t> v = digit_run(t, p + 2, base_);
      if (v.empty() && is_name(t[p + 2]) && value.count(t[p + 2])) v = value[t[p + 2]];
      if (v.empty()) continue;
      value[t[p]] = v;
      if (v == asked) order.push_back(t[p]);
    }
    for (size_t i = 0; i < order.size() && eq + 1 + i < t.size(); ++i)
      a.push_back({static_cast<int>(eq + 1 + i), order[i]});
    return a;
  }

 private:
  bool is_name(int32_t x) const { return local(x) >= kFirstSymbol && local(x) < kFirstSymbol + opt("names"); }
  int local_vocab() const override {
    return static_cast<int>(kFirstSymbol + opt("names") + (hay_train_ ? 0 : opt("noise")));
  }
  void build(SyntheticExample& ex, int length, int, double depth, SyntheticSplit split, Rng& rng) const override {
    const int c = static_cast<int>(opt("chains")), hops = static_cast<int>(opt("hops")),
              k = static_cast<int>(opt("digits"));
    const int h = length - min_length(1) + 1;
    std::vector<int32_t> hay;
    haystack(hay, h, id(kFirstSymbol + static_cast<int32_t>(opt("names"))), split, rng);
    const std::vector<int32_t> names = distinct(rng, c * (hops + 1), id(kFirstSymbol), static_cast<int>(opt("names")));
    std::vector<std::vector<int32_t>> vals;
    while (static_cast<int>(vals.size()) < c) {
      std::vector<int32_t> v = uniform_ids(rng, k, id(kDigit0), 10);
      if (std::find(vals.begin(), vals.end(), v) == vals.end()) vals.push_back(std::move(v));
    }
    // (slot, chain, hop): chain 0 is asked, its first statement at the depth
    // and the rest after it; the other chains anywhere, each in order.
    std::vector<std::tuple<int, int, int>> st;
    for (int ch = 0; ch < c; ++ch) {
      std::vector<int> slots(hops + 1);
      const int lo = ch == 0 ? depth_slot(draw_depth(depth, rng), h) : 0;
      for (int j = 0; j <= hops; ++j) slots[j] = ch == 0 && j == 0 ? lo : lo + static_cast<int>(rng.below(h - lo + 1));
      std::sort(slots.begin() + (ch == 0 ? 1 : 0), slots.end());
      for (int j = 0; j <= hops; ++j) st.emplace_back(slots[j], ch, j);
    }
    std::sort(st.begin(), st.end());
    auto& t = ex.tokens;
    int from = 0;
    for (const auto& [at, ch, j] : st) {
      t.insert(t.end(), hay.begin() + from, hay.begin() + at);
      from = at;
      t.insert(t.end(), {names[ch * (hops + 1) + j], id(kEq)});
      if (j == 0)
        append(t, vals[ch]);
      else
        t.push_back(names[ch * (hops + 1) + j - 1]);
      t.push_back(id(kSep));
    }
    t.insert(t.end(), hay.begin() + from, hay.end());
    t.push_back(id(kQuery));
    append(t, vals[0]);
    t.push_back(id(kEq));
    for (int j = 0; j <= hops; ++j) t.push_back(names[j]);
    std::fill(ex.scored.end() - (hops + 1), ex.scored.end(), 1);
  }
};

}  // namespace

// ---------------------------------------------------------------- the base class

SyntheticTask::SyntheticTask(std::string name, json opts) : name_(std::move(name)), opts_(std::move(opts)) {}

int64_t SyntheticTask::opt(const char* key) const { return opts_.at(key).get<int64_t>(); }
std::string SyntheticTask::word(const char* key) const { return opts_.at(key).get<std::string>(); }

void SyntheticTask::open_haystack() {
  const std::string h = word("haystack");
  if (h == "random") return;
  GPT_CHECK(fs::is_directory(h), "synthetic ", name_, ": --haystack '", h,
            "' is neither \"random\" nor a directory of token shards (gpt data text writes one)");
  const int v = static_cast<int>(opt("haystack_vocab"));
  hay_train_ = std::make_shared<TokenStream>((fs::path(h) / "*_train_*.bin").string(), v);
  hay_val_ = std::make_shared<TokenStream>((fs::path(h) / "*_val_*.bin").string(), v);
  base_ = v;
}

void SyntheticTask::haystack(std::vector<int32_t>& out, int n, int32_t noise_first, SyntheticSplit split,
                             Rng& rng) const {
  out.resize(n);
  if (!hay_train_) {
    out = uniform_ids(rng, n, noise_first, static_cast<int>(opt("noise")));
    return;
  }
  const TokenStream& s = split == SyntheticSplit::kTrain ? *hay_train_ : *hay_val_;
  GPT_CHECK(s.size() >= static_cast<uint64_t>(n), "synthetic ", name_, ": the haystack shards of '", word("haystack"),
            "' hold ", s.size(), " tokens, fewer than the ", n, " a haystack needs");
  if (n > 0) s.read(rng.below(s.size() - n + 1), n, out.data());
}

SyntheticExample SyntheticTask::make(int length, int multiple, double depth, SyntheticSplit split, Rng& rng) const {
  GPT_CHECK(multiple >= 1, "synthetic ", name_, ": multiple ", multiple, " must be >= 1");
  GPT_CHECK(depth <= 1, "synthetic ", name_, ": depth ", depth, " must lie in [0, 1]");
  const int need = min_length(multiple);
  GPT_CHECK(length >= need, "synthetic ", name_, ": an example of ", length, " tokens at ", multiple,
            "x is too short; with options ", opts_.dump(), " it needs at least ", need);
  SyntheticExample ex;
  ex.tokens.reserve(length);
  ex.tokens.push_back(id(kEot));
  ex.scored.assign(length, 0);
  build(ex, length, multiple, depth, split, rng);
  GPT_CHECK(static_cast<int>(ex.tokens.size()) == length, "synthetic ", name_, ": built ", ex.tokens.size(),
            " tokens for an example of ", length, " (a generator bug)");
  return ex;
}

void SyntheticTask::place_above(int text_vocab) {
  GPT_CHECK(text_vocab >= 1, "synthetic ", name_, ": a text vocabulary of ", text_vocab, " ids");
  if (hay_train_) {
    GPT_CHECK(base_ == text_vocab, "synthetic ", name_, ": the text haystack's haystack_vocab ", base_,
              " differs from the text vocabulary of ", text_vocab,
              " ids the task's ids must sit above; set "
              "haystack_vocab to ",
              text_vocab);
    return;
  }
  base_ = text_vocab;
}

json SyntheticTask::to_json() const {
  return {{"task", name_}, {"options", opts_}, {"vocab_size", vocab_size()}, {"base", base_}};
}

const std::vector<std::string>& synthetic_task_names() {
  static const std::vector<std::string> names = {"mqar",    "copy",          "induction",
                                                 "passkey", "niah_multikey", "variable_tracking"};
  return names;
}

const std::vector<SyntheticOption>& synthetic_task_options(const std::string& task) {
  const auto& t = option_table();
  const auto it = t.find(task);
  if (it == t.end()) {
    std::string all;
    for (const auto& n : synthetic_task_names()) all += (all.empty() ? "" : ", ") + n;
    fail("synthetic task '", task, "' is unknown; the tasks are ", all);
  }
  return it->second;
}

std::unique_ptr<SyntheticTask> make_synthetic_task(const std::string& task, const json& options) {
  const auto& defs = synthetic_task_options(task);
  GPT_CHECK(options.is_object(), "synthetic ", task, ": options must be a JSON object, got ", options.dump());
  json o = json::object();
  for (const auto& d : defs) o[d.name] = d.default_value;
  for (const auto& [key, v] : options.items()) {
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    const auto d = std::find_if(defs.begin(), defs.end(), [&flag_key = key](const SyntheticOption& x) {
      return x.name == flag_key;
    });
    GPT_CHECK(d != defs.end(), "synthetic ", task, ": --", flag, " is not an option of this task; it takes ",
              option_list(defs));
    if (d->default_value.is_string()) {
      GPT_CHECK(v.is_string(), "synthetic ", task, ": --", flag, " takes a word, got ", v.dump());
      const std::string w = v.get<std::string>();
      if (!d->choices.empty()) {
        std::string all;
        for (const auto& c : d->choices) all += (all.empty() ? "" : ", ") + c;
        GPT_CHECK(std::find(d->choices.begin(), d->choices.end(), w) != d->choices.end(), "synthetic ", task, ": --",
                  flag, " ", w, " is not valid; it takes one of ", all);
      }
      GPT_CHECK(!w.empty(), "synthetic ", task, ": --", flag, " must not be empty");
    } else {
      GPT_CHECK(v.is_number_integer(), "synthetic ", task, ": --", flag, " takes an integer, got ", v.dump());
      const int64_t x = v.get<int64_t>();
      GPT_CHECK(x >= d->lo && x <= d->hi, "synthetic ", task, ": --", flag, " ", x, " is outside [", d->lo, ", ", d->hi,
                "] (", d->help, ")");
    }
    o[key] = v;
  }
  std::unique_ptr<SyntheticTask> t;
  if (task == "mqar") t = std::make_unique<Mqar>(o);
  if (task == "copy") t = std::make_unique<Copy>(o);
  if (task == "induction") t = std::make_unique<Induction>(o);
  if (task == "passkey") t = std::make_unique<Passkey>(o);
  if (task == "niah_multikey") t = std::make_unique<NiahMultikey>(o);
  if (task == "variable_tracking") t = std::make_unique<VariableTracking>(o);
  GPT_CHECK(t->vocab_size() <= (1 << 24), "synthetic ", task, ": the vocabulary of ", t->vocab_size(),
            " ids is too large");
  return t;
}

json synthetic_options_from_words(const std::string& task, const std::map<std::string, std::string>& words) {
  const auto& defs = synthetic_task_options(task);
  json o = json::object();
  for (const auto& [given, w] : words) {
    std::string key = given;
    std::replace(key.begin(), key.end(), '-', '_');
    const auto d = std::find_if(defs.begin(), defs.end(), [&flag_key = key](const SyntheticOption& x) {
      return x.name == flag_key;
    });
    if (d == defs.end() || d->default_value.is_string()) {
      o[key] = w;  // make_synthetic_task names what is wrong with an unknown key
      continue;
    }
    int64_t x = 0;
    const auto r = std::from_chars(w.data(), w.data() + w.size(), x);
    std::replace(key.begin(), key.end(), '_', '-');
    GPT_CHECK(r.ec == std::errc() && r.ptr == w.data() + w.size(), "synthetic ", task, ": --", key, " '", w,
              "' is not an integer");
    o[d->name] = x;
  }
  return o;
}

// ---------------------------------------------------------------- files

SyntheticDataResult write_synthetic_data(const SyntheticTask& task, const SyntheticDataOptions& opt) {
  GPT_CHECK(opt.context >= 2, "gpt data synthetic: --context ", opt.context, " must be at least 2");
  GPT_CHECK(opt.train_examples >= 1 && opt.val_examples >= 1, "gpt data synthetic: --train-examples (",
            opt.train_examples, ") and --val-examples (", opt.val_examples, ") must be at least 1");
  const int T = opt.context;
  GPT_CHECK(T >= task.min_length(1), "gpt data synthetic ", task.name(), ": --context ", T,
            " is too short for examples with options ", task.options().dump(), "; they need at least ",
            task.min_length(1), " tokens");
  const uint64_t max_tokens = static_cast<uint64_t>(INT32_MAX);
  for (int64_t n : {opt.train_examples, opt.val_examples})
    GPT_CHECK(static_cast<uint64_t>(n) * T + 1 <= max_tokens, "gpt data synthetic: ", n, " examples of ", T,
              " tokens exceed the ", max_tokens, " tokens one shard holds");
  fs::create_directories(opt.out_dir);
  const std::string name = opt.name.empty() ? task.name() : opt.name;
  const int width = task.vocab_size() <= 65536 ? 2 : 4;
  SyntheticDataResult res;
  for (int split = 0; split < 2; ++split) {
    const int64_t n = split == 0 ? opt.train_examples : opt.val_examples;
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> mask;
    tokens.reserve(static_cast<size_t>(n) * T + 1);
    mask.reserve(tokens.capacity());
    uint64_t scored = 0;
    for (int64_t i = 0; i < n; ++i) {
      Rng rng(synthetic_seed(opt.seed, static_cast<uint64_t>(split), static_cast<uint64_t>(i)));
      const SyntheticExample ex =
          task.make(T, 1, -1.0, split == 0 ? SyntheticSplit::kTrain : SyntheticSplit::kVal, rng);
      tokens.insert(tokens.end(), ex.tokens.begin(), ex.tokens.end());
      mask.insert(mask.end(), ex.scored.begin(), ex.scored.end());
      for (uint8_t s : ex.scored) scored += s;
    }
    // The end-of-text that closes the last sequence, as the next example
    // would: never scored.
    tokens.push_back(static_cast<uint32_t>(task.base() + kEot));
    mask.push_back(0);
    const std::string file =
        (fs::path(opt.out_dir) / (name + (split == 0 ? "_train_000001.bin" : "_val_000000.bin"))).string();
    write_shard(file, tokens, width);
    write_mask_shard(mask_path_for(file), mask);
    res.files.push_back(file);
    res.files.push_back(mask_path_for(file));
    (split == 0 ? res.train_tokens : res.val_tokens) = tokens.size();
    (split == 0 ? res.train_scored : res.val_scored) = scored;
  }
  json j = task.to_json();
  j["format"] = "gpt synthetic task";
  j["version"] = 1;
  j["context"] = T;
  j["seed"] = opt.seed;
  j["train_examples"] = opt.train_examples;
  j["val_examples"] = opt.val_examples;
  j["train_scored_tokens"] = res.train_scored;
  j["val_scored_tokens"] = res.val_scored;
  j["symbols"] = {{"end_of_text", task.base() + kEot}, {"pad", task.base() + kPad},
                  {"separator", task.base() + kSep},   {"query", task.base() + kQuery},
                  {"key", task.base() + kKey},         {"equals", task.base() + kEq},
                  {"digit_0", task.base() + kDigit0},  {"first_symbol", task.base() + kFirstSymbol}};
  const std::string tf = (fs::path(opt.out_dir) / kSyntheticTaskFile).string();
  write_json_file(tf, j);
  res.files.push_back(tf);
  return res;
}

std::unique_ptr<SyntheticTask> load_synthetic_task(const std::string& path, json* file) {
  const std::string p = fs::is_directory(path) ? (fs::path(path) / kSyntheticTaskFile).string() : path;
  const json j = read_json_file(p, "synthetic task");
  GPT_CHECK(j.is_object() && j.value("format", "") == "gpt synthetic task", p,
            ": not a synthetic task file (gpt data synthetic writes one as ", kSyntheticTaskFile, ")");
  GPT_CHECK(j.value("version", 0) == 1, p, ": version ", j.value("version", 0), " is not 1");
  GPT_CHECK(j.contains("task") && j["task"].is_string() && j.contains("options"), p,
            ": needs \"task\" and \"options\"");
  auto t = make_synthetic_task(j["task"].get<std::string>(), j["options"]);
  GPT_CHECK(j.value("vocab_size", -1) == t->vocab_size(), p, ": vocab_size ", j.value("vocab_size", -1),
            " disagrees with the task's ", t->vocab_size(), " (written by another version?)");
  if (file) *file = j;
  return t;
}

// ---------------------------------------------------------------- mixing into training

std::unique_ptr<SyntheticTask> make_mixed_task(const std::string& task, const json& options, int text_vocab) {
  std::unique_ptr<SyntheticTask> t;
  try {
    t = make_synthetic_task(task, options);
    t->place_above(text_vocab);
  } catch (const Error& e) {
    throw Error(std::string("data.mix_task / data.mix_options: ") + e.what());
  }
  return t;
}

SyntheticMixer::SyntheticMixer(const std::string& task, const json& options, double fraction, int text_vocab,
                               uint64_t seed)
    : task_(make_mixed_task(task, options, text_vocab)), fraction_(fraction), seed_(seed) {
  GPT_CHECK(fraction > 0 && fraction <= 1, "data.mix_fraction must lie in (0, 1] with data.mix_task ", task, ", got ",
            fraction);
}

void SyntheticMixer::check(int T, int model_vocab) const {
  GPT_CHECK(T >= task_->min_length(1), "data.mix_task ", task_->name(), ": model.context ", T,
            " is too short for its examples with options ", task_->options().dump(), " (they need at least ",
            task_->min_length(1), " tokens)");
  GPT_CHECK(task_->vocab_size() <= model_vocab, "data.mix_task ", task_->name(), ": its ids run from ", task_->base(),
            " (above the text vocabulary) to ", task_->vocab_size() - 1, ", so model.vocab_size must be at least ",
            task_->vocab_size(), "; got ", model_vocab);
}

int SyntheticMixer::apply(int32_t* inputs, int32_t* targets, int rows, int T, uint64_t first) const {
  constexpr uint64_t kMixStream = 0x6D69785F7461736Bull;  // "mix_task": apart from the shards' split streams
  int replaced = 0;
  for (int r = 0; r < rows; ++r) {
    Rng rng(synthetic_seed(seed_, kMixStream, first + static_cast<uint64_t>(r)));
    if (rng.uniform() >= fraction_) continue;
    const SyntheticExample ex = task_->make(T, 1, -1.0, SyntheticSplit::kTrain, rng);
    int32_t* in = inputs + static_cast<size_t>(r) * T;
    int32_t* tg = targets + static_cast<size_t>(r) * T;
    for (int i = 0; i < T; ++i) {
      in[i] = ex.tokens[i];
      tg[i] = i + 1 < T && ex.scored[i + 1] ? ex.tokens[i + 1] : kIgnoreTarget;
    }
    ++replaced;
  }
  return replaced;
}

}  // namespace gpt
