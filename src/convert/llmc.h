// llm.c GPT-2 checkpoints (docs/formats.md) <-> the project's own
// checkpoints. An llm.c file is a 256-int32 header (magic 20240326, version,
// T, V, L, H, C, Vp) followed by 16 tensors in a fixed order, all float32
// (version 3) or all bfloat16 (version 5). The project's parameter table holds
// the same tensors in the same order and shapes for a model with learned
// positions and softmax attention, so conversion is a copy, tensor by tensor:
//
//   llm.c   wte wpe ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw fcprojb lnfw lnfb
//   ours    param/<same names>
//
// Import gives a model with position "learned", max_position = T, attention
// preset "softmax" and vocab_pad_multiple chosen so that our Vp equals the
// file's (128, or 64 for a file padded to 64). Export writes Vp = V rounded up
// to 128, as llm.c does: a model padded to 64 whose Vp is not a multiple of 128
// gets zero rows appended (the padding rows of the tied embedding are zero and
// never scored, so the model computes the same logits).
//
// bfloat16: export rounds to nearest, ties to even (the upper 16 bits of the
// float32 after adding 0x7FFF plus the lowest kept bit; kernels/bf16_round.h,
// shared with the CUDA backend's bf16 GEMMs); NaN stays NaN (quiet).
// Import expands exactly (bits << 16). So float32 -> bf16 -> float32 -> bf16
// and bf16 -> float32 -> bf16 are bit-exact.
#pragma once
#include <cstdint>
#include <string>

#include "train/checkpoint.h"

namespace gpt {

constexpr int32_t kLlmcMagic = 20240326;
constexpr int32_t kLlmcVersionF32 = 3;
constexpr int32_t kLlmcVersionBF16 = 5;

struct LlmcHeader {
  int32_t version = kLlmcVersionF32;
  int32_t max_seq_len = 0;   // T: rows of the position table
  int32_t vocab_size = 0;    // V
  int32_t n_layer = 0;       // L
  int32_t n_head = 0;        // H
  int32_t n_embd = 0;        // C
  int32_t padded_vocab = 0;  // Vp
};

// float32 <-> bfloat16 bits (round to nearest even; exact expansion).
uint16_t float_to_bf16(float x);
float bf16_to_float(uint16_t b);

// Reads and validates the header: magic, version (3 or 5), dimensions that the
// project's config accepts, C divisible by H, V <= Vp padded to 64 or 128, and
// a file size of exactly 1024 + (parameter count) x (2 or 4) bytes. Errors name
// the file and what is wrong.
LlmcHeader read_llmc_header(const std::string& path);

// The number of parameters an llm.c file of this header holds.
uint64_t llmc_param_count(const LlmcHeader& h);

struct LlmcImportOptions {
  int context = 0;              // model.context of the result; 0 = T. Must be <= T.
  bool with_optimizer = false;  // add zero AdamW moments so `gpt train --resume` can fine-tune it
};

// Reads an llm.c checkpoint into one of ours (parameters as "param/NAME",
// config and step 0 in the meta). The result is what save_checkpoint writes.
Checkpoint import_llmc(const std::string& path, const LlmcImportOptions& opt = {});

// Writes the parameters of one of our checkpoints (ckpt_path names it in
// errors) as an llm.c file of the given version (3: float32, 5: bfloat16).
// Refuses, saying why, models that llm.c's format cannot hold: positions other
// than "learned", attention other than softmax, or any tensor beyond llm.c's 16.
void export_llmc(const Checkpoint& ckpt, const std::string& ckpt_path, const std::string& out_path, int version);

}  // namespace gpt
