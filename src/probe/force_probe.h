// The force probe of Vafa et al. 2025 (repository
// keyonvafa/inductive-bias-probes, experiments/physics/train_model.py; the
// probe the LSSA/LSSAR paper reuses): a GPT pretrained on orbital
// trajectories (gpt data orbits) gets a fresh regression head on its final
// norm's output (model.regression_outputs = 1) and the whole network is
// fine-tuned to predict the gravitational force on each planet from the
// hidden state at that planet's position, on a few labelled sequences; its
// predictions on held-out systems are then fitted by a power law in
// (r, m1, m2) (eval/force_fit.h) beside a nearest-neighbour oracle's.
// docs/orbits.md, "The force probe", says where this differs from the
// source and why.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

struct ForceProbeOptions {
  std::string from;  // the pretrained run directory or checkpoint (or a probe's, to continue it)
  std::string data;  // a directory of gpt data orbits
  std::string out;   // the probe's run directory
  int steps = 500;
  double lr = 6e-4;  // constant, as the source (no decay)
  int batch = 16;    // sequences per step
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  // Training sequences with every planet point labelled, then sequences with
  // sparse_points random planet points each (the source: 9,000 and 1,000 of 2).
  int labelled_sequences = 900;
  int sparse_sequences = 100;
  int sparse_points = 2;
  std::string target = "log";  // "log": standardised ln F (default); "raw": F itself (the source)
  int window = 0;              // tokens of each sequence the model reads (0: model.context)
  int eval_sequences = 200;    // validation sequences whose planet points are predicted
  int knn = 2;                 // the oracle's neighbours (the source's k for magnitudes)
  uint64_t seed = 1;
  int threads = 0;     // OpenMP threads; 0 = all cores
  std::string device;  // "" = the checkpoint's run.device
  int log_every = 50;
};

// One planet at one sampled time, as the probe sees it: its sequence, the
// token whose hidden state predicts its force (the y coordinate, the second
// of its two tokens: the model has read the whole position there), and its
// truth.
struct ProbePoint {
  int64_t sequence = 0;
  int token = 0;
  double r = 0, m1 = 0, m2 = 0, force = 0;
};

// The planet points of a rows file (gpt data orbits) whose token lies within
// the first `window` tokens of its sequence, and of its first `sequences`
// sequences (all: -1), in file order.
std::vector<ProbePoint> probe_points(const std::string& rows_path, int window, int64_t sequences = -1);

// Which points carry labels: every point of sequences [0, full), and
// `per_sequence` points drawn without replacement (seeded) from each of
// sequences [full, full + sparse). points are in sequence order.
std::vector<char> choose_labels(const std::vector<ProbePoint>& points, int full, int sparse, int per_sequence,
                                uint64_t seed);

// Fine-tunes, predicts, fits and writes OUT/{config.json, probe.json,
// metrics.jsonl, checkpoints/, predictions.csv, results.json}. Returns 0, or
// 130 after SIGINT (a checkpoint saved; run again with --from OUT to go on).
int run_force_probe(const ForceProbeOptions& opt);

}  // namespace gpt
