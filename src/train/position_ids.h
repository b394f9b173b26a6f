// Training-time position ids (train.positions; docs/training_for_length.md):
// the position each token of a training window is given by RoPE and PoPE in
// place of its index 0..T-1, so that a model trained on windows of T tokens
// sees the positions (and relative distances) of a longer span L.
//
//   plain       0..T-1 (no ids are made)
//   pose        PoSE (Zhu et al. 2023, "PoSE: Efficient Context Window
//               Extension of LLMs via Positional Skip-wise Training", arXiv
//               2309.10400, §3.2): the window is cut into c chunks at c-1
//               distinct points drawn uniformly from 1..T-1; chunk j's ids
//               are its indices plus a skip u_j, u_0 = 0 and u_j drawn
//               uniformly from u_{j-1}..L-T, so the ids rise strictly and
//               stay below L. The tokens stay one contiguous window.
//   randomized  randomised positional encodings (Ruoss et al. 2023,
//               "Randomized Positional Encodings Boost Length Generalization
//               of Transformers", arXiv 2305.16843, §3): T distinct ids drawn
//               uniformly from 0..L-1 without replacement, sorted.
//
// Evaluation always uses plain positions. Each row's ids depend only on
// (seed, the row's global index), so a resumed run draws the same ids and
// the thread or rank count changes nothing.
#pragma once
#include <cstdint>
#include <string>

#include "config/config.h"

namespace gpt {

enum class PositionIds { Plain, Pose, Randomized };

struct PositionIdOptions {
  PositionIds kind = PositionIds::Plain;
  int span = 0;    // L: ids lie in 0..L-1; L >= T
  int chunks = 2;  // PoSE's c, 1..T
};

// From train.positions, train.position_span (0: 16·T) and train.pose_chunks,
// for training windows of T tokens. Throws gpt::Error naming the key for an
// unknown name or a span below T.
PositionIdOptions position_id_options(const TrainConfig& tc, int T);

// The ids of `rows` windows of T tokens (ids[r·T + t]), rows first_row,
// first_row+1, ... of the run's stream of rows (global indices, as the
// trainer counts them: step·grad_accum·B + micro·B + rank·B_local + r).
void draw_position_ids(int32_t* ids, int rows, int T, const PositionIdOptions& o, uint64_t seed, uint64_t first_row);

// The document mask's starts (train.document_mask) of `rows` windows of T
// input tokens: starts[r·T + t] is the index, in its window, of the last
// `separator` token at or before t (the end-of-text id that opens every
// document: it belongs to the document it opens), 0 where the window holds
// none before t.
void document_starts(int32_t* starts, const int32_t* tokens, int rows, int T, int32_t separator);

// Position ids restarted at every document (train.document_positions =
// "restart"): ids[t] -= ids[starts[t]] in each window, so a document's first
// token is at 0 and the ids' steps inside it are kept.
void restart_positions(int32_t* ids, const int32_t* starts, int rows, int T);

}  // namespace gpt
