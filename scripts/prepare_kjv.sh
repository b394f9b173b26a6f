#!/usr/bin/env bash
# Prepares the King James Bible as token shards:
#   scripts/prepare_kjv.sh [--tokenizer T] [OUT_DIR]
# T is one of
#   byte       (default) bytes + end-of-text, vocabulary 257; OUT_DIR data/kjv
#   bpe:N      a byte-level BPE vocabulary of N tokens learned on the training
#              part (`gpt data train-tokenizer`), saved as OUT_DIR/tokenizer.bpe;
#              OUT_DIR data/kjv_bpeN
#   gpt2:DIR   GPT-2's vocabulary from DIR (encoder.json, vocab.bpe), 50257
#              tokens; OUT_DIR data/kjv_gpt2
#   FILE       a vocabulary file written by `gpt data train-tokenizer`
# Set model.vocab_size to the vocabulary `gpt data text` reports.
# Text from Debian's bible-kjv package (installed if missing), one verse per
# line without its reference; shards by `gpt data text` (GPT_BIN overrides the
# binary, default build/gpt). Steps whose output already exists are skipped.
set -euo pipefail

NAME=kjv HELP_LINES='2,15p'
source "$(dirname "$0")/dataset_lib.sh"
dataset_args "$@"
text="$out_dir/kjv.txt"
val_fraction=0.05

write_text() {
  if [[ -s "$text" ]]; then
    log "$text already exists, keeping it"
    return
  fi
  command -v bible >/dev/null || apt_install bible-kjv
  command -v bible >/dev/null || die "bible-kjv installed but the 'bible' command is still missing"
  mkdir -p "$out_dir"
  log "writing $text"
  # `bible` prints "Ge1:1 In the beginning..."; cut drops the verse reference.
  # Written aside and renamed so an interrupted run leaves no partial text.
  bible -f Gen1:1-Rev22:21 </dev/null | cut -d' ' -f2- >"$text.tmp"
  [[ -s "$text.tmp" ]] || die "'bible' produced no text"
  mv "$text.tmp" "$text"
  log "$(wc -l <"$text") lines, $(wc -c <"$text") bytes"
}

write_text
write_shards "$text"
log "done: $out_dir"
