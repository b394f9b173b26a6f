// `gpt data ...`: text to token shards, tokenizer training, and encode/decode
// for looking at what a tokenizer does.
#include <omp.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/validators.h"
#include "core/check.h"
#include "core/files.h"
#include "data/shard.h"
#include "data/orbits.h"
#include "data/synthetic.h"
#include "data/text_to_shards.h"
#include "tokenizer/bpe_train.h"
#include "tokenizer/parallel_encode.h"
#include "tokenizer/tokenizer.h"

namespace gpt::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A file's bytes, or stdin's for "-".
std::string read_input(const std::string& path) {
  std::ostringstream s;
  if (path == "-") {
    s << std::cin.rdbuf();
    return std::move(s).str();
  }
  if (const char* why = not_a_regular_file(path))
    fail("input '", path, "': cannot open: it ", why, "; give a file, or - for standard input");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("input '", path, "': cannot open (", std::strerror(errno), ")");
  s << in.rdbuf();
  if (in.bad()) fail("input '", path, "': read failed");
  return std::move(s).str();
}

void write_stdout(std::string_view bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() || std::fflush(stdout) != 0)
    fail("writing to standard output failed");
}

// Ids from a shard (llm.c header) or from text (integers separated by white
// space); every id checked against the tokenizer's vocabulary.
std::vector<uint32_t> read_ids(const std::string& path, const Tokenizer& tok) {
  const std::string data = read_input(path);
  int32_t magic = 0;
  if (data.size() >= 1024) std::memcpy(&magic, data.data(), 4);
  if (magic == 20240520 || magic == 20240801) {
    const TokenStream s(path, static_cast<int>(tok.vocab_size()));  // validates the header; read() checks ids
    std::vector<int32_t> ids(s.size());
    s.read(0, s.size(), ids.data());
    return {ids.begin(), ids.end()};
  }
  std::vector<uint32_t> ids;
  size_t line = 1;
  for (size_t i = 0; i < data.size();) {
    const char c = data[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      line += c == '\n';
      ++i;
      continue;
    }
    size_t j = i;
    while (j < data.size() && !std::isspace(static_cast<unsigned char>(data[j]))) ++j;
    uint64_t id = 0;
    const auto r = std::from_chars(data.data() + i, data.data() + j, id);
    if (r.ec != std::errc() || r.ptr != data.data() + j)
      fail("input '", path, "' line ", line, ": \"", data.substr(i, std::min<size_t>(j - i, 40)),
           "\" is not a token id (expected non-negative integers separated by white space, or a token shard)");
    if (id >= tok.vocab_size())
      fail("input '", path, "' line ", line, ": token id ", id, " is outside the vocabulary of tokenizer '", tok.spec(),
           "' (", tok.vocab_size(), " ids)");
    ids.push_back(static_cast<uint32_t>(id));
    i = j;
  }
  return ids;
}

void add_text(CLI::App& data) {
  struct Args {
    std::string input, out_dir;
    TextToShardsOptions opt;
    int threads = 0;
  };
  auto args = std::make_shared<Args>();
  args->opt.log_progress = true;
  CLI::App* text = data.add_subcommand("text", "Tokenize text into train/val token shards (llm.c format)");
  text->add_option("input", args->input, "Text file, or a folder of text files (read in name order)")
      ->required()
      ->check(existing_path());
  text->add_option("out_dir", args->out_dir, "Output directory for NAME_val_000000.bin, NAME_train_000001.bin, ...")
      ->required();
  text->add_option("--tokenizer", args->opt.tokenizer, kTokenizerSpecHelp)->capture_default_str();
  text->add_option("--val-fraction", args->opt.val_fraction,
                   "Fraction of the text (its end: whole documents, or the last document cut at a line boundary) "
                   "used for validation, in (0, 1)")
      ->capture_default_str()
      ->check(between(0.0, 1.0));
  text->add_option("--doc-sep", args->opt.doc_sep, std::string("Document separator: ") + kDocSepHelp)
      ->capture_default_str();
  text->add_option("--name", args->opt.name, "File name prefix (default: the output directory's name)");
  text->add_option("--threads", args->threads, "Threads for encoding; 0 = all cores")->check(between(0, 1024));
  text->callback([args] {
    if (args->threads > 0) omp_set_num_threads(args->threads);
    const TextToShardsResult r = text_to_shards(args->input, args->out_dir, args->opt);
    const uint64_t tokens = r.train_tokens + r.val_tokens;
    spdlog::info("{}: {} bytes in {} documents -> {} tokens ({:.4f} tokens/byte) in {:.2f} s ({:.1f} MB/s, {} threads)",
                 args->input, r.bytes, r.documents, tokens,
                 static_cast<double>(tokens - r.train_documents - r.val_documents) / std::max<uint64_t>(r.bytes, 1),
                 r.encode_seconds, r.bytes / 1e6 / std::max(r.encode_seconds, 1e-9), omp_get_max_threads());
    spdlog::info("{} training tokens, {} validation tokens; vocabulary {} (set model.vocab_size to it), uint{} ids",
                 r.train_tokens, r.val_tokens, r.vocab_size, 8 * r.width);
    for (const auto& f : r.files) spdlog::info("wrote {}", f);
  });
}

void add_train_tokenizer(CLI::App& data) {
  struct Args {
    std::string corpus, out, doc_sep = "none";
    uint32_t vocab_size = 0;
    double val_fraction = 0;
    int threads = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = data.add_subcommand(
      "train-tokenizer", "Learn a byte-level BPE vocabulary (GPT-2's pre-tokenisation) and write it to a file");
  cmd->add_option("corpus", args->corpus, "Text file, or a folder of text files")->required()->check(existing_path());
  cmd->add_option("out", args->out, "Vocabulary file to write (load it with --tokenizer FILE)")->required();
  cmd->add_option("--vocab-size", args->vocab_size,
                  "Vocabulary size: 256 bytes + end-of-text + merges, so at least 257")
      ->required()
      ->check(between(257u, 1u << 24));
  cmd->add_option("--val-fraction", args->val_fraction,
                  "Leave out the validation part `gpt data text` would cut with this --val-fraction (and the same "
                  "--doc-sep); 0 = train on everything")
      ->capture_default_str()
      ->check(between(0.0, 1.0));
  cmd->add_option("--doc-sep", args->doc_sep, std::string("Document separator: ") + kDocSepHelp)->capture_default_str();
  cmd->add_option("--threads", args->threads, "Threads for counting; 0 = all cores")->check(between(0, 1024));
  cmd->callback([args] {
    if (args->threads > 0) omp_set_num_threads(args->threads);
    const auto t0 = std::chrono::steady_clock::now();
    const DocumentSet set = read_documents(args->corpus, args->doc_sep);
    std::vector<TextSpan> spans, val;
    if (args->val_fraction > 0) {
      if (args->val_fraction >= 1) fail("--val-fraction ", args->val_fraction, " must be in [0, 1)");
      uint64_t bytes = 0;
      split_train_val(set, args->val_fraction, args->corpus, spans, val, bytes);
    } else {
      for (const auto& d : set.docs) spans.push_back({d.begin, d.end, false});
    }
    const BpeTrainResult r = train_bpe(set.text, spans, args->vocab_size);
    write_bpe_file(args->out, r.merges);
    const uint32_t vocab = kBpeFirstMergeId + static_cast<uint32_t>(r.merges.size());
    if (vocab < args->vocab_size)
      spdlog::warn("the corpus ran out of pairs to merge: vocabulary {} instead of {}", vocab, args->vocab_size);
    spdlog::info("{}: {} bytes, {} pieces ({} distinct); {} merges in {:.2f} s", args->corpus, r.bytes, r.pieces,
                 r.distinct_pieces, r.merges.size(), seconds_since(t0));
    spdlog::info("vocabulary {} written to {}; the corpus encodes to {} tokens ({:.4f} tokens/byte)", vocab, args->out,
                 r.tokens, static_cast<double>(r.tokens) / std::max<uint64_t>(r.bytes, 1));
  });
}

void add_encode_decode(CLI::App& data) {
  struct Args {
    std::string tokenizer = "byte", input;
    bool special = false;
  };
  auto enc = std::make_shared<Args>();
  CLI::App* e = data.add_subcommand("encode", "Print the token ids of a text, one per line");
  e->add_option("input", enc->input, "Text file ('-' = standard input)")->required();
  e->add_option("--tokenizer", enc->tokenizer, kTokenizerSpecHelp)->capture_default_str();
  e->add_flag("--special", enc->special, "Encode \"<|endoftext|>\" in the text as the end-of-text token");
  e->callback([enc] {
    const std::unique_ptr<Tokenizer> tok = make_tokenizer(enc->tokenizer);
    const std::string text = read_input(enc->input);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<uint32_t> ids = encode_spans(
        *tok, text, enc->special ? spans_around_end_of_text(text) : std::vector<TextSpan>{{0, text.size(), false}});
    const double s = seconds_since(t0);
    std::string out;
    out.reserve(ids.size() * 6);
    char buf[16];
    for (uint32_t id : ids) {
      const auto r = std::to_chars(buf, buf + sizeof buf, id);
      out.append(buf, r.ptr);
      out.push_back('\n');
    }
    write_stdout(out);
    std::fprintf(stderr, "encode: %zu bytes -> %zu tokens (%.4f tokens/byte) in %.3f s (%.1f MB/s, %d threads)\n",
                 text.size(), ids.size(), static_cast<double>(ids.size()) / std::max<size_t>(text.size(), 1), s,
                 text.size() / 1e6 / std::max(s, 1e-9), omp_get_max_threads());
  });

  auto dec = std::make_shared<Args>();
  CLI::App* d =
      data.add_subcommand("decode", "Write the bytes of token ids (text or a token shard) to standard output");
  d->add_option("input", dec->input, "Ids separated by white space, or a token shard ('-' = standard input)")
      ->required();
  d->add_option("--tokenizer", dec->tokenizer, kTokenizerSpecHelp)->capture_default_str();
  d->callback([dec] {
    const std::unique_ptr<Tokenizer> tok = make_tokenizer(dec->tokenizer);
    write_stdout(tok->decode(read_ids(dec->input, *tok)));
  });
}

void add_synthetic(CLI::App& data) {
  struct Args {
    std::string task, out_dir, name;
    SyntheticDataOptions opt;
    std::map<std::string, std::string> words;  // the task options given
  };
  auto args = std::make_shared<Args>();
  args->opt.seed = 1;
  std::string tasks, help = "Task: ";
  for (const auto& n : synthetic_task_names()) tasks += (tasks.empty() ? "" : ", ") + n;
  CLI::App* cmd = data.add_subcommand(
      "synthetic", "Generate a synthetic length-generalisation task (" + tasks +
                       ") as train/val token shards with loss masks on the answers, and task.json beside them");
  cmd->add_option("task", args->task, "Task: " + tasks)->required()->check(CLI::IsMember(synthetic_task_names()));
  cmd->add_option("out_dir", args->out_dir,
                  "Output directory for TASK_train_000001.bin, TASK_val_000000.bin, "
                  "their .mask files and task.json")
      ->required();
  cmd->add_option("--context", args->opt.context, "Tokens per example: the training context T (model.context)")
      ->required()
      ->check(between(2, 1 << 20));
  cmd->add_option("--train-examples", args->opt.train_examples, "Training examples")
      ->required()
      ->check(between(1, 2147483647.0));
  cmd->add_option("--val-examples", args->opt.val_examples, "Validation examples")
      ->required()
      ->check(between(1, 2147483647.0));
  cmd->add_option("--seed", args->opt.seed, "Seed: example i of a split depends on (seed, split, i) alone")
      ->capture_default_str();
  cmd->add_option("--name", args->opt.name, "File name prefix (default: the task's name)");
  // Every task's options, each on the tasks that take it (the others refuse it).
  std::map<std::string, std::string> flag_help;
  for (const auto& t : synthetic_task_names())
    for (const SyntheticOption& o : synthetic_task_options(t)) {
      std::string& h = flag_help[o.name];
      if (h.empty()) h = o.help + "; default by task:";
      h += " " + t + " " + (o.default_value.is_string() ? o.default_value.get<std::string>() : o.default_value.dump());
    }
  for (const auto& [name, h] : flag_help) {
    std::string flag = name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    cmd->add_option_function<std::string>(
        "--" + flag, [args, key = name](const std::string& v) { args->words[key] = v; }, h);
  }
  cmd->callback([args] {
    const auto t0 = std::chrono::steady_clock::now();
    const auto task = make_synthetic_task(args->task, synthetic_options_from_words(args->task, args->words));
    args->opt.out_dir = args->out_dir;
    const SyntheticDataResult r = write_synthetic_data(*task, args->opt);
    spdlog::info("{} {}: {} training and {} validation examples of {} tokens in {:.2f} s; scored targets {} and {}",
                 task->name(), task->options().dump(), args->opt.train_examples, args->opt.val_examples,
                 args->opt.context, seconds_since(t0), r.train_scored, r.val_scored);
    spdlog::info("vocabulary {} (set model.vocab_size to it), model.context {}", task->vocab_size(), args->opt.context);
    for (const auto& f : r.files) spdlog::info("wrote {}", f);
  });
}

void add_orbits(CLI::App& data) {
  auto args = std::make_shared<orbits::DataOptions>();
  CLI::App* cmd = data.add_subcommand(
      "orbits",
      "Simulate planetary systems (the orbital data of Vafa et al. 2025's physics probe; docs/orbits.md) as "
      "train/val token shards, each listed position's true force, separation and masses beside them "
      "(NAME_*.rows), and orbits.json");
  cmd->add_option("out_dir", args->out_dir, "Output directory")->required();
  cmd->add_option("--train-sequences", args->train_sequences, "Training sequences (systems)")
      ->required()
      ->check(between(1, 2147483647.0));
  cmd->add_option("--val-sequences", args->val_sequences, "Validation sequences")
      ->required()
      ->check(between(1, 2147483647.0));
  cmd->add_option("--seed", args->seed, "Seed: sequence i of a split depends on (seed, split, i) alone")
      ->capture_default_str();
  cmd->add_option("--name", args->name, "File name prefix")->capture_default_str();
  cmd->add_option("--bins", args->orbit.bins, "Position bins per coordinate (the source: 7000)")
      ->capture_default_str()
      ->check(between(2, 65534));
  cmd->add_option("--range", args->orbit.range, "The bins cover [-RANGE, RANGE] AU (the source: 50)")
      ->capture_default_str();
  cmd->add_option("--rows", args->orbit.rows,
                  "Rows per sequence: the dt row and ROWS-1 positions, 2 tokens each (the source: 1000)")
      ->capture_default_str()
      ->check(between(2, 1 << 20));
  cmd->add_option("--min-planets", args->orbit.min_planets, "Fewest planets per system")->capture_default_str();
  cmd->add_option("--max-planets", args->orbit.max_planets,
                  "Most planets per system (the source: 1..10; 1 for the "
                  "two-body force probe)")
      ->capture_default_str();
  cmd->add_option("--eta", args->orbit.eta, "Leapfrog step: at most ETA times the periapsis time scale")
      ->capture_default_str();
  cmd->callback([args] {
    const auto t0 = std::chrono::steady_clock::now();
    const orbits::DataResult r = orbits::write_orbit_data(*args);
    spdlog::info("orbits: {} training and {} validation sequences of {} tokens ({} and {} tokens) in {:.2f} s",
                 args->train_sequences, args->val_sequences, 1 + 2 * (args->orbit.rows - 1), r.train_tokens,
                 r.val_tokens, seconds_since(t0));
    spdlog::info(
        "leapfrog: relative energy drift max {:.2e}, median {:.2e}; angular momentum drift max {:.2e}; up to "
        "{} substeps per sample",
        r.max_energy_drift, r.median_energy_drift, r.max_momentum_drift, r.max_substeps);
    spdlog::info("vocabulary {} (set model.vocab_size to it)", orbits::vocab_size(args->orbit));
    for (const auto& f : r.files) spdlog::info("wrote {}", f);
  });
}

}  // namespace

void add_data(CLI::App& app) {
  CLI::App* data = app.add_subcommand("data", "Prepare datasets and tokenizers");
  data->require_subcommand(1);
  add_text(*data);
  add_train_tokenizer(*data);
  add_encode_decode(*data);
  add_synthetic(*data);
  add_orbits(*data);
}

}  // namespace gpt::cli
