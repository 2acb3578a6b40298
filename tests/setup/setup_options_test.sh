#!/usr/bin/env bash
# setup_options_test.sh SOURCE_DIR: scripts/setup.sh takes one option at
# most, and refuses any other call with its usage (exit 2) before it
# installs or checks anything: `--test --bench` once installed the test
# packages and silently left out the benchmarks' ones.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../integration/lib/common.sh
source "$here/../integration/lib/common.sh"
SOURCE=$(cd "${1:?usage: setup_options_test.sh SOURCE_DIR}" && pwd)

mr_init setup_options

case_refused() {
  local args
  for args in "--test --bench" "--bench --test" "--bench extra" "--tests" "-t"; do
    # shellcheck disable=SC2086  # the words are the options
    assert_exit 2 "$SOURCE/scripts/setup.sh" $args
    assert_contains "$MR_ERR" "usage: scripts/setup.sh [--test | --bench]" "setup.sh $args"
  done
}

run_case "setup.sh refuses two options and unknown ones with its usage" case_refused
mr_finish
