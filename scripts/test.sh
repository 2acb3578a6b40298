#!/usr/bin/env bash
# The README's second command (and CI's): install what is missing (test
# packages too), build everything, run the whole suite with `meson test`, and
# close with one line that counts the test cases of every suite
# (scripts/test_summary.py).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test || exit
scripts/build.sh --with-tests || exit
meson test -C build --print-errorlogs --num-processes "$(nproc)"
status=$?
/usr/bin/python3 scripts/test_summary.py build/meson-logs/testlog.json
exit "$status"
