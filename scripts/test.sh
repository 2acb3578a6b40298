#!/usr/bin/env bash
# The README's second command (and CI's): install what is missing, build,
# run the whole test suite with `meson test`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec meson test -C build --print-errorlogs --num-processes "$(nproc)"
