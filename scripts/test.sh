#!/usr/bin/env bash
# The README's second command (and CI's): install what is missing, build,
# run the whole test suite with `meson test`, and close with one line that
# counts the test cases of every suite.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit
scripts/build.sh || exit
meson test -C build --print-errorlogs --num-processes "$(nproc)"
status=$?
# doctest prints "test cases: N | P passed | F failed | S skipped" per suite.
grep -hoE 'test cases: +[0-9]+ \| +[0-9]+ passed \| +[0-9]+ failed' build/meson-logs/testlog.txt |
  awk '{passed += $5; failed += $8} END {printf "tests: %d passed, %d failed\n", passed, failed}'
exit "$status"
