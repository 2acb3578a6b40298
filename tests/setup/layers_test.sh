#!/usr/bin/env bash
# layers_test.sh SOURCE_DIR: the folders' layering (issue #35). recipe/ is
# the ground floor and includes no other folder; a folder include edge that
# closes a cycle fails unless tests/setup/layers_allowed.txt lists it (with
# its reason), and a listed edge that no longer closes one fails too, so the
# list only shrinks. tests/setup/layers.py finds the edges.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../integration/lib/common.sh
source "$here/../integration/lib/common.sh"
SOURCE=$(cd "${1:?usage: layers_test.sh SOURCE_DIR}" && pwd)
ALLOWED=$here/layers_allowed.txt

mr_init layers

# check_tree ROOT LIST: prints every ground-floor include, every cycle edge
# LIST does not allow and every LIST entry that is no cycle edge; fails when
# there is any.
check_tree() {
  local root=$1 list=$2 problems=0 entry edge kind from arrow to file
  local -A allowed=() seen=()
  while IFS= read -r entry; do
    [[ $entry =~ ^[[:space:]]*(#|$) ]] && continue
    if [[ ! $entry =~ ^([a-z_]+)\ -\>\ ([a-z_]+):\ .+ ]]; then
      echo "$list: '$entry' is not 'FROM -> TO: reason'"
      problems=1
      continue
    fi
    allowed["${BASH_REMATCH[1]} -> ${BASH_REMATCH[2]}"]=1
  done <"$list"
  while read -r kind from arrow to file; do
    [[ -n $kind ]] || continue
    edge="$from $arrow $to"
    if [[ $kind == ground ]]; then
      echo "$file: recipe/ is the ground floor, but includes $to/"
      problems=1
    elif [[ -n ${allowed[$edge]:-} ]]; then
      seen[$edge]=1
    else
      echo "$file: the include $edge closes a folder cycle"
      problems=1
    fi
  done < <("$MR_PYTHON" "$here/layers.py" "$root")
  for edge in "${!allowed[@]}"; do
    [[ -n ${seen[$edge]:-} ]] || { echo "$list: $edge closes no cycle any more; take it off the list"; problems=1; }
  done
  return "$problems"
}

case_source_tree() {
  local problems
  problems=$(check_tree "$SOURCE" "$ALLOWED") || fail "$(printf '\n%s' "$problems")"
}

# A tree of its own: a <-> b is a cycle, c -> a is not, recipe -> a breaks
# the ground floor.
fake_tree() {
  mkdir -p "$1/src/a" "$1/src/b" "$1/src/c" "$1/src/recipe"
  printf '#include "meshrun/b/x.hpp"\n' >"$1/src/a/one.cpp"
  printf '#include "meshrun/a/y.hpp"\n' >"$1/src/b/two.cpp"
  printf '#include "meshrun/a/y.hpp"\n' >"$1/src/c/three.cpp"
  printf '#include "meshrun/c/z.hpp"\n' >"$1/src/recipe/four.cpp"
}

case_check_finds_cycles_and_ground() {
  local root=$MR_TMP/fake out rc=0
  fake_tree "$root"
  printf '%s\n' 'a -> b: being untangled' 'c -> a: stale' >"$root/allowed.txt"
  out=$(check_tree "$root" "$root/allowed.txt") || rc=$?
  ((rc != 0)) || fail "the fake tree passed: $out"
  assert_contains "$out" "src/b/two.cpp: the include b -> a closes a folder cycle" "the report"
  assert_not_contains "$out" "a -> b closes" "the report (a -> b is listed)"
  assert_contains "$out" "c -> a closes no cycle any more" "the report"
  assert_contains "$out" "recipe/ is the ground floor, but includes c/" "the report"
}

run_case "recipe/ is the ground floor and no folder include closes a cycle beyond the shrinking list" case_source_tree
run_case "the check names a cycle edge by file, a stale entry, and an include from recipe/" \
  case_check_finds_cycles_and_ground
mr_finish
