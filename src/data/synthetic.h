// Synthetic length-generalisation tasks (issue 17): small-vocabulary
// sequences whose answers are a function of the rest of the sequence, so a
// 2–4 layer model learns them in minutes and retrieval past the training
// context gives a signal on a CPU. Every example starts with end-of-text, has
// exactly the length asked for, and marks its answer tokens in a loss mask
// (data/shard.h), so training and evaluation score the answers only.
//
// The vocabulary (ids relative to the task's base, which is 0 unless the
// haystack is text of another vocabulary, whose ids then sit below it):
//   0 end-of-text (first token of every example)   1 pad (filler)
//   2 separator   3 query   4 key (begins a needle)   5 "="
//   6–15 reserved   16–25 the digits 0–9   26… the task's symbols
//
// The tasks (T = example length; "x m" = the evaluation at m times the
// training context grows that count m-fold):
//   mqar               eot k1 v1 … kP vP pad… q1 a1 … qQ aQ: P key–value pairs
//                      of distinct keys, then Q of the keys asked again, each
//                      value scored (Zoology's multi-query associative recall).
//                      --scale gap: the pad gap grows with the length;
//                      --scale pairs: P and Q x m.
//   copy               eot pad… s sep s (--scale length: |s| x m) or
//                      eot s pad… sep s (--scale gap); the copy is scored.
//   induction          eot h h [pad]: a random string of (T-1)/2 symbols
//                      repeated; the repeat's tokens after its first scored.
//   passkey            eot hay… key d1…dk …hay query d1…dk: the needle at a
//                      depth of the haystack; the digits after query scored.
//   niah_multikey      eot hay with N needles "key name d1…dk" of distinct
//                      names, query name d1…dk: one needle (at the depth) asked.
//                      --query alias: the question names it by the name's
//                      alias, a token of its own that no needle contains
//                      (NoLiMa's point: no literal overlap to match).
//   variable_tracking  RULER's chains in a haystack: "X1 = d1…dk sep",
//                      "X2 = X1 sep", …; query d1…dk = X1 X2 …: every name
//                      bound to the value, in order, scored.
// Haystacks are random noise symbols, or text from token shards (--haystack
// DIR: DIR/*_train_*.bin for training examples, DIR/*_val_*.bin for
// validation and evaluation).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpt {

struct Rng;
class TokenStream;

namespace synth {
constexpr int32_t kEot = 0, kPad = 1, kSep = 2, kQuery = 3, kKey = 4, kEq = 5;
constexpr int32_t kDigit0 = 16;       // digit d is kDigit0 + d
constexpr int32_t kFirstSymbol = 26;  // the task's own symbols start here
}  // namespace synth

// Where an example's haystack text comes from (text haystacks only).
enum class SyntheticSplit { kTrain, kVal };

struct SyntheticExample {
  std::vector<int32_t> tokens;  // exactly the length asked for; tokens[0] is end-of-text
  std::vector<uint8_t> scored;  // 1 on the answer tokens (scored as targets), else 0
};

// One answer token: the token expected at `position` of the example.
struct SyntheticAnswer {
  int position = 0;
  int32_t token = 0;
  bool operator==(const SyntheticAnswer&) const = default;
};

// A task option: integers (with bounds) or one of a few words.
struct SyntheticOption {
  std::string name;  // JSON key; the command line spells it with '-' for '_'
  nlohmann::json default_value;
  int64_t lo = 0, hi = 0;            // integers: the valid range
  std::vector<std::string> choices;  // words: the valid values (empty for integers and paths)
  std::string help;
  bool path = false;  // a word that names a directory ("random" or DIR)
};

class SyntheticTask {
 public:
  virtual ~SyntheticTask() = default;
  const std::string& name() const { return name_; }
  const nlohmann::json& options() const { return opts_; }  // every option, defaults filled in
  int base() const { return base_; }
  int vocab_size() const { return base_ + local_vocab(); }
  // Whether examples have a depth (where the needle or the chain sits).
  virtual bool has_depth() const { return false; }
  // The shortest example at that multiple of the training context.
  virtual int min_length(int multiple) const = 0;
  // An example of exactly `length` tokens at context multiple `multiple`
  // (the counts --scale grows), the needle at `depth` in [0, 1] for tasks
  // with one (a negative depth: uniform at random). Throws when `length` is
  // below min_length(multiple), naming the task and its options.
  SyntheticExample make(int length, int multiple, double depth, SyntheticSplit split, Rng& rng) const;
  // The checker: the answers the example's other tokens determine,
  // recomputed from the tokens alone (not from the generator's choices).
  virtual std::vector<SyntheticAnswer> answers(const std::vector<int32_t>& tokens) const = 0;
  nlohmann::json to_json() const;  // {"task", "options", "vocab_size", "base"}
  // Moves the task's ids above a text vocabulary of `text_vocab` ids (mixing
  // into language-model training). A task with a text haystack already sits
  // above its haystack_vocab; that must then be text_vocab. Throws otherwise.
  void place_above(int text_vocab);

 protected:
  SyntheticTask(std::string name, nlohmann::json opts);
  virtual int local_vocab() const = 0;
  virtual void build(SyntheticExample& ex, int length, int multiple, double depth, SyntheticSplit split,
                     Rng& rng) const = 0;
  int64_t opt(const char* key) const;
  std::string word(const char* key) const;
  int32_t id(int32_t local) const { return base_ + local; }
  int32_t local(int32_t token) const { return token - base_; }
  // Haystack tasks: `n` tokens of noise symbols [noise_first, +noise) or of
  // text from the haystack shards (split's files, a random offset).
  void haystack(std::vector<int32_t>& out, int n, int32_t noise_first, SyntheticSplit split, Rng& rng) const;
  void open_haystack();  // text haystacks: validates the shards, sets base_

  std::string name_;
  nlohmann::json opts_;
  int base_ = 0;
  std::shared_ptr<TokenStream> hay_train_, hay_val_;
};

// The task names, in the order --help lists them.
const std::vector<std::string>& synthetic_task_names();
// The options a task takes (name, default, valid values, help).
const std::vector<SyntheticOption>& synthetic_task_options(const std::string& task);
// A task from its name and options (missing ones take their defaults). Throws
// on an unknown task, an option the task does not take, or a bad value,
// naming it and what is valid.
std::unique_ptr<SyntheticTask> make_synthetic_task(const std::string& task, const nlohmann::json& options);
// Options given as words (the command line): integers parsed, names with
// '-' or '_'. Throws on a value that is not a number where one is needed.
nlohmann::json synthetic_options_from_words(const std::string& task, const std::map<std::string, std::string>& words);

// `gpt data synthetic`: train and validation examples of exactly `context`
// tokens, example i of a split drawn from (seed, split, i) alone. Writes
// OUT/NAME_train_000001.bin and OUT/NAME_val_000000.bin (each with its
// .mask) and OUT/task.json (the task, its options, the vocabulary, the
// context, the seed, the counts). Sequence k of the loader (tokens
// [kT, kT+T]) is example k followed by the next example's end-of-text, which
// is never scored.
struct SyntheticDataOptions {
  std::string out_dir, name;  // name: file prefix (default: the task's name)
  int context = 0;
  int64_t train_examples = 0, val_examples = 0;
  uint64_t seed = 0;
};
struct SyntheticDataResult {
  std::vector<std::string> files;
  uint64_t train_tokens = 0, val_tokens = 0, train_scored = 0, val_scored = 0;
};
SyntheticDataResult write_synthetic_data(const SyntheticTask& task, const SyntheticDataOptions& opt);

// The file `gpt data synthetic` writes beside the shards.
inline constexpr const char* kSyntheticTaskFile = "task.json";
// Reads DIR/task.json (or a path to such a file) back into a task.
std::unique_ptr<SyntheticTask> load_synthetic_task(const std::string& path, nlohmann::json* file = nullptr);

// Example i of a split: the seed the generator and the evaluation use.
uint64_t synthetic_seed(uint64_t seed, uint64_t stream, uint64_t i);

// data.mix_task: a task's examples mixed into language-model training. Each
// training sequence becomes, with probability `fraction`, an example of
// exactly T tokens (the task at 1x, ids above the text vocabulary, text
// haystacks from the task's training shards); its answer tokens alone are
// scored, every other target of the row becomes kIgnoreTarget (core/tokens.h),
// so the step's loss is the mean over the text rows' tokens and the answers.
// Which sequences, and each example, depend only on (seed, the sequence's
// number in the stream of training sequences): every rank of a data-parallel
// run, any split into micro-batches, and a resumed run make the same choices.
class SyntheticMixer {
 public:
  // Throws, naming data.mix_task / data.mix_options, on an unknown task, a bad
  // option or a text haystack of another vocabulary than text_vocab.
  SyntheticMixer(const std::string& task, const nlohmann::json& options, double fraction, int text_vocab,
                 uint64_t seed);
  // Throws, naming model.context or model.vocab_size, when T is too short for
  // an example or the model's vocabulary does not hold the task's ids.
  void check(int T, int model_vocab) const;
  // inputs/targets hold rows x T ids: training sequences first, first + 1, …
  // (counted from the run's first, over all ranks and micro-batches). Returns
  // the number of rows replaced.
  int apply(int32_t* inputs, int32_t* targets, int rows, int T, uint64_t first) const;
  const SyntheticTask& task() const { return *task_; }

 private:
  std::unique_ptr<SyntheticTask> task_;
  double fraction_;
  uint64_t seed_;
};

// The task of data.mix_task with its options, its ids above text_vocab: what
// the mixer trains on and `gpt eval --task` evaluates on such a run.
std::unique_ptr<SyntheticTask> make_mixed_task(const std::string& task, const nlohmann::json& options, int text_vocab);

}  // namespace gpt
