#!/usr/bin/env bash
# layers_test.sh SOURCE_DIR: the folders' layering (issue #35,
# docs/architecture.md "Layers"). No folder include closes a cycle; recipe/
# is the ground floor and includes no other folder; and no file reaches an
# internal header of another folder (`"src/<folder>/x.hpp"`, a relative
# `"../<folder>/x.hpp"`, or a bare name only another folder's src/ has)
# unless tests/setup/layers_allowed.txt lists it ("FROM -> HEADER: reason");
# a listed reach nothing makes any more fails too, so the list only shrinks.
# tests/setup/layers.py finds the edges.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../integration/lib/common.sh
source "$here/../integration/lib/common.sh"
SOURCE=$(cd "${1:?usage: layers_test.sh SOURCE_DIR}" && pwd)
ALLOWED=$here/layers_allowed.txt

mr_init layers

# check_tree ROOT LIST: prints every cycle edge, every include from recipe/,
# every internal-header reach LIST does not allow and every LIST entry that
# matches none; fails when there is any.
check_tree() {
  local root=$1 list=$2 problems=0 entry reach kind from arrow to file
  local -A allowed=() seen=()
  while IFS= read -r entry; do
    [[ $entry =~ ^[[:space:]]*(#|$) ]] && continue
    if [[ ! $entry =~ ^([a-z_]+)\ -\>\ (src/[A-Za-z0-9_./-]+):\ .+ ]]; then
      echo "$list: '$entry' is not 'FROM -> src/FOLDER/HEADER: reason'"
      problems=1
      continue
    fi
    allowed["${BASH_REMATCH[1]} -> ${BASH_REMATCH[2]}"]=1
  done <"$list"
  while read -r kind from arrow to file; do
    [[ -n $kind ]] || continue
    case $kind in
      cycle)
        echo "$file: the include $from $arrow $to closes a folder cycle"
        problems=1
        ;;
      ground)
        echo "$file: recipe/ is the ground floor, but includes $to/"
        problems=1
        ;;
      internal)
        reach="$from $arrow $to"
        if [[ -n ${allowed[$reach]:-} ]]; then
          seen[$reach]=1
        else
          echo "$file: includes $to, an internal header of another folder (make it public under include/meshrun/)"
          problems=1
        fi
        ;;
    esac
  done < <("$MR_PYTHON" "$here/layers.py" "$root")
  for reach in "${!allowed[@]}"; do
    [[ -n ${seen[$reach]:-} ]] || { echo "$list: $reach is reached no more; take it off the list"; problems=1; }
  done
  return "$problems"
}

case_source_tree() {
  local problems
  problems=$(check_tree "$SOURCE" "$ALLOWED") || fail "$(printf '\n%s' "$problems")"
}

# A tree of its own: a <-> b is a cycle, c -> a is not, recipe -> a breaks
# the ground floor, and c reaches b's internal header three ways.
fake_tree() {
  mkdir -p "$1/src/a" "$1/src/b" "$1/src/c" "$1/src/recipe" "$1/include/meshrun/c"
  printf '#include "meshrun/b/x.hpp"\n' >"$1/src/a/one.cpp"
  printf '#include "meshrun/a/y.hpp"\n' >"$1/src/b/two.cpp"
  printf '// internal\n' >"$1/src/b/inner.hpp"
  printf '// internal\n' >"$1/src/b/listed.hpp"
  printf '#include "meshrun/a/y.hpp"\n#include "src/b/inner.hpp"\n#include "src/b/listed.hpp"\n' >"$1/src/c/three.cpp"
  printf '#include "../b/inner.hpp"\n' >"$1/src/c/four.cpp"
  printf '#include "inner.hpp"\n' >"$1/include/meshrun/c/five.hpp"
  printf '#include "meshrun/c/z.hpp"\n' >"$1/src/recipe/six.cpp"
}

case_check_finds_cycles_ground_and_internal_headers() {
  local root=$MR_TMP/fake out rc=0
  fake_tree "$root"
  printf '%s\n' 'c -> src/b/listed.hpp: being made public' 'a -> src/b/gone.hpp: stale' >"$root/allowed.txt"
  out=$(check_tree "$root" "$root/allowed.txt") || rc=$?
  ((rc != 0)) || fail "the fake tree passed: $out"
  assert_contains "$out" "src/b/two.cpp: the include b -> a closes a folder cycle" "the report"
  assert_contains "$out" "src/a/one.cpp: the include a -> b closes a folder cycle" "the report"
  assert_not_contains "$out" "c -> a closes" "the report (c -> a is in no cycle)"
  assert_contains "$out" "recipe/ is the ground floor, but includes c/" "the report"
  assert_contains "$out" "src/c/three.cpp: includes src/b/inner.hpp, an internal header" "the report"
  assert_contains "$out" "src/c/four.cpp: includes src/b/inner.hpp, an internal header" "the report (relative)"
  assert_contains "$out" "include/meshrun/c/five.hpp: includes src/b/inner.hpp, an internal header" "the report (bare)"
  assert_not_contains "$out" "listed.hpp, an internal" "the report (listed)"
  assert_contains "$out" "a -> src/b/gone.hpp is reached no more" "the report"
}

case_clean_tree_passes() {
  local root=$MR_TMP/clean out
  mkdir -p "$root/src/a" "$root/src/b" "$root/include/meshrun/b"
  printf '#include "meshrun/b/x.hpp"\n#include "own.hpp"\n' >"$root/src/a/one.cpp"
  printf '// own\n' >"$root/src/a/own.hpp"
  printf '#include "inner.hpp"\n' >"$root/src/b/two.cpp"
  printf '// internal\n' >"$root/src/b/inner.hpp"
  : >"$root/allowed.txt"
  out=$(check_tree "$root" "$root/allowed.txt") || fail "a layered tree failed: $out"
}

run_case "no folder cycle, recipe/ on the ground floor, no internal header reached beyond the shrinking list" \
  case_source_tree
run_case "the check names a cycle edge, an include from recipe/, internal headers reached three ways, a stale entry" \
  case_check_finds_cycles_ground_and_internal_headers
run_case "a layered tree with its own internal headers passes" case_clean_tree_passes
mr_finish
