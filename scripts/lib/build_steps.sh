# shellcheck shell=bash
# Steps the build scripts share (scripts/build.sh, fuzz.sh, sanitize.sh):
# quiet on success, the tool's own output on failure. Source it.

# quietly COMMAND...: runs it, showing its output only when it fails (then exits 1).
quietly() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}

# build_in DIR WHO [TARGET...]: ninja in DIR, saying so first when there is
# something to compile, and showing only the failures' lines when it fails.
build_in() {
  local dir=$1 who=$2 log
  shift 2
  if ninja -C "$dir" -n "$@" 2>/dev/null | grep '^\[1/' >/dev/null; then  # grep -q would end ninja early (pipefail)
    echo "meshrun $who: compiling ${*:-everything} in $dir/ (a first build takes a while on few cores)" >&2
  fi
  log=$(mktemp)
  if ! ninja -C "$dir" -j "$(nproc)" "$@" >"$log" 2>&1; then
    grep -E -A8 'FAILED|error' "$log" | head -120 >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}
