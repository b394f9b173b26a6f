// `gpt probe force`: the physics probe of Vafa et al. 2025 on a model
// pretrained on orbital trajectories (src/probe/force_probe.h,
// docs/orbits.md "The force probe").
#include <memory>

#include "cli/commands.h"
#include "cli/validators.h"
#include "probe/force_probe.h"

namespace gpt::cli {

void add_probe(CLI::App& app) {
  CLI::App* probe = app.add_subcommand("probe", "Probe what a trained model has learned");
  probe->require_subcommand(1);
  auto o = std::make_shared<ForceProbeOptions>();
  CLI::App* cmd = probe->add_subcommand(
      "force",
      "Fine-tune a model pretrained on gpt data orbits to predict the force on each planet (a regression head on "
      "its final norm, the whole network trained), predict on held-out systems and fit F = C m1^a m2^b r^c "
      "(Newton: a = b = 1, c = -2) beside a nearest-neighbour oracle");
  cmd->add_option("--from", o->from, "Pretrained run directory or checkpoint (a probe's own: continue it)")
      ->required()
      ->check(existing_path());
  cmd->add_option("--data", o->data, "Directory of gpt data orbits (two-body systems: --max-planets 1)")
      ->required()
      ->check(existing_path());
  cmd->add_option("--out", o->out, "The probe's run directory")->required();
  cmd->add_option("--steps", o->steps, "Fine-tuning steps (default 500)")->check(non_negative());
  cmd->add_option("--lr", o->lr, "Learning rate, constant (default 6e-4, the source's)")->check(positive());
  cmd->add_option("--batch", o->batch, "Sequences per step (default 16)")->check(positive());
  cmd->add_option("--weight-decay", o->weight_decay, "AdamW weight decay of matrices (default 0.1)")
      ->check(non_negative());
  cmd->add_option("--grad-clip", o->grad_clip, "Largest gradient norm; 0: none (default 1)")->check(non_negative());
  cmd->add_option("--labelled-sequences", o->labelled_sequences,
                  "Training sequences with every planet point labelled (default 900)")
      ->check(non_negative());
  cmd->add_option("--sparse-sequences", o->sparse_sequences,
                  "Further training sequences with --sparse-points labelled points each (default 100)")
      ->check(non_negative());
  cmd->add_option("--sparse-points", o->sparse_points, "Labelled points of each sparse sequence (default 2)")
      ->check(positive());
  cmd->add_option("--target", o->target,
                  "log: standardised ln F (default; positive predictions for the log-space fit); raw: F itself, "
                  "as the source")
      ->check(CLI::IsMember({"log", "raw"}));
  cmd->add_option("--window", o->window, "Tokens of each sequence read (default: the model's context)")
      ->check(non_negative());
  cmd->add_option("--eval-sequences", o->eval_sequences,
                  "Validation sequences whose planet points are predicted and fitted (default 200)")
      ->check(positive());
  cmd->add_option("--knn", o->knn, "Neighbours of the oracle (default 2)")->check(positive());
  cmd->add_option("--seed", o->seed, "Seed of the head, the labels and the batches (default 1)");
  cmd->add_option("--threads", o->threads, "OpenMP threads (default: all cores)")->check(non_negative());
  cmd->add_option("--device", o->device, "cpu or cuda (default: the checkpoint's run.device)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--log-every", o->log_every, "Steps between progress lines (default 50)")->check(positive());
  cmd->callback([o] { exit_status = run_force_probe(*o); });
}

}  // namespace gpt::cli
