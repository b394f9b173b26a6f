#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/run_options.h"
#include "cli/validators.h"
#include "config/attention.h"
#include "core/check.h"
#include "core/files.h"
#include "core/metrics.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "eval/calibrate.h"
#include "eval/extrapolation.h"
#include "eval/head_scale_fit.h"
#include "eval/kl_divergence.h"
#include "eval/longppl.h"
#include "eval/passkey.h"
#include "eval/shard_loss.h"
#include "eval/task_eval.h"
#include "tokenizer/tokenizer.h"
#include "train/model_io.h"
#include "model/block_parts.h"

namespace fs = std::filesystem;

namespace gpt::cli {
namespace {

struct EvalArgs {
  std::string checkpoint;
  std::vector<int> multiples;
  int64_t tokens = 0;
  std::string protocol;  // empty: the run's eval.protocol
  int stride = 0;
  int64_t span = 0;
  std::string data;
  std::string out;
  int threads = 0;
  RunOptions run;  // --device, --precision, --storage
  AttentionOverride attention;
  std::string task = "loss";
  // --kl-against REF|base: KL at 1x against another model, or the same one without the overrides
  std::string kl_against;
  // --longppl-evaluator REF|base: LongPPL's key tokens judged by REF
  std::string longppl_evaluator;
  double longppl_alpha = 2, longppl_beta = -2;
  // --calibrate
  std::string calibrate;
  int calibrate_on = 0;
  double calibrate_fraction = 0.25;
  int64_t calibrate_tokens = 0;
  HeadScaleFitOptions head_scale;  // --calibrate head_scale (its multiple and tokens come from the two above)
  // --task passkey
  std::vector<double> depths;
  int samples = 0;
  int digits = 0;
  std::string tokenizer;
  // --task SYNTHETIC: task.json (or its directory); default: beside data.train
  std::string task_file;
  // --context: a number selects the mean-loss mode's sequence length, names
  // are context-extension methods (attention.context_methods).
  std::string context_arg;
  // Mean loss on shards, batched as llm.c does (any of the three selects it).
  int context = 0;
  int batch = 0;
  int64_t batches = 0;
  bool shard_loss_mode() const { return context > 0 || batch > 0 || batches > 0; }
};

// Default batch size of the mean-loss mode: llm.c's default B.
constexpr int kDefaultLossBatch = 4;

// The run directory a checkpoint belongs to (RUN_DIR/checkpoints/step_N.bin),
// or empty for a checkpoint elsewhere.
fs::path run_dir_of(const std::string& ckpt) {
  const fs::path dir = fs::path(ckpt).parent_path();
  return dir.filename() == "checkpoints" ? dir.parent_path() : fs::path();
}

// RUN_DIR/eval/step_N.json; HF_DIR/eval/extrapolation.json for a Hugging
// Face model directory; elsewhere, beside the checkpoint.
std::string default_output(const std::string& ckpt) {
  std::error_code ec;
  if (fs::is_directory(ckpt, ec)) return (fs::path(ckpt) / "eval" / "extrapolation.json").string();
  const fs::path run = run_dir_of(ckpt);
  if (!run.empty()) return (run / "eval" / (fs::path(ckpt).stem().string() + ".json")).string();
  return (fs::path(ckpt).replace_extension(".extrapolation.json")).string();
}

std::string override_note(const AttentionOverride& o) {
  if (o.empty() && o.context_empty()) return "";
  return " (override at evaluation)";
}

// `gpt eval CKPT --context T --batch B [--batches K]`: one line, the mean loss.
void run_shard_loss(const EvalArgs& a, LoadedModel& lm) {
  GPT_CHECK(a.multiples.empty() && a.tokens == 0 && a.protocol.empty() && a.stride == 0 && a.span == 0,
            "eval: --multiples, --tokens, --protocol, --stride and --span belong to the 1x-16x evaluation; "
            "--context, --batch and --batches ask for the mean loss on shards; give one set or the other");
  const ModelConfig& mc = lm.config.model;
  const int T = a.context > 0 ? a.context : mc.context;
  const int B = a.batch > 0 ? a.batch : kDefaultLossBatch;
  GPT_CHECK(mc.position != "learned" || T <= mc.position_rows(), "eval: --context ", T, " exceeds the learned ",
            "position table of ", lm.path, " (", mc.position_rows(), " rows); use --context <= ", mc.position_rows());
  const std::string pattern = a.data.empty() ? lm.config.data.val : a.data;
  const TokenStream data(pattern, mc.vocab_size);
  spdlog::info("mean loss of {} on {} ({} shard(s), {} tokens): batches of {} x {}", lm.path, pattern,
               data.shards().size(), data.size(), B, T);
  const ShardLossResult r = shard_loss(*lm.model, data, T, B, a.batches);
  spdlog::info("{} batches of {} x {} ({} full batches in the shards)", r.batches, B, T, r.available);
  std::printf("val loss %.6f over %lld tokens\n", r.loss, static_cast<long long>(r.tokens));
  if (!a.out.empty()) {
    if (fs::path(a.out).has_parent_path()) fs::create_directories(fs::path(a.out).parent_path());
    write_json_file(a.out, {{"checkpoint", lm.path},
                            {"step", lm.progress.step},
                            {"data", pattern},
                            {"context", T},
                            {"batch", B},
                            {"batches", r.batches},
                            {"tokens", r.tokens},
                            {"loss", r.loss}});
    spdlog::info("result written to {}", a.out);
  }
}

// Writes a retrieval result (passkey or a synthetic task) with what ran:
// the checkpoint, the attention and context in use; to --out, else
// RUN_DIR/eval/PREFIX<checkpoint>.json (beside the checkpoint elsewhere).
// Prints the table.
void write_retrieval(const EvalArgs& a, const LoadedModel& lm, nlohmann::json j, const std::string& prefix,
                     const std::string& table) {
  j["checkpoint"] = lm.path;
  j["step"] = lm.progress.step;
  j["attention"] = attention_to_json(lm.config.attention, lm.model->attention());
  j["attention"]["override"] = !a.attention.empty();
  j["context"] = context_to_json(lm.model->attention());
  j["context"]["override"] = !a.attention.context_empty();
  j["layer_plan"] = layer_plan_to_json(lm.model->per_layer_attention());
  j["block"] = block_to_json(lm.config.model);
  j["optimizer"] = lm.config.train.optimizer;
  std::string out = a.out;
  if (out.empty()) {
    const fs::path run = run_dir_of(lm.path);
    const std::string name = prefix + fs::path(lm.path).stem().string() + ".json";
    out = (run.empty() ? fs::path(lm.path).parent_path() / name : run / "eval" / name).string();
  }
  if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
  write_json_file(out, j);
  std::cout << table;
  spdlog::info("results written to {}", out);
}

// `gpt eval CKPT --task text_passkey` (or `--task passkey` on a run without
// a synthetic task): exact-match retrieval per multiple and depth.
void run_passkey(const EvalArgs& a, LoadedModel& lm) {
  GPT_CHECK(!a.shard_loss_mode(), "eval: --task ", a.task, " does not take --context, --batch or --batches");
  const Config& rc = lm.config;
  PasskeyEvalConfig pc;
  pc.multiples = a.multiples.empty() ? rc.eval.multiples : a.multiples;
  for (int m : pc.multiples) GPT_CHECK(m >= 1, "eval: --multiples must be >= 1, got ", m);
  if (!a.depths.empty()) pc.depths = a.depths;
  for (double d : pc.depths) GPT_CHECK(d >= 0 && d <= 1, "eval: --passkey-depths must lie in [0, 1], got ", d);
  if (a.samples > 0) pc.samples = a.samples;
  pc.digits = a.digits > 0 ? a.digits : rc.data.passkey_digits;
  Config check = rc;
  check.eval.multiples = pc.multiples;
  check_eval_contexts(check.model, check.eval, rc.model.context);
  const std::string tok_spec = a.tokenizer.empty() ? rc.data.tokenizer : a.tokenizer;
  const auto tok = make_tokenizer(tok_spec);
  const std::string pattern = a.data.empty() ? rc.data.val : a.data;
  const TokenStream val(pattern, rc.model.vocab_size);
  spdlog::info("passkey retrieval of {} (step {}) on {}: {} digits, {} prompts per cell, tokenizer {}", lm.path,
               lm.progress.step, pattern, pc.digits, pc.samples, tok_spec);
  spdlog::info("attention: {}{}", attention_summary(rc.attention, lm.model->attention()), override_note(a.attention));
  spdlog::info("context extension: {}", context_summary(lm.model->attention()));
  if (!lm.model->per_layer_attention().front().kind.empty())
    spdlog::info("layer plan: {}", layer_plan_summary(lm.config.model));
  const PasskeyResult r = evaluate_passkey(*lm.model, val, *tok, pc, rc.model.context,
                                           static_cast<int64_t>(rc.train.batch_size) * rc.model.context);
  nlohmann::json j = r.to_json();
  j["data"] = pattern;
  j["tokenizer"] = tok_spec;
  write_retrieval(a, lm, j, "passkey_", r.table());
}

// The synthetic task of `--task NAME`: --task-file; else the task mixed into
// the run's training (data.mix_task, its ids above the text vocabulary);
// else task.json in the directory of the run's training shards. Null when
// none applies. *source names where it came from.
std::unique_ptr<SyntheticTask> synthetic_task_of(const EvalArgs& a, const Config& rc, nlohmann::json* file,
                                                 std::string* source) {
  if (a.task_file.empty() && rc.data.mix_task == a.task) {
    const auto tok = make_tokenizer(rc.data.tokenizer);
    *source = "data.mix_task";
    return make_mixed_task(rc.data.mix_task, rc.data.mix_options, static_cast<int>(tok->vocab_size()));
  }
  std::string path = a.task_file;
  if (path.empty()) {
    const fs::path beside = fs::path(rc.data.train).parent_path() / kSyntheticTaskFile;
    if (!fs::exists(beside)) return nullptr;
    path = beside.string();
  }
  *source = path;
  return load_synthetic_task(path, file);
}

// `gpt eval CKPT --task mqar|copy|...`: exact match and token accuracy per
// multiple (and depth) on the synthetic task the run was trained on.
void run_synthetic(const EvalArgs& a, LoadedModel& lm, const SyntheticTask& task, const nlohmann::json& tf,
                   const std::string& source) {
  GPT_CHECK(!a.shard_loss_mode(), "eval: --task ", a.task, " does not take --context T, --batch or --batches");
  GPT_CHECK(a.digits == 0 && a.tokenizer.empty(),
            "eval: --passkey-digits and --tokenizer belong to the text passkey "
            "(--task text_passkey); a synthetic task's options are in ",
            source);
  const Config& rc = lm.config;
  GPT_CHECK(task.name() == a.task, "eval: --task ", a.task, " but ", source, " describes the task ", task.name(),
            "; give --task ", task.name(), " or another --task-file");
  TaskEvalConfig tc;
  tc.multiples = a.multiples.empty() ? rc.eval.multiples : a.multiples;
  if (!a.depths.empty()) tc.depths = a.depths;
  if (a.samples > 0) tc.samples = a.samples;
  Config check = rc;
  check.eval.multiples = tc.multiples;
  check_eval_contexts(check.model, check.eval, rc.model.context);
  if (tf.contains("context") && tf["context"] != rc.model.context)
    spdlog::warn("{} was generated for context {}, the model was trained with {}; multiples are of the model's", source,
                 tf["context"].dump(), rc.model.context);
  spdlog::info("task {} {} ({}) of {} (step {}): {} examples per cell", task.name(), task.options().dump(), source,
               lm.path, lm.progress.step, tc.samples);
  spdlog::info("attention: {}{}", attention_summary(rc.attention, lm.model->attention()), override_note(a.attention));
  spdlog::info("context extension: {}", context_summary(lm.model->attention()));
  if (!lm.model->per_layer_attention().front().kind.empty())
    spdlog::info("layer plan: {}", layer_plan_summary(lm.config.model));
  const TaskEvalResult r = evaluate_task(*lm.model, task, tc, rc.model.context,
                                         static_cast<int64_t>(rc.train.batch_size) * rc.model.context);
  nlohmann::json j = r.to_json();
  j["task_file"] = source;
  write_retrieval(a, lm, j, "task_" + task.name() + "_", r.table());
}

// --context T (digits: the mean-loss mode) or --context METHOD[,METHOD...].
void parse_context_arg(EvalArgs& a) {
  const std::string& v = a.context_arg;
  if (v.empty()) return;
  if (v.find_first_not_of("0123456789") == std::string::npos) {
    long long t = 0;
    try {
      t = std::stoll(v);
    } catch (const std::exception&) {
      t = 0;
    }
    GPT_CHECK(t >= 1 && t <= (1 << 24), "eval: --context ", v, ": a sequence length must lie in 1..", 1 << 24);
    a.context = static_cast<int>(t);
    return;
  }
  size_t start = 0;
  while (start <= v.size()) {
    const size_t comma = v.find(',', start);
    const std::string name = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    GPT_CHECK(!name.empty(), "eval: --context \"", v, "\" has an empty method name; valid: ", context_method_names());
    a.attention.context_methods.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  context_methods_to_json(a.attention.context_methods);  // unknown names fail here, before loading
}

// A second model beside the evaluated one (--kl-against, --longppl-evaluator):
// "base" is the evaluated checkpoint as its run configured it (no --attention
// / --context overrides, no calibration); else another run, checkpoint or
// Hugging Face directory. Returns it and how the reports name it.
std::pair<LoadedModel, std::string> load_reference(const EvalArgs& a, const std::string& spec) {
  const bool base = spec == "base";
  LoadedModel m = load_model(base ? a.checkpoint : spec, {}, a.run.device, a.run.precision, a.run.storage,
                             a.run.hf_context);
  std::string name = base ? "base (" + m.path + " without the overrides)" : m.path;
  return {std::move(m), std::move(name)};
}

void run_eval(EvalArgs a) {
  if (a.threads > 0) omp_set_num_threads(a.threads);
  parse_context_arg(a);
  GPT_CHECK(a.calibrate.empty() || (a.task == "loss" && !a.shard_loss_mode()),
            "eval: --calibrate belongs to the extrapolation evaluation (not --task ", a.task,
            " or the mean-loss mode of --context T)");
  {  // the fit's options without the fit
    const HeadScaleFitOptions d;
    const HeadScaleFitOptions& h = a.head_scale;
    GPT_CHECK(a.calibrate == "head_scale" || (h.steps == d.steps && h.lr == d.lr && h.batch == d.batch &&
                                               h.floor == d.floor && h.init == d.init),
              "eval: --calibrate-steps, --calibrate-lr, --calibrate-batch, --head-scale-floor and --head-scale-init "
              "belong to --calibrate head_scale");
  }

  GPT_CHECK((a.kl_against.empty() && a.longppl_evaluator.empty()) || (a.task == "loss" && !a.shard_loss_mode()),
            "eval: --kl-against and --longppl-evaluator belong to the extrapolation evaluation (not --task ", a.task,
            " or the mean-loss mode of --context T)");
  if (!a.multiples.empty()) a.attention.multiples = a.multiples;
  LoadedModel lm = load_model(a.checkpoint, a.attention, a.run.device, a.run.precision, a.run.storage,
                                a.run.hf_context);
  if (a.task != "loss") {
    // text_passkey: the key in the run's validation text. A synthetic task
    // from its task.json or data.mix_task; passkey on a run with neither
    // falls back to the text passkey.
    if (a.task == kTextPasskey) {
      GPT_CHECK(a.task_file.empty(), "eval: --task-file belongs to a synthetic task, not --task ", kTextPasskey);
      return run_passkey(a, lm);
    }
    nlohmann::json tf;
    std::string source;
    if (const auto task = synthetic_task_of(a, lm.config, &tf, &source)) return run_synthetic(a, lm, *task, tf, source);
    if (a.task == "passkey") {
      spdlog::info(
          "--task passkey: the run has no synthetic passkey (no {}, data.mix_task {}): the text passkey, "
          "as --task {}",
          kSyntheticTaskFile, lm.config.data.mix_task, kTextPasskey);
      return run_passkey(a, lm);
    }
    fail("eval: --task ", a.task, " needs the task's ", kSyntheticTaskFile,
         " (gpt data synthetic writes it beside "
         "the shards) or a run that mixed it into training (data.mix_task); none is beside the run's data.train (",
         lm.config.data.train, ") and data.mix_task is ", lm.config.data.mix_task, ": give --task-file");
  }
  GPT_CHECK(a.task_file.empty(), "eval: --task-file belongs to --task with a synthetic task");
  GPT_CHECK(a.depths.empty() && a.samples == 0 && a.digits == 0 && a.tokenizer.empty(),
            "eval: --depths, --samples, --passkey-digits and --tokenizer belong to --task passkey or a synthetic task");
  if (a.shard_loss_mode()) return run_shard_loss(a, lm);
  // The flags are checked by the config schema's own rules.
  Config cfg = lm.config;
  if (!a.multiples.empty()) cfg.eval.multiples = a.multiples;
  if (a.tokens > 0) cfg.eval.tokens = a.tokens;
  if (!a.protocol.empty()) cfg.eval.protocol = a.protocol;
  if (a.stride > 0) cfg.eval.stride = a.stride;
  if (a.span > 0) cfg.eval.span = a.span;
  try {
    validate_config(cfg);
  } catch (const Error& e) {
    fail("eval: --multiples / --tokens / --protocol / --stride / --span: ", e.what());
  }
  GPT_CHECK(a.stride == 0 || cfg.eval.protocol == "sliding",
            "eval: --stride belongs to --protocol sliding (the "
            "protocol is ",
            cfg.eval.protocol, ")");
  const EvalConfig& ec = cfg.eval;
  const std::string pattern = a.data.empty() ? lm.config.data.val : a.data;
  const int T = lm.config.model.context;
  spdlog::info("evaluating {} (step {}) on {}", lm.path, lm.progress.step, pattern);
  const TokenStream full(pattern, lm.config.model.vocab_size);
  spdlog::info("attention: {}{}", attention_summary(lm.config.attention, lm.model->attention()),
               override_note(a.attention));
  spdlog::info("context extension: {}", context_summary(lm.model->attention()));
  if (!lm.model->per_layer_attention().front().kind.empty())
    spdlog::info("layer plan: {}", layer_plan_summary(lm.config.model));
  const int64_t batch_tokens = static_cast<int64_t>(lm.config.train.batch_size) * T;
  const std::optional<EvalText> text =
      load_eval_text(lm.config.data.tokenizer, lm.config.model.vocab_size, ec, lm.config.data.mix_task != "none");
  const EvalText* text_ptr = text ? &*text : nullptr;
  // --calibrate: the first calibrate_fraction of the validation stream fits
  // the knob, the rest is evaluated (the two never share a token).
  nlohmann::json calibration;
  TokenStream val = full;
  std::unique_ptr<ExtrapolationResult> before;
  if (!a.calibrate.empty()) {
    check_calibration_knob(lm.model->attention(), a.calibrate);
    const int m = a.calibrate_on > 0 ? a.calibrate_on : ec.multiples.back();
    GPT_CHECK(a.calibrate_fraction > 0 && a.calibrate_fraction < 1,
              "eval: --calibrate-fraction must lie in (0, 1), got ", a.calibrate_fraction);
    const uint64_t split = static_cast<uint64_t>(a.calibrate_fraction * static_cast<double>(full.size()));
    const int64_t L = static_cast<int64_t>(m) * T;
    GPT_CHECK(split >= static_cast<uint64_t>(L) + 1, "eval: the calibration split (", a.calibrate_fraction, " of ",
              full.size(), " validation tokens = ", split, ") cannot hold one sequence of ", L,
              " tokens at --calibrate-on ", m, "; raise --calibrate-fraction or lower --calibrate-on");
    const TokenStream calib = full.slice(0, split);
    val = full.slice(split, full.size());
    const int64_t ctokens =
        a.calibrate_tokens > 0 ? a.calibrate_tokens : std::min<int64_t>(ec.tokens, static_cast<int64_t>(split) - 1);
    spdlog::info("calibrating {} at {}x on validation tokens [0, {}) ({} scored per probe); evaluating on [{}, {})",
                 a.calibrate, m, split, ctokens, split, full.size());
    before =
        std::make_unique<ExtrapolationResult>(evaluate_extrapolation(*lm.model, val, ec, T, batch_tokens, text_ptr));
    if (a.calibrate == "head_scale") {
      HeadScaleFitOptions ho = a.head_scale;
      ho.multiple = m;
      ho.tokens = ctokens;
      ho.seed = lm.config.train.seed;
      const int every = std::max(1, ho.steps / 20);
      const HeadScaleFit fit = fit_head_scales(*lm.model, calib, T, batch_tokens, ho, [&](int s, double loss, double mean) {
        if (s % every == 0 || s == ho.steps)
          spdlog::info("head_scale step {}/{}: loss {:.4f} at {}x, mean tau {:.4f}", s, ho.steps, loss, m, mean);
      });
      const auto [lo, hi] = std::minmax_element(fit.fitted.begin(), fit.fitted.end());
      spdlog::info("calibrated head_scale: tau in [{:.3f}, {:.3f}] (loss {:.4f} at {}x; {:.4f} before)", *lo, *hi,
                   fit.fitted_loss, m, fit.initial_loss);
      calibration = fit.to_json();
    } else {
      const CalibrationResult cr =
          calibrate(*lm.model, calib, a.calibrate, m, ctokens, T, batch_tokens, 14, [&](double v, double loss) {
            spdlog::info("calibrate {} = {:.4f}: loss {:.4f} at {}x", a.calibrate, v, loss, m);
          });
      spdlog::info("calibrated {} = {:.4f} (loss {:.4f} at {}x; {:.4f} at the run's {:.4f})", a.calibrate, cr.fitted,
                   cr.fitted_loss, m, cr.default_loss, cr.default_value);
      calibration = cr.to_json();
    }
    calibration["calibration_tokens"] = {0, split};
    calibration["evaluation_tokens"] = {split, full.size()};
  }
  // LongPPL: the key tokens of this evaluation's windows, judged once by the
  // evaluator with the longest evaluated context against a short one of T.
  std::optional<KeyTokens> key;
  if (!a.longppl_evaluator.empty()) {
    auto [ev, ev_name] = load_reference(a, a.longppl_evaluator);
    const int long_context = ec.multiples.back() * T;
    if (ev.config.model.context < long_context)
      spdlog::warn("LongPPL: the evaluator {} was trained at {} tokens, shorter than the long context {} it judges "
                   "with; its long-context losses are extrapolated ({})",
                   ev.path, ev.config.model.context, long_context, context_summary(ev.model->attention()));
    const EvalLayout layout = eval_layout(val, ec, T, text_ptr ? text_ptr->separator : -1);
    key = select_key_tokens(*ev.model, val, layout, T, long_context, a.longppl_alpha, a.longppl_beta);
    key->evaluator = ev_name;
  }
  ExtrapolationResult r = evaluate_extrapolation(*lm.model, val, ec, T, batch_tokens, text_ptr, key ? &*key : nullptr);
  std::optional<KlResult> kl;
  if (!a.kl_against.empty()) {
    auto [ref, ref_name] = load_reference(a, a.kl_against);
    spdlog::info("KL at 1x against {} ({})", ref.path, context_summary(ref.model->attention()));
    kl = evaluate_kl(*lm.model, *ref.model, val, r.layout, T);
    kl->reference = ref_name;
  }
  r.attention = attention_to_json(lm.config.attention, lm.model->attention());
  r.attention["override"] = !a.attention.empty();
  nlohmann::json j = r.to_json();
  j["context"] = context_to_json(lm.model->attention());
  j["context"]["override"] = !a.attention.context_empty();
  j["optimizer"] = lm.config.train.optimizer;
  if (!calibration.is_null()) {
    j["calibration"] = calibration;
    j["uncalibrated"] = before->to_json()["multiples"];
  }
  if (kl) j["kl_at_1x"] = kl->to_json();
  if (key) j["longppl"] = key->to_json();
  j["checkpoint"] = lm.path;
  j["step"] = lm.progress.step;
  j["data"] = pattern;
  const std::string out = a.out.empty() ? default_output(lm.path) : a.out;
  if (fs::path(out).has_parent_path()) fs::create_directories(fs::path(out).parent_path());
  write_json_file(out, j);
  // The run's own log gets the event too, so metrics.jsonl tells its whole story.
  const fs::path run = run_dir_of(lm.path);
  if (!run.empty() && fs::exists(run / "metrics.jsonl"))
    MetricsLog((run / "metrics.jsonl").string())
        .write({{"event", "eval"}, {"source", "gpt eval"}, {"step", lm.progress.step}, {"results", j}});
  if (before) {
    std::cout << "uncalibrated, on the evaluation split:\n" << before->table() << "calibrated (" << a.calibrate;
    if (a.calibrate == "head_scale") {
      std::cout << ": tau per layer and head";
      for (const auto& layer : calibration["fitted"]) {
        std::cout << " [";
        for (size_t h = 0; h < layer.size(); ++h) {
          char v[32];
          std::snprintf(v, sizeof v, "%s%.3f", h ? " " : "", layer[h].get<double>());
          std::cout << v;
        }
        std::cout << "]";
      }
    } else {
      std::cout << " = " << calibration["fitted"].get<double>();
    }
    std::cout << "), on the evaluation split:\n";
  }
  std::cout << r.table() << "attention diagnostics (mean over heads and rows, per layer):\n" << r.diagnostics_table();
  if (key) std::cout << r.longppl_table();
  if (kl) std::cout << kl->table();
  spdlog::info("results written to {}", out);
}

}  // namespace

void add_eval(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "Evaluate a checkpoint: loss at multiples of its context, or (--context/--batch) its mean loss on shards");
  cmd->add_option("checkpoint", args->checkpoint,
                  "Checkpoint file, a run directory (its latest checkpoint), or a Hugging Face model directory")
      ->required();
  cmd->add_option("--multiples", args->multiples, "Context multiples to evaluate (default: the run's eval.multiples)")
      ->delimiter(',');
  cmd->add_option("--tokens", args->tokens, "Validation tokens per multiple (default: the run's eval.tokens)")
      ->check(positive());
  cmd->add_option("--protocol", args->protocol,
                  "chunks: non-overlapping sequences of m*T (default: the run's eval.protocol); sliding: windows of "
                  "m*T advanced by --stride, each scoring its last --stride positions; documents: windows opening "
                  "documents (after an end-of-text) that hold a whole --span (README: Evaluation protocols)")
      ->check(CLI::IsMember(eval_protocols()));
  cmd->add_option("--stride", args->stride,
                  "Sliding protocol: stride S in tokens (default: the run's eval.stride, 0 = T)")
      ->check(positive());
  cmd->add_option("--span", args->span,
                  "Tokens of each scored window, the same at every multiple (default: the run's eval.span, "
                  "0 = 16*T); two results score the same tokens when they share data, span and tokens "
                  "(README: Evaluation protocols)")
      ->check(positive());
  cmd->add_option("--data", args->data, "Glob pattern of validation shards (default: the run's data.val)");
  cmd->add_option("--out", args->out, "Output JSON (default: RUN_DIR/eval/<checkpoint>.json; mean-loss mode: none)");
  std::vector<std::string> presets;
  for (const auto& p : kAttentionPresets) presets.push_back(p.name);
  cmd->add_option("--attention", args->attention.preset,
                  "Evaluate with this attention preset instead of the trained one (training-free; must be "
                  "compatible: same score type and learned parameters)")
      ->check(CLI::IsMember(presets));
  cmd->add_option("--attention-set", args->attention.sets,
                  "Override one key of the attention section, e.g. scale=infoscale or p=15 (repeatable; applied "
                  "after --attention)");
  cmd->add_option(
      "--context", args->context_arg,
      "METHOD[,METHOD...]: evaluate with these context-extension methods instead of the run's (training-free; "
      "replaces its context section): " +
          context_method_names() +
          " (docs: docs/context_extension.md). Or a number T: the mean-loss mode's sequence "
          "length (default: the model's context); prints `val loss X over N tokens`");
  cmd->add_option("--kl-against", args->kl_against,
                  "KL at 1x (llama.cpp's --kl-divergence): compare the next-token distributions at the training "
                  "context with those of REF (a run directory, checkpoint or Hugging Face directory with the same "
                  "vocabulary), or with 'base', the same model without --attention/--context; reports mean KL, "
                  "same top token and delta p with standard errors");
  cmd->add_option("--longppl-evaluator", args->longppl_evaluator,
                  "LongPPL (Fang et al. 2025): the loss over the key tokens, those whose log-probability under "
                  "REF (a model reading the longest evaluated context; 'base' = this model without the overrides) "
                  "gains more than alpha from the long context over a short one of T, and exceeds beta");
  cmd->add_option("--longppl-alpha", args->longppl_alpha, "LongPPL's alpha: the least log-probability gain (default 2)");
  cmd->add_option("--longppl-beta", args->longppl_beta,
                  "LongPPL's beta: the least long-context log-probability (default -2)");
  cmd->add_option("--calibrate", args->calibrate,
                  "Fit before evaluating, on a held-out calibration split: one scalar by a golden-section search, "
                  "temperature (a global logit scale), yarn_attn_factor (YaRN's t; needs --context yarn or yarn_temp), "
                  "ntk_factor (needs --context ntk) or swan_base (SWAN-GPT's a; needs --context swan_temp); or "
                  "head_scale: HeadScale's temperature per layer and head, by Adam on the loss at --calibrate-on "
                  "with every other parameter frozen (needs --context "
                  "headscale, or --context-set head_scale=1 to keep the run's context)")
      ->check(CLI::IsMember(calibration_knobs()));
  cmd->add_option("--calibrate-steps", args->head_scale.steps, "head_scale: optimizer steps (default 200)")
      ->check(positive());
  cmd->add_option("--calibrate-lr", args->head_scale.lr,
                  "head_scale: Adam's peak learning rate, warm-up over a tenth of the steps then a cosine to a "
                  "tenth (default 0.05)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--calibrate-batch", args->head_scale.batch,
                  "head_scale: windows of --calibrate-on times T tokens per step (default 1)")
      ->check(positive());
  cmd->add_option("--head-scale-floor", args->head_scale.floor,
                  "head_scale: every tau kept >= this after each step (default 1, the authors' constraint; 0 = none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--head-scale-init", args->head_scale.init,
                  "head_scale: every tau starts here, e.g. a fitted --calibrate temperature (default: the model's "
                  "own, 1 for a checkpoint trained without HeadScale)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--calibrate-on", args->calibrate_on,
                  "Calibration: the multiple whose mean loss is minimised (default: the largest evaluated)")
      ->check(positive());
  cmd->add_option("--calibrate-fraction", args->calibrate_fraction,
                  "Calibration: the share of the validation stream, from its start, held out to fit on; the "
                  "evaluation scores only the rest (default 0.25)");
  cmd->add_option("--calibrate-tokens", args->calibrate_tokens,
                  "Calibration: tokens scored per probe (default: eval.tokens, at most the calibration split)")
      ->check(positive());
  cmd->add_option("--context-set", args->attention.context_sets,
                  "Override one key of the context section, e.g. factor=16, window=256, attn_factor=1 (repeatable; "
                  "applied after --context; gpt info --config-keys lists them)");
  cmd->add_option("--batch", args->batch, "Mean-loss mode: rows B per batch, read as llm.c reads shards (default 4)")
      ->check(positive());
  cmd->add_option("--batches", args->batches,
                  "Mean-loss mode: batches K (default: every full batch of the shards; more wraps around as in llm.c)")
      ->check(positive());
  cmd->add_option("--threads", args->threads, "OpenMP threads (default: all cores)")->check(non_negative());
  std::vector<std::string> tasks = {"loss", kTextPasskey};
  std::string synthetic;
  for (const auto& t : synthetic_task_names()) {
    tasks.push_back(t);
    synthetic += (synthetic.empty() ? "" : ", ") + t;
  }
  cmd->add_option("--task", args->task,
                  "loss: validation loss at each multiple (default); text_passkey: exact-match retrieval of a key "
                  "hidden in the run's validation text per multiple and depth (docs/evaluation.md); a synthetic "
                  "task (" +
                      synthetic +
                      ") on a run trained on gpt data synthetic data or mixing it (data.mix_task): exact match and "
                      "token accuracy of its answers per multiple (and depth), examples of m*T tokens; passkey on a "
                      "run with no synthetic passkey is text_passkey")
      ->check(CLI::IsMember(tasks));
  cmd->add_option("--task-file", args->task_file,
                  "Synthetic task: its task.json, or the directory holding it (default: beside the run's data.train)");
  cmd->add_option("--depths,--passkey-depths", args->depths,
                  "Passkey and the synthetic tasks with a depth: depths of the key (or chain) in the haystack, "
                  "0 = start, 1 = just before the question (default 0,0.25,0.5,0.75,1)")
      ->delimiter(',');
  cmd->add_option("--samples,--passkey-samples", args->samples,
                  "Passkey: prompts per (multiple, depth) cell (default 20); synthetic tasks: examples per cell "
                  "(default 50)")
      ->check(positive());
  cmd->add_option("--passkey-digits", args->digits,
                  "Passkey: digits of the key (default: the run's data.passkey_digits)")
      ->check(between(1, 32));
  cmd->add_option(
      "--tokenizer", args->tokenizer,
      std::string("Passkey: tokenizer of the model (default: the run's data.tokenizer): ") + kTokenizerSpecHelp);
  add_run_options(cmd, args->run);
  cmd->callback([args] { run_eval(*args); });
}

}  // namespace gpt::cli
