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

source scripts/lib/build_steps.sh

# The CUDA toolkit's usual prefix, for meson's nvcc (meson.build's
# gpu_kernels: built when nvcc is found, else LibTorch's kernels on CUDA).
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=$PATH:/usr/local/cuda/bin
fi

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
build_in build build "$@"
