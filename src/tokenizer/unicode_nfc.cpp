// NFC (unicode_nfc.h): decompose, order, compose (UAX #15, §1.3 and §3).
#include "tokenizer/unicode_nfc.h"

#include <algorithm>
#include <vector>

namespace gpt::unicode {

namespace {

// Hangul syllables: S = SBase + (L·VCount + V)·TCount + T (Unicode §3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// One code point of UTF-8 at s[i], advancing i; false (i unchanged) if the
// bytes there are not a valid, shortest-form encoding of a scalar value.
bool decode(std::string_view s, size_t& i, uint32_t& cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || i + len > s.size()) return false;
  uint32_t v = len == 1 ? c : c & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d >> 6) != 2) return false;
    v = (v << 6) | (d & 0x3F);
  }
  static const uint32_t min_of[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < min_of[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return false;
  cp = v;
  i += len;
  return true;
}

void encode(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecomposition + kDecompositionCount;
  const Decomposition* d =
      std::lower_bound(kDecomposition, end, cp, [](const Decomposition& x, uint32_t v) { return x.cp < v; });
  if (d != end && d->cp == cp)
    out.insert(out.end(), d->to, d->to + d->n);
  else
    out.push_back(cp);
}

// The composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition* end = kComposition + kCompositionCount;
  const Composition* c = std::lower_bound(kComposition, end, std::pair{a, b}, [](const Composition& x, auto v) {
    return x.first != v.first ? x.first < v.first : x.second < v.second;
  });
  return c != end && c->first == a && c->second == b ? c->composite : 0;
}

// NFC of a run of scalar values, appended to out as UTF-8.
void normalise_run(const std::vector<uint32_t>& cps, std::string& out) {
  std::vector<uint32_t> d;
  for (uint32_t cp : cps) decompose(cp, d);
  // Canonical ordering: a stable sort of each run of non-starters by class.
  for (size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<long>(i), d.begin() + static_cast<long>(j),
                     [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Canonical composition: each character joins the last starter unless a
  // character between them blocks it (same or higher class, or a starter).
  std::vector<uint32_t> r;
  size_t starter = SIZE_MAX;
  int last_ccc = -1;
  for (uint32_t c : d) {
    const int ccc = combining_class(c);
    if (starter != SIZE_MAX) {
      const bool adjacent = r.size() == starter + 1;
      const bool blocked = !adjacent && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        const uint32_t comp = compose(r[starter], c);
        if (comp != 0) {
          r[starter] = comp;
          continue;
        }
      }
    }
    r.push_back(c);
    if (ccc == 0) starter = r.size() - 1;
    last_ccc = ccc;
  }
  for (uint32_t c : r) encode(c, out);
}

}  // namespace

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  const CombiningRange* end = kCombiningClass + kCombiningClassCount;
  const CombiningRange* r =
      std::upper_bound(kCombiningClass, end, cp, [](uint32_t v, const CombiningRange& x) { return v < x.first; });
  if (r == kCombiningClass) return 0;
  --r;
  return cp <= r->last ? r->ccc : 0;
}

std::string nfc(std::string_view text) {
  bool simple = true;  // every code point below U+0300: unchanged
  for (size_t i = 0; i < text.size() && simple; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    simple = c < 0xC0 || (c >= 0xC2 && c <= 0xCB);  // ASCII, continuation bytes, leads of U+0080..U+02FF
  }
  if (simple) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::vector<uint32_t> run;
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    if (decode(text, i, cp)) {
      run.push_back(cp);
      continue;
    }
    normalise_run(run, out);  // an invalid byte ends the run and is kept as it is
    run.clear();
    out.push_back(text[i++]);
  }
  normalise_run(run, out);
  return out;
}

}  // namespace gpt::unicode
