#!/usr/bin/env bash
# install_test.sh MESHRUN: `meson install` into a private DESTDIR puts the
# binary (and its engine in libexec), the SentencePiece module, the recipes with their data and hooks, the Ray
# job's entrypoint,
# the Lua examples and the bash completion in place, and the installed
# binary lints an installed recipe and reads a SentencePiece model through
# the installed module.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
source "$here/lib/common.sh"

mr_meshrun_argument "$0" "$@"
export MR_TIMEOUT=240

mr_init install

case_meson_install() {
  local build root prefix
  build=$(dirname "$MESHRUN")
  root=$MR_TMP/root
  assert_exit 0 meson install -C "$build" --destdir "$root" --no-rebuild --quiet
  prefix=$(meson introspect --buildoptions "$build" | "$MR_PYTHON" -c \
    'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
  local installed=$root$prefix
  [[ -x $installed/bin/meshrun ]] || fail "no $installed/bin/meshrun"
  # The engine (meshrun with LibTorch) is in libexec, not on PATH; the
  # installed front end hands --version and runs to it.
  [[ -n $(find "$installed" -path '*/libexec/meshrun/meshrun-engine' -perm -u+x) ]] ||
    fail "meshrun-engine is not installed under libexec/meshrun"
  [[ -f $installed/share/meshrun/recipes/quickstart.toml ]] || fail "the recipes are not installed"
  [[ -f $installed/share/meshrun/recipes/hooks/quickstart_reward.lua ]] || fail "the recipes' hooks are not installed"
  # Where `meshrun submit --ray` looks for it from bin/ (src/cli/engine_path.hpp).
  [[ -f $installed/share/meshrun/ray_job.py ]] || fail "the Ray job's entrypoint is not installed"
  assert_exit 1 "$installed/bin/meshrun" submit "$installed/share/meshrun/recipes/sft-tiny.toml" --ray \
    --address http://127.0.0.1:9 --script "$MR_TMP/sft.ray.sh"
  assert_not_contains "$MR_ERR" "entrypoint is neither" "the installed submit --ray"
  assert_contains "$MR_ERR" "ray list nodes" "the installed submit --ray"
  compgen -G "$installed/share/meshrun/lua/examples/*.lua" >/dev/null || fail "the Lua examples are not installed"
  cmp -s "$installed/share/bash-completion/completions/meshrun" "$here/../../scripts/meshrun-completion.bash" ||
    fail "the bash completion is not installed"
  local module
  module=$(find "$installed" -name '*meshrun_sentencepiece*.so' | head -1)
  [[ -n $module ]] || fail "the SentencePiece module is not installed"
  assert_exit 0 "$installed/bin/meshrun" --version
  assert_contains "$MR_OUT" "meshrun "
  assert_contains "$MR_OUT" "torch "
  assert_exit 0 "$installed/bin/meshrun" lint "$installed/share/meshrun/recipes/quickstart.toml"
  # The installed module serves the installed binary.
  if command -v spm_train >/dev/null; then
    printf 'hello world\nthe quick brown fox\nhello there world\n' >"$MR_TMP/corpus.txt"
    spm_train --input="$MR_TMP/corpus.txt" --model_prefix="$MR_TMP/m" --vocab_size=40 --model_type=bpe \
      --hard_vocab_limit=false --minloglevel=2 >/dev/null 2>&1
    MESHRUN_SENTENCEPIECE_MODULE=$module assert_exit 0 "$installed/bin/meshrun" tokenize "$MR_TMP/m.model" --text "hello"
  fi
}

run_case "meson install: binary, module, recipes, Lua examples, completion; the installed binary works" case_meson_install
mr_finish
