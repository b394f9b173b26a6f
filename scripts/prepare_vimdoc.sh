#!/usr/bin/env bash
# Prepares Vim's reference and user manuals (Debian's vim-runtime: about 150
# help files, 9.5 MB of plain text, the Vim licence) as token shards of long
# documents, for the `documents` evaluation protocol:
#   scripts/prepare_vimdoc.sh [--tokenizer T] [OUT_DIR]
# T: byte (default; OUT_DIR data/vimdoc), bpe:N, gpt2:DIR or a vocabulary FILE,
# as for scripts/prepare_kjv.sh. One document per section of a help file (the
# files separate their sections by a line of '=' characters); about 1,000
# documents, half of them at least 2,048 bytes long. The last 20% of the bytes,
# in file-name order (mostly the user manual, usr_*.txt), are validation.
# GPT_BIN overrides the binary (default build/gpt). Steps whose output
# already exists are skipped.
set -euo pipefail

NAME=vimdoc HELP_LINES='2,12p'
source "$(dirname "$0")/dataset_lib.sh"
dataset_args "$@"
text="$out_dir/text"
val_fraction=0.2
doc_sep='regex:^={20,}[ \t]*$'

write_text() {
  if [[ -d "$text" ]] && compgen -G "$text/*.txt" >/dev/null; then
    log "$text already exists, keeping it"
    return
  fi
  compgen -G "/usr/share/vim/vim*/doc/help.txt" >/dev/null || apt_install vim-runtime
  local docs
  docs="$(dirname "$(compgen -G "/usr/share/vim/vim*/doc/help.txt" | sort | tail -1)")" ||
    die "vim-runtime installed but no /usr/share/vim/vim*/doc/help.txt"
  mkdir -p "$out_dir"
  log "copying the help files of $docs to $text"
  # Copied aside and renamed so an interrupted run leaves no partial folder.
  rm -rf "$text.tmp"
  mkdir -p "$text.tmp"
  cp "$docs"/*.txt "$text.tmp"/
  mv "$text.tmp" "$text"
  log "$(ls "$text" | wc -l) files, $(cat "$text"/*.txt | wc -c) bytes"
}

write_text
write_shards "$text" --doc-sep "$doc_sep"
log "done: $out_dir"
