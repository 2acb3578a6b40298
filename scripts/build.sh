#!/usr/bin/env bash
# Configures (once) and builds meshrun in build/. Arguments are ninja targets
# (default: everything, tests and benchmarks included); the quickstart builds
# only `meshrun`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build/build.ninja ]]; then
  echo "meshrun build: configuring build/ against the torch in .venv" >&2
  log=$(mktemp)
  if ! meson setup build >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
fi
targets=("$@")
if ninja -C build -n "${targets[@]}" 2>/dev/null | grep '^\[1/' >/dev/null; then  # grep -q would end ninja early (pipefail)
  echo "meshrun build: compiling ${targets[*]:-everything} in build/ (a first build takes a while on few cores)" >&2
fi
log=$(mktemp)
if ! ninja -C build -j "$(nproc)" "${targets[@]}" >"$log" 2>&1; then
  grep -E -A8 'FAILED|error' "$log" | head -120 >&2
  rm -f "$log"
  exit 1
fi
rm -f "$log"
