# Shared by the scripts/prepare_*.sh dataset scripts (sourced, not run).
# Before sourcing, a script sets NAME (log prefix and default folder stem,
# e.g. kjv) and HELP_LINES (the line range of its header comment, for -h).
# After `dataset_args "$@"`: tokenizer, vocab_size (bpe:N), out_dir, gpt_bin.

log() { echo "prepare_$NAME: $*" >&2; }
die() { log "error: $*"; exit 1; }

# --tokenizer T and an optional OUT_DIR; the default folder follows T:
# data/NAME, data/NAME_bpeN, data/NAME_gpt2, data/NAME_<vocabulary file stem>.
dataset_args() {
  tokenizer=byte
  while (($#)); do
    case "$1" in
      --tokenizer) (($# >= 2)) || die "--tokenizer needs a value (byte, bpe:N, gpt2:DIR or FILE)"; tokenizer="$2"; shift 2 ;;
      --tokenizer=*) tokenizer="${1#--tokenizer=}"; shift ;;
      -h|--help) sed -n "$HELP_LINES" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
      -*) die "unknown option '$1' (allowed: --tokenizer T)" ;;
      *) break ;;
    esac
  done
  (($# <= 1)) || die "too many arguments: $* (usage: prepare_$NAME.sh [--tokenizer T] [OUT_DIR])"
  local default_dir
  case "$tokenizer" in
    byte) default_dir="data/$NAME" ;;
    bpe:*)
      vocab_size="${tokenizer#bpe:}"
      [[ "$vocab_size" =~ ^[0-9]+$ ]] && ((vocab_size >= 257)) || die "--tokenizer $tokenizer: N must be an integer >= 257"
      default_dir="data/${NAME}_bpe$vocab_size" ;;
    gpt2:*) default_dir="data/${NAME}_gpt2" ;;
    *) [[ -f "$tokenizer" ]] || die "--tokenizer '$tokenizer': not byte, bpe:N, gpt2:DIR or an existing vocabulary file"
       default_dir="data/${NAME}_$(basename "${tokenizer%.*}")" ;;
  esac
  out_dir="${1:-$default_dir}"
  [[ "$out_dir" == "/" ]] || out_dir="${out_dir%/}"
  gpt_bin="${GPT_BIN:-build/gpt}"
}

# apt-get install PACKAGE (root or sudo), with one `apt-get update` and retry
# for a fresh machine that has no package lists yet.
apt_install() {
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "installing $1 needs root or sudo"
    sudo=(sudo)
  fi
  log "installing Debian's $1"
  if ! DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "$1"; then
    log "install failed; running apt-get update and retrying"
    "${sudo[@]}" apt-get update
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y --no-install-recommends "$1"
  fi
}

# TEXT -> shards in out_dir with val_fraction (a bpe:N vocabulary is learned
# on the training part first, so the validation text stays unseen). Extra
# arguments (e.g. --doc-sep ...) go to both gpt commands.
write_shards() {
  local text="$1" name spec
  shift
  name="$(basename "$out_dir")"
  if compgen -G "$out_dir/${name}_val_*.bin" >/dev/null && compgen -G "$out_dir/${name}_train_*.bin" >/dev/null; then
    log "shards already exist in $out_dir, keeping them"
    return
  fi
  [[ -x "$gpt_bin" ]] || die "gpt binary '$gpt_bin' not found or not executable (build it, or set GPT_BIN)"
  spec="$tokenizer"
  if [[ "$tokenizer" == bpe:* ]]; then
    spec="$out_dir/tokenizer.bpe"
    if [[ -s "$spec" ]]; then
      log "$spec already exists, keeping it"
    else
      log "learning a BPE vocabulary of $vocab_size tokens"
      "$gpt_bin" data train-tokenizer "$text" "$spec" --vocab-size "$vocab_size" --val-fraction "$val_fraction" "$@"
    fi
  fi
  log "tokenizing with $gpt_bin (tokenizer $spec)"
  "$gpt_bin" data text "$text" "$out_dir" --tokenizer "$spec" --val-fraction "$val_fraction" "$@"
}
