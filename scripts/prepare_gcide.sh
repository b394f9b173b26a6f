#!/usr/bin/env bash
# Prepares GCIDE, the Collaborative International Dictionary of English (40 MB
# of text, GPL), as token shards for throughput runs:
#   scripts/prepare_gcide.sh [--tokenizer T] [OUT_DIR]
# T: byte (default; OUT_DIR data/gcide), bpe:N (a BPE vocabulary of N tokens
# learned on the training part, OUT_DIR/tokenizer.bpe; OUT_DIR data/gcide_bpeN),
# gpt2:DIR (GPT-2's vocabulary; OUT_DIR data/gcide_gpt2) or a vocabulary FILE.
# Text from Debian's dict-gcide package (installed if missing), one document
# per dictionary entry (an entry starts after a blank line with an unindented
# line); 2% for validation. GPT_BIN overrides the binary (default build/gpt).
# Steps whose output already exists are skipped.
set -euo pipefail

NAME=gcide HELP_LINES='2,11p'
source "$(dirname "$0")/dataset_lib.sh"
dataset_args "$@"
dict=/usr/share/dictd/gcide.dict.dz
text="$out_dir/gcide.txt"
val_fraction=0.02
# A separator is the blank line before an unindented line (a new headword);
# blank lines inside an entry are followed by indented lines.
doc_sep='regex:^\n(?=\S)'

write_text() {
  if [[ -s "$text" ]]; then
    log "$text already exists, keeping it"
    return
  fi
  if [[ ! -f "$dict" ]]; then
    apt_install dict-gcide
    [[ -f "$dict" ]] || die "dict-gcide installed but $dict is still missing"
  fi
  mkdir -p "$out_dir"
  log "writing $text"
  # dictzip files are gzip files; written aside and renamed so an interrupted
  # run leaves no partial text.
  gzip -dc "$dict" >"$text.tmp"
  [[ -s "$text.tmp" ]] || die "$dict decompressed to nothing"
  mv "$text.tmp" "$text"
  log "$(wc -l <"$text") lines, $(wc -c <"$text") bytes"
}

write_text
write_shards "$text" --doc-sep "$doc_sep"
log "done: $out_dir"
