#include "train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include <spdlog/spdlog.h>

#include "config/attention.h"
#include "config/layer_plan.h"
#include "core/check.h"
#include "core/files.h"
#include "core/metrics.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "eval/passkey.h"
#include "tokenizer/tokenizer.h"
#include "dist/communicator.h"
#include "eval/extrapolation.h"
#include "model/gpt.h"
#include "train/model_io.h"
#include "train/optimizer.h"
#include "train/position_ids.h"
#include "train/schedule.h"
#include "model/block_parts.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted.store(true); }

// Turns SIGINT, SIGTERM (what cluster schedulers such as SLURM and
// Kubernetes send before they kill a job, and what mpirun sends every rank on
// a Ctrl-C) and SIGUSR1 (which mpirun forwards to every rank) into a flag for
// the lifetime of the guard (the training loop and its final save): the step
// finishes, a checkpoint is saved, the run exits with kExitInterrupted. The
// previous handlers are restored however the loop exits.
class SigintGuard {
 public:
  SigintGuard() {
    g_interrupted = false;
    for (int i = 0; i < 3; ++i) previous_[i] = std::signal(kSignals[i], on_sigint);
  }
  ~SigintGuard() {
    for (int i = 0; i < 3; ++i) std::signal(kSignals[i], previous_[i]);
  }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGUSR1};
  void (*previous_[3])(int) = {};
};

std::string format_duration(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

// Name of the first parameter tensor whose gradient (or value) holds a NaN or inf.
std::string first_nonfinite(Model<float>& model, const float* base) {
  for (const ParamSpec& s : model.layout().specs)
    if (!std::isfinite(model.backend().sum_squares(base + s.offset, s.numel()))) return s.name;
  return "(none)";
}

// train.threads, or with 0 the OpenMP default, except that ranks sharing a
// machine (mpirun -np N on one node) split its cores unless OMP_NUM_THREADS
// says otherwise.
void set_thread_count(int threads) {
  if (threads > 0) {
    omp_set_num_threads(threads);
    return;
  }
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int local_ranks = local ? std::atoi(local) : 1;
  if (local_ranks > 1 && !std::getenv("OMP_NUM_THREADS"))
    omp_set_num_threads(std::max(1, omp_get_num_procs() / local_ranks));
}

}  // namespace

int run_training(const Config& cfg, const std::string& resume_checkpoint) {
  // Data parallelism: every rank trains on rows [rank*Bl, (rank+1)*Bl) of each
  // global micro-batch of B rows; gradients and losses are averaged across
  // ranks; rank 0 alone logs, evaluates and writes files.
  // Before the backend: for "cuda" under an MPI launcher this makes the NCCL
  // communicator, which picks this rank's GPU (the backend uses the current one).
  dist::Communicator& comm = dist::world_for_device(cfg.run.device);
  const int nranks = comm.size(), rank = comm.rank();
  // Several ranks, or one GPU through NCCL (GPT_DIST_NCCL=1, to check that path).
  const bool data_parallel = nranks > 1 || (cfg.run.device == "cuda" && dist::nccl_for_one_rank());
  const bool lead = rank == 0;
  set_thread_count(cfg.train.threads);
  const ModelConfig& mc = cfg.model;
  const TrainConfig& tc = cfg.train;
  const int B = tc.batch_size, T = mc.context;
  GPT_CHECK(B % nranks == 0, "train.batch_size ", B, " (the global batch) must be divisible by the number of ranks ",
            nranks, "; each rank trains on batch_size / ranks sequences of every micro-batch");
  const int Bl = B / nranks;
  check_eval_contexts(mc, cfg.eval, T);
  // The device first: a missing GPU fails before anything is read or written.
  std::unique_ptr<Backend<float>> backend = make_backend(cfg.run.device, cfg.run.precision);

  const std::string run_dir = cfg.run.dir;
  // One trainer per run directory: a resumed (or otherwise existing) run is
  // locked before anything is read; a fresh one as its directory is made.
  std::unique_ptr<DirLock> lock;
  if (lead && fs::is_directory(run_dir)) lock = std::make_unique<DirLock>(run_dir, "train");
  auto check_fresh = [&] {
    if (resume_checkpoint.empty())
      GPT_CHECK(!fs::exists(fs::path(run_dir) / "checkpoints" / "latest"), "run directory ", run_dir,
                " already holds a training run; continue it with --resume ", run_dir, ", or choose another run.dir");
  };
  check_fresh();
  // Data first: bad shards or an infeasible evaluation fail before anything
  // is written or trained.
  TokenStream val(cfg.data.val, mc.vocab_size);
  check_eval_feasible(val.size(), cfg.eval, T);
  // Bits per byte and the documents protocol's separator; a documents layout
  // the validation data cannot hold fails here, not after training.
  const std::optional<EvalText> eval_text =
      load_eval_text(cfg.data.tokenizer, mc.vocab_size, cfg.eval, cfg.data.mix_task != "none");
  // The end-of-text id that opens documents, for the document mask and
  // windows aligned to documents (docs/training_for_length.md).
  const bool doc_mask = tc.document_mask == "on", doc_windows = cfg.data.windows == "documents";
  int32_t separator = -1;
  if (doc_mask || doc_windows) {
    GPT_CHECK(eval_text && eval_text->separator >= 0,
              doc_mask ? "train.document_mask = \"on\"" : "data.windows = \"documents\"",
              " needs the end-of-text id of data.tokenizer (", cfg.data.tokenizer,
              "), which opens every document; it could not be found");
    separator = eval_text->separator;
  }
  DataLoader loader(cfg.data.train, mc.vocab_size, B, T, cfg.data.order == "shuffle", tc.seed,
                    doc_windows ? separator : -1);
  if (cfg.eval.protocol == "documents") eval_layout(val, cfg.eval, T, eval_text->separator);
  // The shortest training windows (the length schedule's first stage).
  const int shortest = training_length_at(tc, T, 0);
  // Passkey examples mixed into training (data.passkey_fraction).
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<PasskeyMixer> passkey;
  if (cfg.data.passkey_fraction > 0) {
    tokenizer = make_tokenizer(cfg.data.tokenizer);
    GPT_CHECK(static_cast<int64_t>(tokenizer->vocab_size()) <= mc.vocab_size, "data.tokenizer ", cfg.data.tokenizer,
              " has ", tokenizer->vocab_size(), " ids, more than model.vocab_size ", mc.vocab_size);
    passkey = std::make_unique<PasskeyMixer>(*tokenizer, cfg.data.passkey_digits, cfg.data.passkey_fraction, tc.seed);
    passkey->check_context(shortest);  // before anything is written
  }
  // Training-time position ids (train.positions; plain makes none unless
  // they restart per document; docs/training_for_length.md).
  const PositionIdOptions pos_opts = position_id_options(tc, T);
  const bool restart = tc.document_positions == "restart";
  const bool with_ids = pos_opts.kind != PositionIds::Plain || restart;
  // Synthetic-task examples mixed into training (data.mix_task), their ids
  // above the text vocabulary of data.tokenizer.
  std::unique_ptr<SyntheticMixer> mixer;
  if (cfg.data.mix_task != "none") {
    if (!tokenizer) tokenizer = make_tokenizer(cfg.data.tokenizer);
    mixer = std::make_unique<SyntheticMixer>(cfg.data.mix_task, cfg.data.mix_options, cfg.data.mix_fraction,
                                             static_cast<int>(tokenizer->vocab_size()), tc.seed);
    mixer->check(shortest, mc.vocab_size);  // before anything is written
  }
  // The model's memory, before anything is written (an allocation that fails leaves no run behind).
  const AttentionSpec attn = resolve_attention(cfg);
  const std::unique_ptr<Model<float>> model_ptr = make_model(mc, attn, std::move(backend), cfg.run.storage);
  Model<float>& model = *model_ptr;

  // A fresh run starts a fresh log (a crashed attempt may have left one behind);
  // a resumed run appends. After a resume from an older checkpoint the steps
  // past it appear twice: readers take the last record of a step.
  std::unique_ptr<MetricsLog> metrics;
  if (lead) {
    fs::create_directories(run_dir);
    if (!lock) {
      lock = std::make_unique<DirLock>(run_dir, "train");
      check_fresh();  // again under the lock: another trainer may have started it meanwhile
    }
    write_json_file((fs::path(run_dir) / "config.json").string(), config_to_json(cfg));
    metrics = std::make_unique<MetricsLog>((fs::path(run_dir) / "metrics.jsonl").string(), !resume_checkpoint.empty());
  }

  Optimizer<float> opt(model, tc, &comm);

  TrainProgress progress;
  if (resume_checkpoint.empty()) {
    model.init(tc.seed);
    if (!tc.init_from.empty()) {
      const InitFromSummary init = init_from_checkpoint(model, tc.init_from);
      std::string kept;
      for (const auto& k : init.kept) kept += (kept.empty() ? "" : ", ") + k;
      spdlog::info("initialised {} parameter tensors from {}; freshly initialised: {}", init.copied.size(),
                   tc.init_from, kept.empty() ? "(none)" : kept);
    }
  } else {
    CheckpointReader ckpt(resume_checkpoint);
    restore_checkpoint(ckpt, model, &opt);
    progress = checkpoint_progress(ckpt.meta(), resume_checkpoint);
    loader.set_state(progress.loader);
    spdlog::info("resumed from {} at step {}", resume_checkpoint, progress.step);
  }
  spdlog::info("model: {} layers, {} heads, {} channels, context {}, {} positions, {:.3f}M parameters", mc.n_layer,
               mc.n_head, mc.n_embd, T, mc.position, model.num_params() / 1e6);
  spdlog::info("block: {}", block_summary(mc));
  spdlog::info("attention: {}", attention_summary(cfg.attention, attn));
  spdlog::info("context extension: {}", context_summary(attn));
  spdlog::info("{}", opt.summary());
  if (tc.lr_schedule == "wsd")
    spdlog::info("learning rate: warmup-stable-decay, {:.3g} from step {} to {}, then linear to {:.3g} at step {}",
                 tc.lr, tc.warmup_steps + 1, wsd_decay_start(tc) + 1, tc.lr_min, tc.steps);
  if (mc.layer_plan != "none" || !mc.layer_pattern.empty()) spdlog::info("layer plan: {}", layer_plan_summary(mc));
  if (cfg.run.device == "cuda")
    spdlog::info("device: {} on {}", model.backend().name(), cuda_device_name());
  else if (cfg.run.storage != "fp32")
    spdlog::info("device: {}", model.backend().name());
  spdlog::info("data: {} training tokens ({} sequences per epoch), {} validation tokens; {} threads",
               loader.stream().size(), loader.sequences_per_epoch(), val.size(), omp_get_max_threads());
  if (passkey)
    spdlog::info("data: {:.0f}% of training sequences become {}-digit passkey examples ({} tokenizer)",
                 100 * cfg.data.passkey_fraction, cfg.data.passkey_digits, cfg.data.tokenizer);
  if (mixer)
    spdlog::info("data: {:.0f}% of training sequences become {} examples {} (ids {}..{}), their answers scored alone",
                 100 * cfg.data.mix_fraction, mixer->task().name(), mixer->task().options().dump(),
                 mixer->task().base(), mixer->task().vocab_size() - 1);
  if (data_parallel) {
    // Every rank initialised or loaded the same parameters; rank 0's copy is
    // made everyone's so that nothing can start them apart.
    comm.broadcast(model.params(), model.num_params(), 0);
    spdlog::info("data parallel: {} ranks ({}), {} of the {} sequences of each micro-batch per rank{}{}", nranks,
                 comm.name(), Bl, B, opt.sharded() ? ", ZeRO-1 (optimizer state sharded)" : "",
                 tc.overlap_reduce ? ", gradient all-reduce overlapped with the backward pass" : "");
  }

  // Collective (the moments are gathered under ZeRO-1); rank 0 writes, and
  // the others wait for it.
  int last_saved = resume_checkpoint.empty() ? -1 : progress.step;  // the newest checkpoint on disk
  auto save = [&](const TrainProgress& p) {
    // Read from backend memory as it is written (only ZeRO-1's moments are
    // gathered first, on every rank).
    const CheckpointState state = checkpoint_state(model, &opt, cfg, p);
    last_saved = p.step;
    if (lead) {
      save_run_checkpoint(run_dir, p.step, state);
      metrics->write({{"event", "checkpoint"}, {"step", p.step}, {"path", checkpoint_path(run_dir, p.step)}});
      spdlog::info("checkpoint saved: {}", checkpoint_path(run_dir, p.step));
    }
    comm.barrier();
  };
  // The growing schedules (train/schedule.h): the window warm-up trains
  // through the step's sliding window, the length schedule on the step's
  // shorter windows (below), both with the frequencies of the switches made
  // so far (train.grow_yarn); evaluation runs attn: no window, whole
  // windows, the last stage's frequencies.
  const std::vector<int> stages = growth_stages(tc, T);
  int stage_now = -1;  // the stage the model runs; -1: attn as configured
  auto train_stage = [&](int stage) {
    if (stage == stage_now) return;
    AttentionSpec s = attn;
    if (stage >= 0) {
      if (tc.window_start > 0) s.window = stages[stage] < T ? stages[stage] : 0;  // 0: attn's own (the config rule)
      s.rope.grown = std::min(stage, attn.rope.grown);
    }
    model.set_attention(s);
    stage_now = stage;
  };
  // Rank 0 evaluates; the others wait (not on the final evaluation).
  auto evaluate = [&](int step, bool final) {
    train_stage(-1);  // unwindowed; the next step sets its own stage again
    if (!lead) {
      if (!final) comm.barrier();
      return;
    }
    ExtrapolationResult r =
        evaluate_extrapolation(model, val, cfg.eval, T, static_cast<int64_t>(B) * T, eval_text ? &*eval_text : nullptr);
    r.attention = attention_to_json(cfg.attention, attn);
    nlohmann::json j = r.to_json();
    j["context"] = context_to_json(attn);
    j["optimizer"] = tc.optimizer;  // how the weights were trained (docs/optimizers.md)
    // The training-time position ids (docs/training_for_length.md); evaluation used plain positions.
    j["train_positions"] = {{"kind", tc.positions}};
    if (pos_opts.kind != PositionIds::Plain) {
      j["train_positions"]["span"] = pos_opts.span;
      if (pos_opts.kind == PositionIds::Pose) j["train_positions"]["chunks"] = pos_opts.chunks;
    }
    if (tc.window_start > 0)
      j["train_window"] = {{"start", tc.window_start}, {"steps", tc.window_steps}, {"yarn", tc.grow_yarn}};
    if (tc.length_start > 0)
      j["train_length"] = {{"start", tc.length_start}, {"steps", tc.length_steps}, {"yarn", tc.grow_yarn}};
    j["train_documents"] = {
        {"mask", tc.document_mask}, {"positions", tc.document_positions}, {"windows", cfg.data.windows}};
    j["step"] = step;
    metrics->write({{"event", "eval"}, {"step", step}, {"results", j}});
    if (final) {
      write_json_file((fs::path(run_dir) / "extrapolation.json").string(), j);
      spdlog::info("validation loss at multiples of the training context (step {}):\n{}", step, r.table());
      spdlog::info("attention diagnostics (mean over heads and rows, per layer):\n{}", r.diagnostics_table());
    }
    if (!final) comm.barrier();
  };

  // Each layer's gradients are summed across ranks as soon as the backward
  // pass has issued them, during the last micro-batch's backward.
  const bool overlap = data_parallel && tc.overlap_reduce == 1;
  auto sigint = std::make_unique<SigintGuard>();
  // One step's micro-batches, all read before the first forward: with loss
  // masks the gradient is that of the mean over every scored target of the
  // step (all micro-batches, all ranks), so each micro-batch's weight needs
  // the step's count first.
  const bool masked = loader.has_masks() || mixer;
  const size_t micro_tokens = static_cast<size_t>(Bl) * T;
  std::vector<int32_t> inputs(micro_tokens * tc.grad_accum), targets(inputs.size());
  std::vector<int32_t> pos_ids(with_ids ? inputs.size() : 0), doc_starts(doc_mask ? inputs.size() : 0);
  std::vector<double> weight(tc.grad_accum);
  const auto start = std::chrono::steady_clock::now();
  const int first_step = progress.step;
  int status = 0;
  while (progress.step < tc.steps) {
    const auto t0 = std::chrono::steady_clock::now();
    const TrainProgress before = progress;
    const double lr = learning_rate(tc, progress.step);
    train_stage(stage_at(tc, T, progress.step));
    // The length schedule cuts each of the micro-batch's Bl windows of T
    // tokens into T / L consecutive windows of L: the same tokens, in rows
    // of the step's length (the data stream and its position do not change).
    const int L = training_length_at(tc, T, progress.step), per = T / L, rows = Bl * per;
    model.zero_grad();
    for (int micro = 0; micro < tc.grad_accum; ++micro) {
      int32_t* in = inputs.data() + micro * micro_tokens;
      int32_t* tg = targets.data() + micro * micro_tokens;
      loader.next_rows(in, tg, rank * Bl, (rank + 1) * Bl);
      const uint64_t draw = static_cast<uint64_t>(progress.step) * tc.grad_accum + micro;
      // The global index of this rank's first row in the run's stream of rows.
      // (In rows of the step's length.)
      const uint64_t first_row = (draw * static_cast<uint64_t>(B) + static_cast<uint64_t>(rank) * Bl) * per;
      int32_t* ids = with_ids ? pos_ids.data() + micro * micro_tokens : nullptr;
      int32_t* starts = doc_mask ? doc_starts.data() + micro * micro_tokens : nullptr;
      if (passkey) passkey->apply(in, tg, rows, L, rank * rows, draw);
      if (mixer) mixer->apply(in, tg, rows, L, first_row);
      if (with_ids) draw_position_ids(ids, rows, L, pos_opts, tc.seed, first_row);
      if (doc_mask) document_starts(starts, in, rows, L, separator);
      if (restart) restart_positions(ids, starts, rows, L);
    }
    // Weights: without masks each micro-batch's mean over the same number of
    // tokens, scaled by 1/ranks so that the sum across ranks is the gradient
    // of the global mean loss; with masks n_micro / (scored targets of the
    // step on all ranks).
    double step_scored = 0;
    if (masked) {
      std::vector<double> n(tc.grad_accum);
      for (int micro = 0; micro < tc.grad_accum; ++micro) {
        const int32_t* tg = targets.data() + micro * micro_tokens;
        n[micro] = static_cast<double>(micro_tokens - std::count(tg, tg + micro_tokens, kIgnoreTarget));
        step_scored += n[micro];
      }
      comm.allreduce_sum_host(&step_scored, 1);
      for (int micro = 0; micro < tc.grad_accum; ++micro) weight[micro] = step_scored > 0 ? n[micro] / step_scored : 0;
      if (step_scored == 0 && lead)
        spdlog::warn("step {}: the loss masks score none of its {} targets; its gradient is 0", progress.step + 1,
                     micro_tokens * tc.grad_accum * nranks);
    } else {
      std::fill(weight.begin(), weight.end(), 1.0 / (static_cast<double>(tc.grad_accum) * nranks));
    }
    double loss = 0;
    for (int micro = 0; micro < tc.grad_accum; ++micro) {
      const TokenLayout layout{with_ids ? pos_ids.data() + micro * micro_tokens : nullptr,
                               doc_mask ? doc_starts.data() + micro * micro_tokens : nullptr};
      const double mean =
          model.forward(inputs.data() + micro * micro_tokens, targets.data() + micro * micro_tokens, rows, L, layout);
      loss += masked ? mean * weight[micro] : mean / tc.grad_accum;
      const double scale = weight[micro];
      if (overlap && micro + 1 == tc.grad_accum)
        model.backward(
            scale, [&](int layer) { comm.start_allreduce_sum(model.grads(), model.layout().ranges_of_layer(layer)); });
      else
        model.backward(scale);
    }
    // The global mean loss (with masks each rank's share of it is already
    // weighted), and whether any rank was interrupted (all ranks stop at the
    // same step); the summed gradients, before the norm.
    double shared[2] = {loss, g_interrupted ? 1.0 : 0.0};
    comm.allreduce_sum_host(shared, 2);
    loss = masked ? shared[0] : shared[0] / nranks;
    const bool interrupted = shared[1] > 0;
    if (overlap)
      comm.finish_allreduces();
    else
      comm.allreduce_sum(model.grads(), model.num_params());
    const double norm = opt.clip(tc.grad_clip);
    if (!std::isfinite(loss) || !std::isfinite(norm)) {
      save(before);
      fail("non-finite ", std::isfinite(loss) ? "gradient" : "loss", " at step ", progress.step + 1, " (loss ", loss,
           ", gradient norm ", norm, "; first non-finite gradient in tensor ", first_nonfinite(model, model.grads()),
           "). Training stopped; the last good state is saved at ", checkpoint_path(run_dir, before.step));
    }
    opt.step(lr);
    // A finite gradient can still make a non-finite update (a tiny train.eps
    // with a large learning rate overflows m / (sqrt(v) + eps)). One pass over
    // the parameters finds it before anything saves or evaluates them; the
    // state before the update is gone, so the newest checkpoint on disk is the
    // last good state.
    if (!std::isfinite(model.backend().sum_squares(model.params(), model.num_params())))
      fail("non-finite parameter after the update of step ", progress.step + 1, " (tensor ",
           first_nonfinite(model, model.params()), "; gradient norm ", norm, ", lr ", lr, ", train.eps ", tc.eps,
           "). Training stopped; nothing was saved at this step; ",
           last_saved >= 0 ? "the last good state is " + checkpoint_path(run_dir, last_saved)
                           : std::string("no checkpoint of this run was saved before it"));
    progress.step += 1;
    progress.loader = loader.state();

    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double tok_s = static_cast<double>(B) * T * tc.grad_accum / dt;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (lead) {
      nlohmann::json rec = {{"event", "train"},  {"step", progress.step}, {"loss", loss},     {"lr", lr},
                            {"grad_norm", norm}, {"tokens_per_s", tok_s}, {"time_s", elapsed}};
      if (masked) rec["scored_tokens"] = static_cast<int64_t>(step_scored);
      metrics->write(rec);
    }
    if (progress.step % tc.log_every == 0 || progress.step == tc.steps || progress.step == first_step + 1) {
      const double eta = elapsed / (progress.step - first_step) * (tc.steps - progress.step);
      spdlog::info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.0f} tok/s | ETA {}", progress.step,
                   tc.steps, loss, lr, norm, tok_s, format_duration(eta));
    }
    if (interrupted) {
      if (lead) spdlog::warn("interrupted at step {}; saving a checkpoint", progress.step);
      save(progress);
      if (lead) spdlog::warn("resume with: gpt train --resume {}", run_dir);
      status = kExitInterrupted;
      break;
    }
    if (cfg.eval.every > 0 && progress.step % cfg.eval.every == 0 && progress.step < tc.steps)
      evaluate(progress.step, false);
    const bool listed = std::binary_search(tc.checkpoint_steps.begin(), tc.checkpoint_steps.end(), progress.step);
    if (((tc.checkpoint_every > 0 && progress.step % tc.checkpoint_every == 0) || listed) && progress.step < tc.steps)
      save(progress);
  }
  if (status != 0) return status;
  // Every rank takes the same decision (the file is rank 0's to check).
  double need_save = first_step < tc.steps || (lead && !fs::exists(checkpoint_path(run_dir, progress.step)));
  comm.allreduce_sum_host(&need_save, 1);
  if (need_save > 0) save(progress);
  sigint.reset();  // the final evaluation can be interrupted like any program
  evaluate(progress.step, true);
  return 0;
}

}  // namespace gpt
