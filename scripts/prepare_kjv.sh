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

log() { echo "prepare_kjv: $*" >&2; }
die() { log "error: $*"; exit 1; }

tokenizer=byte
while (($#)); do
  case "$1" in
    --tokenizer) (($# >= 2)) || die "--tokenizer needs a value (byte, bpe:N, gpt2:DIR or FILE)"; tokenizer="$2"; shift 2 ;;
    --tokenizer=*) tokenizer="${1#--tokenizer=}"; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (allowed: --tokenizer T)" ;;
    *) break ;;
  esac
done
(($# <= 1)) || die "too many arguments: $* (usage: prepare_kjv.sh [--tokenizer T] [OUT_DIR])"

case "$tokenizer" in
  byte) default_dir=data/kjv ;;
  bpe:*)
    vocab_size="${tokenizer#bpe:}"
    [[ "$vocab_size" =~ ^[0-9]+$ ]] && ((vocab_size >= 257)) || die "--tokenizer $tokenizer: N must be an integer >= 257"
    default_dir="data/kjv_bpe$vocab_size" ;;
  gpt2:*) default_dir=data/kjv_gpt2 ;;
  *) [[ -f "$tokenizer" ]] || die "--tokenizer '$tokenizer': not byte, bpe:N, gpt2:DIR or an existing vocabulary file"
     default_dir="data/kjv_$(basename "${tokenizer%.*}")" ;;
esac

out_dir="${1:-$default_dir}"
[[ "$out_dir" == "/" ]] || out_dir="${out_dir%/}"
gpt_bin="${GPT_BIN:-build/gpt}"
text="$out_dir/kjv.txt"
val_fraction=0.05

install_bible() {
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "'bible' is missing and installing bible-kjv needs root or sudo"
    sudo=(sudo)
  fi
  log "installing Debian's bible-kjv (provides the 'bible' command)"
  # A fresh machine may have no package lists yet: update once, then retry.
  if ! "${sudo[@]}" apt-get install -y bible-kjv; then
    log "install failed; running apt-get update and retrying"
    "${sudo[@]}" apt-get update
    "${sudo[@]}" apt-get install -y bible-kjv
  fi
  command -v bible >/dev/null || die "bible-kjv installed but the 'bible' command is still missing"
}

write_text() {
  if [[ -s "$text" ]]; then
    log "$text already exists, keeping it"
    return
  fi
  command -v bible >/dev/null || install_bible
  mkdir -p "$out_dir"
  log "writing $text"
  # `bible` prints "Ge1:1 In the beginning..."; cut drops the verse reference.
  # Written aside and renamed so an interrupted run leaves no partial text.
  bible -f Gen1:1-Rev22:21 </dev/null | cut -d' ' -f2- >"$text.tmp"
  [[ -s "$text.tmp" ]] || die "'bible' produced no text"
  mv "$text.tmp" "$text"
  log "$(wc -l <"$text") lines, $(wc -c <"$text") bytes"
}

write_shards() {
  local name
  name="$(basename "$out_dir")"
  if compgen -G "$out_dir/${name}_val_*.bin" >/dev/null && compgen -G "$out_dir/${name}_train_*.bin" >/dev/null; then
    log "shards already exist in $out_dir, keeping them"
    return
  fi
  [[ -x "$gpt_bin" ]] || die "gpt binary '$gpt_bin' not found or not executable (build it, or set GPT_BIN)"
  local spec="$tokenizer"
  if [[ "$tokenizer" == bpe:* ]]; then
    # Learned on the training part only: the validation text stays unseen.
    spec="$out_dir/tokenizer.bpe"
    if [[ -s "$spec" ]]; then
      log "$spec already exists, keeping it"
    else
      log "learning a BPE vocabulary of $vocab_size tokens"
      "$gpt_bin" data train-tokenizer "$text" "$spec" --vocab-size "$vocab_size" --val-fraction "$val_fraction"
    fi
  fi
  log "tokenizing with $gpt_bin (tokenizer $spec)"
  "$gpt_bin" data text "$text" "$out_dir" --tokenizer "$spec" --val-fraction "$val_fraction"
}

write_text
write_shards
log "done: $out_dir"
