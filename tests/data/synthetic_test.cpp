// Synthetic tasks: every generator is deterministic from its seed, has the
// length asked for at every multiple, puts its mask exactly on the answers
// the checker recomputes from the tokens; the checkers against sequences
// written by hand; the options each task's --scale grows; the depth; text
// haystacks; the files (shards, masks, task.json) through the loader; the
// refusals of bad options; the mixer that puts a task's examples into
// language-model training (data.mix_task).
#include "data/synthetic.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <initializer_list>

#include "core/check.h"
#include "core/tokens.h"
#include "data/loader.h"
#include "data/rng.h"
#include "data/shard.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace gpt {
namespace {

using namespace synth;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  const std::string msg = error_of(f);
  EXPECT_FALSE(msg.empty()) << "expected a gpt::Error";
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

std::string temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("gpt_synthetic_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// A directory of text shards for haystacks: training ids 10-59, validation
// ids 100-149 (vocabulary 257).
std::string text_haystack(const std::string& name) {
  const std::string dir = temp_dir(name);
  std::vector<uint32_t> train(500), val(500);
  for (size_t i = 0; i < 500; ++i) train[i] = 10 + i % 50, val[i] = 100 + i % 50;
  write_shard(dir + "/text_train_000001.bin", train, 2);
  write_shard(dir + "/text_val_000000.bin", val, 2);
  return dir;
}

SyntheticExample example(const SyntheticTask& t, int length, int m, double depth, uint64_t seed) {
  Rng rng(seed);
  return t.make(length, m, depth, SyntheticSplit::kVal, rng);
}

// The mask is 1 exactly where the checker finds an answer, and the tokens
// there are the answers.
void expect_mask_on_answers(const SyntheticTask& t, const SyntheticExample& ex) {
  const std::vector<SyntheticAnswer> a = t.answers(ex.tokens);
  ASSERT_FALSE(a.empty()) << t.name();
  std::vector<uint8_t> from_checker(ex.tokens.size(), 0);
  for (const auto& x : a) {
    ASSERT_GE(x.position, 1);
    ASSERT_LT(x.position, static_cast<int>(ex.tokens.size()));
    EXPECT_EQ(ex.tokens[x.position], x.token) << t.name() << " position " << x.position;
    from_checker[x.position] = 1;
  }
  EXPECT_EQ(ex.scored, from_checker) << t.name();
}

struct Case {
  std::string task;
  json options;
};

std::vector<Case> every_task() {
  return {{"mqar", json::object()},          {"mqar", {{"scale", "pairs"}, {"keys", 200}, {"queries", 3}}},
          {"copy", json::object()},          {"copy", {{"scale", "gap"}, {"min_length", 2}, {"max_length", 5}}},
          {"induction", json::object()},     {"passkey", json::object()},
          {"niah_multikey", json::object()}, {"niah_multikey", {{"query", "alias"}}},
          {"variable_tracking", {{"chains", 3}, {"hops", 2}}}};
}

TEST(Synthetic, EveryTaskIsDeterministicExactlyLongAndMasksItsAnswers) {
  const int T = 96;
  for (const auto& c : every_task()) {
    SCOPED_TRACE(c.task + " " + c.options.dump());
    const auto t = make_synthetic_task(c.task, c.options);
    for (int m : {1, 2, 4, 8, 16}) {
      for (uint64_t seed : {1u, 2u, 3u}) {
        const SyntheticExample ex = example(*t, m * T, m, -1, seed);
        ASSERT_EQ(ex.tokens.size(), static_cast<size_t>(m * T));
        ASSERT_EQ(ex.scored.size(), ex.tokens.size());
        EXPECT_EQ(ex.tokens[0], kEot);
        for (int32_t x : ex.tokens) {
          EXPECT_GE(x, 0);
          EXPECT_LT(x, t->vocab_size());
        }
        expect_mask_on_answers(*t, ex);
        const SyntheticExample again = example(*t, m * T, m, -1, seed);
        EXPECT_EQ(again.tokens, ex.tokens);
        EXPECT_EQ(again.scored, ex.scored);
      }
      EXPECT_NE(example(*t, m * T, m, -1, 1).tokens, example(*t, m * T, m, -1, 2).tokens);
    }
  }
}

int scored(const SyntheticExample& ex) {
  int n = 0;
  for (uint8_t s : ex.scored) n += s;
  return n;
}

TEST(Synthetic, ScaleGrowsWhatItNames) {
  // mqar --scale pairs: 3 queries x m; --scale gap: the same 8 at every length.
  const auto pairs = make_synthetic_task("mqar", {{"scale", "pairs"}, {"keys", 200}, {"queries", 3}});
  const auto gap = make_synthetic_task("mqar", json::object());
  for (int m : {1, 4, 16}) {
    EXPECT_EQ(scored(example(*pairs, 64 * m, m, -1, 5)), 3 * m);
    EXPECT_EQ(scored(example(*gap, 64 * m, m, -1, 5)), 8);
    EXPECT_EQ(pairs->min_length(m), 1 + 2 * 8 * m + 2 * 3 * m);
  }
  // copy --scale length: |s| in [4m, 16m]; --scale gap: in [4, 16].
  const auto len = make_synthetic_task("copy", json::object());
  const auto cgap = make_synthetic_task("copy", {{"scale", "gap"}});
  for (int m : {1, 2, 8})
    for (uint64_t s = 0; s < 20; ++s) {
      const int n = scored(example(*len, 64 * m, m, -1, s));
      EXPECT_GE(n, 4 * m);
      EXPECT_LE(n, 16 * m);
      const int g = scored(example(*cgap, 64 * m, m, -1, s));
      EXPECT_GE(g, 4);
      EXPECT_LE(g, 16);
    }
  // induction: the repeat is half the example at every length.
  const auto ind = make_synthetic_task("induction", json::object());
  EXPECT_EQ(scored(example(*ind, 65, 1, -1, 1)), 31);
  EXPECT_EQ(scored(example(*ind, 1024, 16, -1, 1)), 510);
}

TEST(Synthetic, CheckersAgainstSequencesWrittenByHand) {
  const int S = kFirstSymbol;
  {  // mqar with keys S.. (64 of them) and values S+64..
    const auto t = make_synthetic_task("mqar", json::object());
    const int K = S, V = S + 64;
    const std::vector<int32_t> x = {kEot, K + 3, V + 7, K + 9, V + 1, kPad, K + 9, V + 1, K + 3, V + 7};
    const std::vector<SyntheticAnswer> want = {{7, V + 1}, {9, V + 7}};
    EXPECT_EQ(t->answers(x), want);
  }
  {  // copy: the symbols before the separator, after it
    const auto t = make_synthetic_task("copy", json::object());
    const std::vector<int32_t> x = {kEot, kPad, S + 2, S + 5, kSep, S + 2, S + 5};
    const std::vector<SyntheticAnswer> want = {{5, S + 2}, {6, S + 5}};
    EXPECT_EQ(t->answers(x), want);
  }
  {  // induction: h = (a b c), repeated; the repeat after its first token
    const auto t = make_synthetic_task("induction", json::object());
    const std::vector<int32_t> x = {kEot, S + 1, S + 2, S + 3, S + 1, S + 2, S + 3, kPad};
    const std::vector<SyntheticAnswer> want = {{5, S + 2}, {6, S + 3}};
    EXPECT_EQ(t->answers(x), want);
  }
  const int D = kDigit0;
  {  // passkey: the digits after the key, after the query
    const auto t = make_synthetic_task("passkey", {{"digits", 3}});
    const std::vector<int32_t> x = {kEot, S, kKey, D + 4, D + 0, D + 9, S + 1, kQuery, D + 4, D + 0, D + 9};
    const std::vector<SyntheticAnswer> want = {{8, D + 4}, {9, D + 0}, {10, D + 9}};
    EXPECT_EQ(t->answers(x), want);
  }
  {  // niah_multikey: the needle whose name the query asks
    const auto t = make_synthetic_task("niah_multikey", {{"digits", 2}, {"needles", 2}});
    const std::vector<int32_t> x = {kEot,  kKey,  S + 1, D + 1,  D + 2, S + 20, kKey,
                                    S + 4, D + 7, D + 8, kQuery, S + 4, D + 7,  D + 8};
    const std::vector<SyntheticAnswer> want = {{12, D + 7}, {13, D + 8}};
    EXPECT_EQ(t->answers(x), want);
  }
  {  // niah_multikey --query alias: 16 names S..S+15, their aliases S+16..S+31;
     // the query's S+20 is the alias of S+4
    const auto t = make_synthetic_task("niah_multikey", {{"digits", 2}, {"needles", 2}, {"query", "alias"}});
    const std::vector<int32_t> x = {kEot,  kKey,  S + 1, D + 1,  D + 2, S + 40, kKey,
                                    S + 4, D + 7, D + 8, kQuery, S + 20, D + 7, D + 8};
    const std::vector<SyntheticAnswer> want = {{12, D + 7}, {13, D + 8}};
    EXPECT_EQ(t->answers(x), want);
    EXPECT_EQ(t->vocab_size(), S + 16 + 16 + 16);  // names, aliases, noise
  }
  {  // variable_tracking: a = 12, b = 34, c = a, d = c; query 12 = a c d
    const auto t = make_synthetic_task("variable_tracking", {{"digits", 2}});
    const int a = S, b = S + 1, c = S + 2, d = S + 3;
    const std::vector<int32_t> x = {kEot, a,      kEq, D + 1, D + 2, kSep, b,      kEq,   D + 3, D + 4, kSep, c, kEq, a,
                                    kSep, S + 40, d,   kEq,   c,     kSep, kQuery, D + 1, D + 2, kEq,   a,    c, d};
    const std::vector<SyntheticAnswer> want = {{24, a}, {25, c}, {26, d}};
    EXPECT_EQ(t->answers(x), want);
  }
}

// NoLiMa's condition: with --query alias the token that names the asked
// needle appears nowhere before the question, and it is not a name token.
TEST(Synthetic, AliasQueriesHaveNoLiteralOverlapWithTheirNeedle) {
  const auto t = make_synthetic_task("niah_multikey", {{"query", "alias"}, {"needles", 6}});
  const int32_t names = 16, first = kFirstSymbol;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const SyntheticExample ex = example(*t, 200, 1, -1, seed);
    const auto& x = ex.tokens;
    size_t q = x.size();
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] == kQuery) q = i;
    ASSERT_LT(q + 1, x.size());
    const int32_t asked = x[q + 1];
    EXPECT_GE(asked, first + names);
    EXPECT_LT(asked, first + 2 * names);
    for (size_t i = 0; i < q; ++i) ASSERT_NE(x[i], asked) << "seed " << seed << " position " << i;
    // The needle it asks for holds the name asked - names, and its digits are the answer.
    bool found = false;
    for (size_t i = 0; i + 1 < q; ++i)
      if (x[i] == kKey && x[i + 1] == asked - names) found = true;
    EXPECT_TRUE(found) << "seed " << seed;
    EXPECT_EQ(t->answers(x).size(), 5u);
  }
}

TEST(Synthetic, DepthPlacesTheNeedle) {
  const auto pk = make_synthetic_task("passkey", json::object());  // 5 digits: haystack of 64 - 13 = 51
  EXPECT_EQ(example(*pk, 64, 1, 0.0, 1).tokens[1], kKey);
  EXPECT_EQ(example(*pk, 64, 1, 1.0, 1).tokens[1 + 51], kKey);
  EXPECT_EQ(example(*pk, 64, 1, 0.5, 1).tokens[1 + 26], kKey);  // round(0.5 * 51) = 26
  // niah_multikey: the asked needle's name follows the key at the depth.
  const auto nm = make_synthetic_task("niah_multikey", json::object());
  for (double depth : {0.0, 1.0}) {
    const SyntheticExample ex = example(*nm, 256, 1, depth, 3);
    const int32_t asked = ex.tokens[ex.tokens.size() - 6];
    size_t at = 0;
    for (size_t p = 0; p + 1 < ex.tokens.size(); ++p)
      if (ex.tokens[p] == kKey && ex.tokens[p + 1] == asked) at = p;
    if (depth == 0.0) {
      EXPECT_EQ(at, 1u);
    } else {
      EXPECT_EQ(ex.tokens[at + 7], kQuery);  // last thing before the query
    }
  }
}

TEST(Synthetic, TextHaystackReadsTheSplitsShards) {
  const std::string dir = text_haystack("haystack");
  const auto t = make_synthetic_task("passkey", {{"haystack", dir}, {"haystack_vocab", 257}});
  EXPECT_EQ(t->base(), 257);
  EXPECT_EQ(t->vocab_size(), 257 + kFirstSymbol);
  for (SyntheticSplit split : {SyntheticSplit::kTrain, SyntheticSplit::kVal}) {
    Rng rng(4);
    const SyntheticExample ex = t->make(128, 1, 0.5, split, rng);
    EXPECT_EQ(ex.tokens[0], 257 + kEot);
    int text = 0;
    for (int32_t x : ex.tokens)
      if (x < 257) {
        ++text;
        EXPECT_EQ(x >= 100, split == SyntheticSplit::kVal) << x;
      }
    EXPECT_EQ(text, 128 - 13);
    expect_mask_on_answers(*t, ex);
  }
  fs::remove_all(dir);
}

TEST(Synthetic, FilesThroughTheLoaderAndTheTaskFile) {
  const std::string dir = temp_dir("files");
  const auto t = make_synthetic_task("mqar", {{"pairs", 4}});
  SyntheticDataOptions o;
  o.out_dir = dir;
  o.context = 32;
  o.train_examples = 20;
  o.val_examples = 5;
  o.seed = 9;
  const SyntheticDataResult r = write_synthetic_data(*t, o);
  EXPECT_EQ(r.train_tokens, 20u * 32 + 1);
  EXPECT_EQ(r.train_scored, 20u * 4);
  EXPECT_EQ(r.val_scored, 5u * 4);
  // Loader sequence k is example k; its last target (the next example's
  // end-of-text) is not scored.
  DataLoader loader(dir + "/mqar_train_*.bin", t->vocab_size(), 1, 32, false, 0);
  EXPECT_TRUE(loader.stream().has_masks());
  EXPECT_EQ(loader.sequences_per_epoch(), 20u);
  std::vector<int32_t> in(32), tg(32);
  for (int k = 0; k < 20; ++k) {
    loader.next(in.data(), tg.data());
    Rng rng(synthetic_seed(9, 0, k));
    const SyntheticExample ex = t->make(32, 1, -1, SyntheticSplit::kTrain, rng);
    for (int p = 0; p < 32; ++p) EXPECT_EQ(in[p], ex.tokens[p]);
    for (int p = 0; p + 1 < 32; ++p) EXPECT_EQ(tg[p], ex.scored[p + 1] ? ex.tokens[p + 1] : kIgnoreTarget);
    EXPECT_EQ(tg[31], kIgnoreTarget);
  }
  // Example i does not depend on how many are drawn.
  const std::string dir2 = temp_dir("files2");
  o.out_dir = dir2;
  o.train_examples = 7;
  write_synthetic_data(*t, o);
  const TokenStream a(dir + "/mqar_train_*.bin", t->vocab_size()), b(dir2 + "/mqar_train_*.bin", t->vocab_size());
  std::vector<int32_t> xa(7 * 32), xb(7 * 32);
  a.read(0, xa.size(), xa.data());
  b.read(0, xb.size(), xb.data());
  EXPECT_EQ(xa, xb);
  // task.json brings the task back.
  json file;
  const auto back = load_synthetic_task(dir, &file);
  EXPECT_EQ(back->name(), "mqar");
  EXPECT_EQ(back->options(), t->options());
  EXPECT_EQ(file["context"], 32);
  EXPECT_EQ(file["seed"], 9);
  expect_error([&] { load_synthetic_task(dir + "/mqar_train_000001.bin"); }, {"synthetic task"});
  fs::remove_all(dir);
  fs::remove_all(dir2);
}

TEST(Synthetic, BadOptionsAreRefusedByName) {
  expect_error([] { make_synthetic_task("sorting", json::object()); }, {"'sorting' is unknown", "mqar", "copy"});
  expect_error([] { make_synthetic_task("mqar", {{"hops", 3}}); }, {"--hops", "--pairs", "--scale"});
  expect_error([] { make_synthetic_task("mqar", {{"pairs", 0}}); }, {"--pairs 0", "outside [1,"});
  expect_error([] { make_synthetic_task("mqar", {{"pairs", 70}}); }, {"--keys 64", "below --pairs 70"});
  expect_error([] { make_synthetic_task("mqar", {{"queries", 9}}); }, {"--queries 9", "exceeds --pairs 8"});
  expect_error([] { make_synthetic_task("mqar", {{"scale", "length"}}); }, {"--scale length", "gap, pairs"});
  expect_error([] { make_synthetic_task("mqar", {{"pairs", "8"}}); }, {"--pairs", "integer"});
  expect_error(
      [] {
        make_synthetic_task("copy", {{"min_length", 9}, {"max_length", 3}});
      },
      {"--min-length 9", "--max-length 3"});
  expect_error([] { make_synthetic_task("niah_multikey", {{"names", 3}}); }, {"--names 3", "--needles 4"});
  expect_error([] { make_synthetic_task("variable_tracking", {{"names", 9}}); }, {"--names 9", "= 10"});
  expect_error(
      [] {
        make_synthetic_task("passkey", {{"haystack", "/no/such/dir"}});
      },
      {"--haystack '/no/such/dir'", "random"});
  expect_error([] { synthetic_options_from_words("mqar", {{"pairs", "eight"}}); }, {"--pairs 'eight'", "integer"});
  // Lengths: too short for the options, and --scale pairs past --keys.
  const auto pairs = make_synthetic_task("mqar", {{"scale", "pairs"}});
  expect_error([&] { example(*pairs, 64 * 16, 16, -1, 1); }, {"128 pairs", "--keys is 64"});
  const auto copy = make_synthetic_task("copy", json::object());
  expect_error([&] { example(*copy, 20, 1, -1, 1); }, {"copy", "20 tokens", "at least 34"});
  SyntheticDataOptions o;
  o.out_dir = temp_dir("refused");
  o.context = 20;
  o.train_examples = o.val_examples = 1;
  expect_error([&] { write_synthetic_data(*copy, o); }, {"--context 20", "at least 34"});
  fs::remove_all(o.out_dir);
}

// ---------------------------------------------------------------- data.mix_task

// Text-like rows: ids below 257, targets the inputs shifted by one.
void text_rows(std::vector<int32_t>& in, std::vector<int32_t>& tg, int rows, int T) {
  in.resize(static_cast<size_t>(rows) * T);
  tg.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>((i * 37 + 11) % 257);
  for (size_t i = 0; i < in.size(); ++i) tg[i] = static_cast<int32_t>(((i + 1) * 37 + 11) % 257);
}

// Every task mixed into 257-id text: about the share asked is replaced; a
// replaced row is an example of T tokens above the text ids whose targets are
// exactly the answers the checker finds (every other target ignored); the
// other rows are untouched.
TEST(SyntheticMix, ReplacesTheShareAskedAndScoresOnlyTheCheckersAnswers) {
  const int T = 96, rows = 400;
  for (const auto& c : every_task()) {
    SCOPED_TRACE(c.task + " " + c.options.dump());
    const SyntheticMixer mixer(c.task, c.options, 0.3, 257, 5);
    EXPECT_EQ(mixer.task().base(), 257);
    mixer.check(T, mixer.task().vocab_size());
    std::vector<int32_t> in, tg, in0, tg0;
    text_rows(in, tg, rows, T);
    in0 = in, tg0 = tg;
    const int replaced = mixer.apply(in.data(), tg.data(), rows, T, 1000);
    // Binomial(400, 0.3): mean 120, sd 9.2.
    EXPECT_GT(replaced, 120 - 40);
    EXPECT_LT(replaced, 120 + 40);
    int seen = 0;
    for (int r = 0; r < rows; ++r) {
      const auto row = [&](const std::vector<int32_t>& v) {
        return std::vector<int32_t>(v.begin() + static_cast<long>(r) * T, v.begin() + static_cast<long>(r + 1) * T);
      };
      const std::vector<int32_t> x = row(in), y = row(tg);
      if (x == row(in0)) {
        EXPECT_EQ(y, row(tg0)) << "row " << r;
        continue;
      }
      ++seen;
      EXPECT_EQ(x[0], 257 + kEot);
      for (int32_t id : x) {
        EXPECT_GE(id, 257);
        EXPECT_LT(id, mixer.task().vocab_size());
      }
      std::vector<int32_t> want(T, kIgnoreTarget);
      for (const SyntheticAnswer& a : mixer.task().answers(x)) want[a.position - 1] = a.token;
      EXPECT_EQ(y, want) << "row " << r;
      EXPECT_GT(T - std::count(y.begin(), y.end(), kIgnoreTarget), 0) << "row " << r;
    }
    EXPECT_EQ(seen, replaced);
  }
}

// The choices depend on the sequence's number only: rows split into any
// pieces (ranks, micro-batches) get the same examples; another range, others.
TEST(SyntheticMix, ExamplesDependOnTheSequenceNumberAlone) {
  const int T = 64;
  const SyntheticMixer mixer("mqar", json::object(), 0.5, 257, 9);
  std::vector<int32_t> a_in, a_tg, b_in, b_tg, c_in, c_tg;
  text_rows(a_in, a_tg, 12, T);
  text_rows(b_in, b_tg, 12, T);
  text_rows(c_in, c_tg, 12, T);
  mixer.apply(a_in.data(), a_tg.data(), 12, T, 24);
  int n = 0;
  for (int first : {0, 5, 8}) {  // rows 0-4, 5-7, 8-11
    const int rows = first == 0 ? 5 : first == 5 ? 3 : 4;
    n += mixer.apply(b_in.data() + first * T, b_tg.data() + first * T, rows, T, 24 + first);
  }
  EXPECT_EQ(a_in, b_in);
  EXPECT_EQ(a_tg, b_tg);
  EXPECT_GT(n, 0);
  mixer.apply(c_in.data(), c_tg.data(), 12, T, 36);
  EXPECT_NE(a_in, c_in);
  const SyntheticMixer other("mqar", json::object(), 0.5, 257, 10);  // another seed
  text_rows(c_in, c_tg, 12, T);
  other.apply(c_in.data(), c_tg.data(), 12, T, 24);
  EXPECT_NE(a_in, c_in);
}

// A text haystack of the text's own vocabulary: the needle's ids above it,
// the haystack from the training shards; another vocabulary is refused.
TEST(SyntheticMix, TextHaystackSitsBelowTheTasksIds) {
  const std::string dir = text_haystack("mix_haystack");
  const SyntheticMixer mixer("passkey", {{"haystack", dir}}, 1.0, 257, 3);
  std::vector<int32_t> in, tg;
  text_rows(in, tg, 4, 64);
  ASSERT_EQ(mixer.apply(in.data(), tg.data(), 4, 64, 0), 4);
  int text = 0;
  for (int32_t x : in)
    if (x < 257) {
      ++text;
      EXPECT_LT(x, 100) << "training split";
    }
  EXPECT_EQ(text, 4 * (64 - 13));
  expect_error(
      [&] {
        SyntheticMixer("passkey", {{"haystack", dir}, {"haystack_vocab", 300}}, 0.5, 257, 3);
      },
      {"data.mix_task", "haystack_vocab 300", "257"});
  fs::remove_all(dir);
}

TEST(SyntheticMix, BadSettingsAreRefusedByName) {
  expect_error(
      [] {
        SyntheticMixer("mqar", {{"bogus", 1}}, 0.5, 257, 1);
      },
      {"data.mix_task / data.mix_options", "--bogus", "--pairs"});
  expect_error([] { SyntheticMixer("sorting", json::object(), 0.5, 257, 1); }, {"'sorting'", "mqar"});
  expect_error([] { SyntheticMixer("mqar", json::object(), 0.0, 257, 1); }, {"data.mix_fraction", "(0, 1]"});
  const SyntheticMixer m("induction", json::object(), 0.5, 257, 1);  // ids 257..346
  expect_error([&] { m.check(64, 300); }, {"model.vocab_size must be at least 347", "got 300"});
  const SyntheticMixer copy("copy", json::object(), 0.5, 257, 1);
  expect_error([&] { copy.check(20, 1000); }, {"model.context 20", "at least 34"});
}

}  // namespace
}  // namespace gpt
