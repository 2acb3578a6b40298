#!/usr/bin/env bash
# Configures (once) and builds meshrun in build/.
#   scripts/build.sh [TARGET...]                 what the targets need (the
#                                                quickstart builds `meshrun`)
#   scripts/build.sh --with-tests [TARGET...]    with the tests and benchmarks
#                                                configured (scripts/test.sh),
#                                                default: everything
# The tests need the packages of scripts/setup.sh --test; a build/ configured
# before they were there is reconfigured once with -Dtests=enabled (which
# meson.build makes check for doctest again; meson caches header checks).
set -euo pipefail
cd "$(dirname "$0")/.."
tests=auto
if [[ ${1:-} == --with-tests ]]; then
  tests=enabled
  shift
fi

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

if [[ ! -f build/build.ninja ]]; then
  echo "meshrun build: configuring build/ against the torch in .venv" >&2
  quietly meson setup build -Dtests="$tests"
elif [[ $tests == enabled ]]; then
  configured=$(meson introspect --buildoptions build |
               /usr/bin/python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "tests"))')
  if [[ $configured != enabled ]]; then
    echo "meshrun build: configuring build/ with the tests" >&2
    quietly meson configure build --clearcache  # found dependencies (libbenchmark)
    quietly meson setup --reconfigure build -Dtests=enabled
  fi
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
