#include "eval/shard_loss.h"

#include <algorithm>
#include <limits>

#include <spdlog/spdlog.h>

#include "core/check.h"

namespace gpt {
namespace {

// Rows per forward pass: the logits of one pass are rows·T·Vp floats, so a
// batch of long rows is scored a few rows at a time (per-position losses do
// not depend on which rows share a pass).
constexpr int64_t kTokensPerPass = 4096;  // GPT-2 (Vp 50304): 0.8 GB of logits

int64_t batches_in(const ShardInfo& s, uint64_t bt) { return static_cast<int64_t>((s.ntokens - 1) / bt); }

}  // namespace

int64_t shard_batches(const TokenStream& data, int T, int B) {
  GPT_CHECK(T > 0 && B > 0, "context ", T, " and batch ", B, " must be > 0");
  const uint64_t bt = static_cast<uint64_t>(B) * static_cast<uint64_t>(T);
  int64_t n = 0;
  for (const ShardInfo& s : data.shards()) n += batches_in(s, bt);
  return n;
}

ShardLossResult shard_loss(Model<float>& model, const TokenStream& data, int T, int B, int64_t K) {
  const ModelConfig& mc = model.config();
  GPT_CHECK(mc.position != "learned" || T <= mc.position_rows(), "context ", T,
            " exceeds the model's learned position table of ", mc.position_rows(), " rows");
  GPT_CHECK(K >= 0, "number of batches ", K, " must be >= 0 (0: all)");
  ShardLossResult r;
  r.available = shard_batches(data, T, B);
  const uint64_t bt = static_cast<uint64_t>(B) * static_cast<uint64_t>(T);
  if (r.available == 0) {
    uint64_t largest = 0;
    for (const ShardInfo& s : data.shards()) largest = std::max(largest, s.ntokens);
    fail("no shard holds one full batch of ", B, " x ", T, " tokens (", bt + 1, " tokens with the last target); the ",
         "largest of the ", data.shards().size(), " shard(s) has ", largest, ". Use a smaller --batch or --context");
  }
  r.batches = K > 0 ? K : r.available;
  if (r.batches > r.available)
    spdlog::warn(
        "eval: {} batches asked for but the shards hold {} full batches of {}x{}; like llm.c, the reader "
        "wraps around to the first shard, so some batches are scored more than once",
        r.batches, r.available, B, T);

  // Stream offset of each shard's first token.
  const std::vector<ShardInfo>& shards = data.shards();
  std::vector<uint64_t> start(shards.size(), 0);
  for (size_t s = 1; s < shards.size(); ++s) start[s] = start[s - 1] + shards[s - 1].ntokens;

  const int rows_per_pass = static_cast<int>(std::clamp<int64_t>(kTokensPerPass / T, 1, B));
  std::vector<int32_t> inputs, targets;
  std::vector<float> losses;
  double sum = 0;
  int64_t scored = 0;
  size_t s = 0;
  int64_t k = 0;  // batch index within shard s
  for (int64_t batch = 0; batch < r.batches; ++batch) {
    while (k >= batches_in(shards[s], bt)) s = (s + 1) % shards.size(), k = 0;
    const uint64_t first = start[s] + static_cast<uint64_t>(k) * bt;
    ++k;
    // Row b: inputs from token first + b·T, targets one later (kIgnoreTarget
    // where a loss mask does not score them: loss 0, not counted).
    for (int b0 = 0; b0 < B; b0 += rows_per_pass) {
      const int rows = std::min(rows_per_pass, B - b0);
      const size_t n = static_cast<size_t>(rows) * T;
      inputs.resize(n), targets.resize(n);
      scored += static_cast<int64_t>(
          data.read_example(first + static_cast<uint64_t>(b0) * T, n, inputs.data(), targets.data()));
      model.forward_losses(inputs.data(), targets.data(), rows, T, losses);
      for (float l : losses) sum += l;
    }
  }
  r.tokens = scored;
  r.loss = scored > 0 ? sum / static_cast<double>(scored) : std::numeric_limits<double>::quiet_NaN();
  return r;
}

}  // namespace gpt
