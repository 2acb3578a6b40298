#!/usr/bin/env bash
# The unit suites under AddressSanitizer and UndefinedBehaviorSanitizer
# (docs/reliability.md): configures build-asan/ once with meson's
# b_sanitize=address,undefined, builds the unit-test binary, the programs it
# starts and `meshrun`, and runs every `meson test --suite unit` entry.
#   scripts/sanitize.sh [NAME...]    some unit suites only, e.g. hooks recipe
# Every UBSan report aborts the test (halt_on_error), as ASan's do.
# Excluded, by necessity: code inside the torch wheel and the system
# libraries is not instrumented (only its calls into meshrun's code are
# checked), and leaks inside them are suppressed (scripts/lsan.supp: torch's
# registries and CUDA-less stubs are allocated once per process by design;
# Open MPI's tables at finalize). Skipped under ASan: the glibc heap tuning
# test (tests/train/host_memory_test.cpp: ASan replaces malloc). The
# SentencePiece module is opened without RTLD_DEEPBIND there (ASan refuses
# it).
# Needs the packages of scripts/setup.sh --test; a first build takes about
# an hour of CPU (40 minutes on 2 cores), which is why CI does not run it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/build_steps.sh
scripts/setup.sh --test
if [[ ! -f build-asan/build.ninja ]]; then
  echo "meshrun sanitize: configuring build-asan/ (ASan + UBSan)" >&2
  # b_lundef=false: clang/gcc sanitizer runtimes resolve some symbols late.
  # -O1: the sanitizers' usual trade between speed and readable reports.
  quietly meson setup build-asan -Dtests=enabled -Db_sanitize=address,undefined -Db_lundef=false \
    -Doptimization=1 -Dcpp_args=-fno-omit-frame-pointer
fi
build_in build-asan sanitize tests/unit_tests meshrun
suppressions=$PWD/scripts/lsan.supp
options=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0
export LSAN_OPTIONS=suppressions=$suppressions:print_suppressions=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# Open MPI unloads its plugins at MPI_Finalize, leaving their leaks in
# "<unknown module>": kept loaded, the suppressions above can name them.
export OMPI_MCA_mca_base_component_disable_dlclose=1
# Test names of the unit suite (tests/meson.build: one per source folder);
# meson ignores names it does not know, so they are checked here.
mapfile -t known < <(meson test -C build-asan --no-rebuild --suite unit --list 2>/dev/null | sed 's/^meshrun:unit \/ //')
for name in "$@"; do
  [[ " ${known[*]} " == *" $name "* ]] || { echo "meshrun sanitize: no unit suite '$name' (one of: ${known[*]})" >&2; exit 2; }
done
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=("${known[@]}")
# The launch suite starts Open MPI, whose leaks come from libraries without
# frame pointers: its leak stacks need the slow unwinder to reach them (and
# lsan.supp to match), which the rest (Lua hooks allocate gigabytes in
# their budget tests) cannot afford.
fast=() slow=()
for name in "${names[@]}"; do
  if [[ $name == launch ]]; then slow+=("$name"); else fast+=("$name"); fi
done
status=0
run() {
  meson test -C build-asan --no-rebuild --print-errorlogs --num-processes "$(nproc)" --timeout-multiplier 4 \
    --suite unit "$@" || status=1
}
[[ ${#fast[@]} -eq 0 ]] || ASAN_OPTIONS=$options run "${fast[@]}"
[[ ${#slow[@]} -eq 0 ]] || ASAN_OPTIONS=$options:fast_unwind_on_malloc=0 run "${slow[@]}"
exit "$status"
