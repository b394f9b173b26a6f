#!/usr/bin/env bash
# Prepares the King James Bible as byte-level token shards:
#   scripts/prepare_kjv.sh [OUT_DIR]        (default data/kjv)
# Text from Debian's bible-kjv package (installed if missing), one verse per
# line without its reference; shards by `gpt data text` (GPT_BIN overrides the
# binary, default build/gpt). Steps whose output already exists are skipped.
set -euo pipefail

out_dir="${1:-data/kjv}"
[[ "$out_dir" == "/" ]] || out_dir="${out_dir%/}"
gpt_bin="${GPT_BIN:-build/gpt}"
text="$out_dir/kjv.txt"

log() { echo "prepare_kjv: $*" >&2; }
die() { log "error: $*"; exit 1; }

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
  log "tokenizing with $gpt_bin"
  "$gpt_bin" data text "$text" "$out_dir" --tokenizer byte --val-fraction 0.05
}

write_text
write_shards
log "done: $out_dir"
