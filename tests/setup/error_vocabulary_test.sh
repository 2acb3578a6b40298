#!/usr/bin/env bash
# error_vocabulary_test.sh SOURCE_DIR: one error vocabulary in use (issue
# #35). Every failure meshrun throws is a meshrun::Error kind
# (include/meshrun/error.hpp), or std::logic_error for a meshrun bug; a
# `throw std::runtime_error`, `std::invalid_argument`, `std::out_of_range` or
# `std::length_error` in src/ fails this test, naming file:line, unless its
# file or folder is on tests/setup/error_vocabulary_allowed.txt ("path:
# reason" a line; a path ending in / covers the folder). An entry whose path
# no longer holds such a throw fails too, so the list only shrinks.
# (Third-party code may still throw those types: meshrun catches them at the
# boundary and throws its own.)
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../integration/lib/common.sh
source "$here/../integration/lib/common.sh"
SOURCE=$(cd "${1:?usage: error_vocabulary_test.sh SOURCE_DIR}" && pwd)
ALLOWED=tests/setup/error_vocabulary_allowed.txt

mr_init error_vocabulary

# throws_in ROOT: "path:line" (path relative to ROOT) of every throw of a
# standard error type under ROOT/src, leaving out those in // comments.
throws_in() {
  local hits
  hits=$(cd "$1" && grep -rnE --include='*.cpp' --include='*.hpp' --include='*.h' --include='*.cc' \
    'throw[[:space:]]+std::(runtime_error|invalid_argument|out_of_range|length_error)\b' src) || true
  [[ -n $hits ]] || return 0
  awk '{
    text = $0
    sub(/^[^:]*:[^:]*:/, "", text)
    if (substr(text, 1, index(text, "throw") - 1) ~ /\/\//) next
    split($0, part, ":")
    print part[1] ":" part[2]
  }' <<<"$hits"
}

# check_tree ROOT LIST: prints each throw LIST does not allow and each LIST
# entry without a throw; fails when there is any.
check_tree() {
  local root=$1 list=$2 problems=0 entry path hit file allowed
  local -a paths=()
  local -A used=()
  while IFS= read -r entry; do
    [[ $entry =~ ^[[:space:]]*(#|$) ]] && continue
    if [[ $entry != *": "?* ]]; then
      echo "$list: '$entry' is not 'path: reason'"
      problems=1
      continue
    fi
    paths+=("${entry%%: *}")
  done <"$list"
  while IFS= read -r hit; do
    [[ -n $hit ]] || continue
    file=${hit%%:*}
    allowed=0
    for path in "${paths[@]}"; do
      if [[ $file == "$path" || ($path == */ && $file == "$path"*) ]]; then
        allowed=1
        used[$path]=1
      fi
    done
    if ((!allowed)); then
      echo "$hit: throws a standard error type; throw a meshrun::Error kind (include/meshrun/error.hpp)," \
        "std::logic_error for a meshrun bug, or list the file in $ALLOWED with the reason"
      problems=1
    fi
  done < <(throws_in "$root")
  for path in "${paths[@]}"; do
    if [[ -z ${used[$path]:-} ]]; then
      echo "$list: $path holds no such throw any more; take it off the list"
      problems=1
    fi
  done
  return "$problems"
}

case_source_tree() {
  local problems
  if ! problems=$(check_tree "$SOURCE" "$SOURCE/$ALLOWED"); then
    fail "$(printf '\n%s' "$problems")"
  fi
}

# A tree of its own: src/a.cpp throws std::runtime_error on line 3 (and on
# line 4 only in a comment), src/skip/b.cpp std::invalid_argument.
fake_tree() {
  mkdir -p "$1/src/skip"
  printf '%s\n' '#include <stdexcept>' 'void f(bool x) {' '  if (x) throw std::runtime_error("x");' \
    '  // throw std::out_of_range("only in a comment");' '  throw std::logic_error("a bug");' '}' >"$1/src/a.cpp"
  printf '%s\n' 'void g() { throw std::invalid_argument("y"); }' >"$1/src/skip/b.cpp"
}

case_unlisted_throw_fails() {
  local root=$MR_TMP/unlisted out rc=0
  fake_tree "$root"
  printf '%s\n' '# comment' '' 'src/skip/: being converted elsewhere' >"$root/allowed.txt"
  out=$(check_tree "$root" "$root/allowed.txt") || rc=$?
  ((rc != 0)) || fail "an unlisted throw passed: $out"
  assert_contains "$out" "src/a.cpp:3: throws a standard error type" "the report"
  assert_not_contains "$out" "src/a.cpp:4" "the report"
  assert_not_contains "$out" "src/a.cpp:5" "the report"
  assert_not_contains "$out" "src/skip/b.cpp" "the report"
  printf '%s\n' 'src/skip/: being converted elsewhere' 'src/a.cpp: on purpose' >"$root/allowed.txt"
  out=$(check_tree "$root" "$root/allowed.txt") || fail "a listed throw failed: $out"
}

case_stale_entry_fails() {
  local root=$MR_TMP/stale out rc=0
  fake_tree "$root"
  printf '%s\n' 'src/skip/: elsewhere' 'src/a.cpp: on purpose' 'src/gone.cpp: converted since' 'src/bare.cpp' \
    >"$root/allowed.txt"
  out=$(check_tree "$root" "$root/allowed.txt") || rc=$?
  ((rc != 0)) || fail "a stale entry passed: $out"
  assert_contains "$out" "src/gone.cpp holds no such throw any more" "the report"
  assert_contains "$out" "'src/bare.cpp' is not 'path: reason'" "the report"
}

run_case "src/ throws standard error types only where the allow-list says why" case_source_tree
run_case "the check names an unlisted throw by file:line (comments and std::logic_error aside)" \
  case_unlisted_throw_fails
run_case "the check refuses allow-list entries without a throw or without a reason" case_stale_entry_fails
mr_finish
