// Mean loss of a model on token shards, batched exactly as llm.c's validation
// loop reads them, so that a model converted from llm.c prints the loss llm.c
// prints for the same tokens.
//
// llm.c's DataLoader (one process, no shuffling) reads each shard on its own:
// batch k of a shard holds the B rows r = k·B + b, row r being tokens
// r·T … r·T+T of the shard (inputs r·T … r·T+T−1, targets one later, so
// consecutive rows share one token). A shard of n tokens gives
// floor((n − 1) / (B·T)) batches; batches never cross shards, the rest of a
// shard is skipped, and after the last shard the reader wraps to the first.
// The loss is the mean cross-entropy over all K·B·T positions of K batches
// (over those their loss masks score, when the shards have masks).
#pragma once
#include <cstdint>
#include <string>

#include "data/shard.h"
#include "model/gpt.h"

namespace gpt {

struct ShardLossResult {
  double loss = 0;        // mean over every scored position
  int64_t batches = 0;    // K
  int64_t tokens = 0;     // positions scored: K·B·T, less those loss masks leave out
  int64_t available = 0;  // full batches the shards hold (one pass)
};

// Full B×T batches the stream's shards hold, shard by shard as above.
int64_t shard_batches(const TokenStream& data, int T, int B);

// Mean loss over K batches (K = 0: every full batch, one pass). K above the
// number available wraps around the shards as llm.c does (and logs a warning).
// Throws when the shards hold no full batch, naming the pattern and the sizes.
ShardLossResult shard_loss(Model<float>& model, const TokenStream& data, int T, int B, int64_t K = 0);

}  // namespace gpt
