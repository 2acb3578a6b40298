#!/usr/bin/env bash
# Fuzzes the readers of untrusted input (fuzz/README.md): configures (once)
# and builds the libFuzzer targets in build-fuzz/ with clang, replays every
# input kept in fuzz/regressions/TARGET/ once, then fuzzes each target in
# turn for SECONDS on a scratch copy of its seeds (fuzz/corpus/TARGET is
# never written). One line per target; exits 1 when any input crashed.
#   scripts/fuzz.sh [SECONDS]                   default 60 per target
#   FUZZ_TARGETS="jinja launch" scripts/fuzz.sh some targets only
#   FUZZ_RUNS=1000000 scripts/fuzz.sh 3600      each stops after that many runs
# A crashing input and its log are kept in build-fuzz/findings/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
read -r -a targets <<<"${FUZZ_TARGETS:-recipe override safetensors tokenizer jinja jsonl ckpt launch}"

source scripts/lib/build_steps.sh

if [[ ! -f build-fuzz/build.ninja ]]; then
  echo "meshrun fuzz: configuring build-fuzz/ with clang (libFuzzer, ASan, UBSan)" >&2
  CXX=clang++ CC=clang quietly meson setup build-fuzz -Dfuzz=enabled -Dtests=disabled
fi
binaries=()
for target in "${targets[@]}"; do binaries+=("fuzz/${target}_fuzz"); done
build_in build-fuzz fuzz "${binaries[@]}"

# The same limits for replay and fuzzing: what counts as a finding
# (fuzz/README.md) must not depend on how an input was found.
limits=(-rss_limit_mb=2048 -timeout=10)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/meshrun-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
failed=0
for target in "${targets[@]}"; do
  binary=$PWD/build-fuzz/fuzz/${target}_fuzz
  work=$scratch/$target
  findings=build-fuzz/findings/$target
  rm -rf "$findings"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp fuzz/corpus/"$target"/* "$work/corpus/"

  replayed=0
  if compgen -G "fuzz/regressions/$target/*" >/dev/null; then
    regressions=(fuzz/regressions/"$target"/*)
    replayed=${#regressions[@]}
    if ! (cd "$work" && TMPDIR=$work "$binary" "${limits[@]}" "${regressions[@]/#/$OLDPWD/}") >"$work/replay.log" 2>&1; then
      mkdir -p "$findings"
      cp "$work/replay.log" "$findings/replay.log"
      echo "$target: a regression input fails again (log: $findings/replay.log)"
      failed=1
      continue
    fi
  fi

  dictionary=fuzz/$target.dict
  [[ $target == override ]] && dictionary=fuzz/recipe.dict
  options=("${limits[@]}" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/artifacts/")
  [[ -f $dictionary ]] && options+=(-dict="$PWD/$dictionary")
  [[ -n ${FUZZ_RUNS:-} ]] && options+=(-runs="$FUZZ_RUNS")
  status=0
  started=$(date +%s)
  # TMPDIR: a target's scratch files (fuzz/fuzz_support.hpp) go with $scratch,
  # also when a crash ends it before it can clean up.
  (cd "$work" && TMPDIR=$work "$binary" "${options[@]}" corpus) >"$work/fuzz.log" 2>&1 || status=$?
  elapsed=$(($(date +%s) - started))
  runs=$(awk '/^stat::number_of_executed_units:/ {print $2}' "$work/fuzz.log")
  speed=$(awk '/^stat::average_exec_per_sec:/ {print $2}' "$work/fuzz.log")
  rss=$(awk '/^stat::peak_rss_mb:/ {print $2}' "$work/fuzz.log")
  crashes=$(find "$work/artifacts" -type f | wc -l)
  line="$target: ${runs:-?} runs in ${elapsed} s (${speed:-?}/s, peak ${rss:-?} MB), $replayed regression inputs replayed"
  if ((status != 0 || crashes > 0)); then
    mkdir -p "$findings"
    cp "$work"/artifacts/* "$findings/" 2>/dev/null || true
    cp "$work/fuzz.log" "$findings/fuzz.log"
    echo "$line, $crashes crashes (inputs and log: $findings/)"
    failed=1
  else
    echo "$line, 0 crashes"
  fi
done
exit "$failed"
