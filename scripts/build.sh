#!/usr/bin/env bash
# Configures (once) and builds meshrun in build/. Extra arguments go to
# `meson setup` on the first run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build/build.ninja ]]; then
  meson setup build "$@" >/dev/null
fi
ninja -C build -j "$(nproc)" >/dev/null
