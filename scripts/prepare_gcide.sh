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

log() { echo "prepare_gcide: $*" >&2; }
die() { log "error: $*"; exit 1; }

dict=/usr/share/dictd/gcide.dict.dz
tokenizer=byte
while (($#)); do
  case "$1" in
    --tokenizer) (($# >= 2)) || die "--tokenizer needs a value (byte, bpe:N, gpt2:DIR or FILE)"; tokenizer="$2"; shift 2 ;;
    --tokenizer=*) tokenizer="${1#--tokenizer=}"; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option '$1' (allowed: --tokenizer T)" ;;
    *) break ;;
  esac
done
(($# <= 1)) || die "too many arguments: $* (usage: prepare_gcide.sh [--tokenizer T] [OUT_DIR])"

case "$tokenizer" in
  byte) default_dir=data/gcide ;;
  bpe:*)
    vocab_size="${tokenizer#bpe:}"
    [[ "$vocab_size" =~ ^[0-9]+$ ]] && ((vocab_size >= 257)) || die "--tokenizer $tokenizer: N must be an integer >= 257"
    default_dir="data/gcide_bpe$vocab_size" ;;
  gpt2:*) default_dir=data/gcide_gpt2 ;;
  *) [[ -f "$tokenizer" ]] || die "--tokenizer '$tokenizer': not byte, bpe:N, gpt2:DIR or an existing vocabulary file"
     default_dir="data/gcide_$(basename "${tokenizer%.*}")" ;;
esac

out_dir="${1:-$default_dir}"
[[ "$out_dir" == "/" ]] || out_dir="${out_dir%/}"
gpt_bin="${GPT_BIN:-build/gpt}"
text="$out_dir/gcide.txt"
val_fraction=0.02
# A separator is the blank line before an unindented line (a new headword);
# blank lines inside an entry are followed by indented lines.
doc_sep='regex:^\n(?=\S)'

install_gcide() {
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "$dict is missing and installing dict-gcide needs root or sudo"
    sudo=(sudo)
  fi
  log "installing Debian's dict-gcide (provides $dict)"
  if ! DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends dict-gcide; then
    log "install failed; running apt-get update and retrying"
    "${sudo[@]}" apt-get update
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends dict-gcide
  fi
  [[ -f "$dict" ]] || die "dict-gcide installed but $dict is still missing"
}

write_text() {
  if [[ -s "$text" ]]; then
    log "$text already exists, keeping it"
    return
  fi
  [[ -f "$dict" ]] || install_gcide
  mkdir -p "$out_dir"
  log "writing $text"
  # dictzip files are gzip files; written aside and renamed so an interrupted
  # run leaves no partial text.
  gzip -dc "$dict" >"$text.tmp"
  [[ -s "$text.tmp" ]] || die "$dict decompressed to nothing"
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
    spec="$out_dir/tokenizer.bpe"
    if [[ -s "$spec" ]]; then
      log "$spec already exists, keeping it"
    else
      log "learning a BPE vocabulary of $vocab_size tokens"
      "$gpt_bin" data train-tokenizer "$text" "$spec" --vocab-size "$vocab_size" \
        --val-fraction "$val_fraction" --doc-sep "$doc_sep"
    fi
  fi
  log "tokenizing with $gpt_bin (tokenizer $spec)"
  "$gpt_bin" data text "$text" "$out_dir" --tokenizer "$spec" --val-fraction "$val_fraction" --doc-sep "$doc_sep"
}

write_text
write_shards
log "done: $out_dir"
