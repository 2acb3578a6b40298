#!/usr/bin/env bash
# device_script_test.sh SOURCE_DIR: `scripts/device.sh run`'s schedule, on a
# copy of the script in a tree of stand-in programs (no GPU needed): the
# parts run most wanted first, each under min(its timeout, what is left of
# DEVICE_SECONDS); a part with less than its minimum left is skipped and
# says so; DEVICE_ONLY picks parts; every part's log lands in $OUT. A lent
# device's 15 minutes are too few to learn any of this there.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../integration/lib/common.sh
source "$here/../integration/lib/common.sh"
SOURCE=$(cd "${1:?usage: device_script_test.sh SOURCE_DIR}" && pwd)

mr_init device_script

# A tree with scripts/device.sh, prebuilt stand-ins in .device/bin and a
# python3 that reports a torch version; each stand-in appends its name and
# arguments to calls.txt and sleeps STUB_SLEEP_<name> seconds (default 0).
make_tree() {
  local tree=$1 program
  mkdir -p "$tree/scripts" "$tree/.device/bin" "$tree/.device/lib" "$tree/tests/gpu" "$tree/bench" "$tree/fakebin"
  cp "$SOURCE/scripts/device.sh" "$tree/scripts/"
  echo "9.9.9+stub" >"$tree/.device/torch-version"
  for program in meshrun gpu_tests train_bench rollout_bench sp_model_worker; do
    cat >"$tree/.device/bin/$program" <<EOF
#!/usr/bin/env bash
echo "$program \$* MESHRUN_CUDA_KERNELS=\${MESHRUN_CUDA_KERNELS:-}" >>"$tree/calls.txt"
sleep "\${STUB_SLEEP_$program:-0}"
echo "$program done"
EOF
    chmod +x "$tree/.device/bin/$program"
  done
  cat >"$tree/tests/gpu/gpu_jobs_test.sh" <<EOF
echo "gpu_jobs_test \$*" >>"$tree/calls.txt"
EOF
  cat >"$tree/fakebin/python3" <<'EOF'
#!/usr/bin/env bash
case $* in
  *device_count*) echo 0 ;;
  *path.join*) echo /nonexistent/torch/lib ;;
  *) echo 9.9.9+stub ;;
esac
EOF
  chmod +x "$tree/fakebin/python3"
}

# run_device TREE [VAR=VALUE...]: scripts/device.sh run there, OUT=TREE/out.
run_device() {
  local tree=$1
  shift
  mkdir -p "$tree/out"
  env PATH="$tree/fakebin:$PATH" OUT="$tree/out" "$@" bash "$tree/scripts/device.sh" run >"$tree/stdout" 2>&1
}

case_order() {
  local tree=$MR_TMP/order
  make_tree "$tree"
  run_device "$tree" || fail "device.sh run failed: $(cat "$tree/stdout")"
  # The most wanted first: the gpu suite, the 1B step, the rollout decode,
  # the CUDA jobs, the heads with the kernels on then off, the 8B step.
  local order
  order=$(awk '{print $1, ($0 ~ /--heads/ ? "heads" : ""), ($0 ~ /8B/ ? "8B" : ""),
                ($0 ~ /MESHRUN_CUDA_KERNELS=0/ ? "off" : "")}' "$tree/calls.txt" | tr -s ' ' | paste -sd, -)
  local wanted="meshrun ,gpu_tests ,train_bench ,rollout_bench ,gpu_jobs_test ,train_bench heads ,train_bench heads off,train_bench 8B "
  [[ $order == "$wanted" ]] || fail "order: $order (wanted $wanted)"
  local log
  for log in gpu-unit.log train-bench-gpu.txt rollout-bench-gpu.txt gpu-jobs.log train-bench-heads.txt \
             train-bench-heads-no-kernels.txt train-bench-8b.txt version.txt; do
    [[ -f $tree/out/$log ]] || fail "no $log in OUT"
  done
  assert_contains "$(cat "$tree/out/train-bench-gpu.txt")" "train_bench done" "the 1B step's log"
  assert_contains "$(grep '^train_bench' "$tree/calls.txt" | head -1)" "--shape 1B --rounds 1 --steps 8" "the 1B step's arguments"
  [[ ! -f $tree/out/skipped.txt ]] || fail "a part was skipped with the whole budget: $(cat "$tree/out/skipped.txt")"
}

case_budget() {
  local tree=$MR_TMP/budget
  make_tree "$tree"
  # The gpu suite (its minimum 10 s) would sleep past the whole budget:
  # the part is cut at what is left, not at its own 150 s, and every part
  # after it is skipped with a reason instead of running past the budget.
  local start=$SECONDS
  run_device "$tree" DEVICE_SECONDS=12 STUB_SLEEP_gpu_tests=60 || fail "device.sh run failed: $(cat "$tree/stdout")"
  ((SECONDS - start < 20)) || fail "the run took $((SECONDS - start))s with a 12s budget"
  assert_contains "$(cat "$tree/stdout")" "device.sh: unit exit 124" "the cut part"
  assert_contains "$(cat "$tree/out/skipped.txt")" "bench skipped:" "the skipped 1B step"
  assert_contains "$(cat "$tree/out/skipped.txt")" "big skipped:" "the skipped 8B step"
  [[ $(grep -c '^train_bench' "$tree/calls.txt") == 0 ]] || fail "a benchmark ran past the budget"
}

case_only() {
  local tree=$MR_TMP/only
  make_tree "$tree"
  run_device "$tree" DEVICE_ONLY="rollout big" || fail "device.sh run failed: $(cat "$tree/stdout")"
  local ran
  ran=$(grep -v '^meshrun' "$tree/calls.txt" | awk '{print $1}' | paste -sd, -)
  [[ $ran == "rollout_bench,train_bench" ]] || fail "DEVICE_ONLY='rollout big' ran: $ran"
  assert_contains "$(grep '^train_bench' "$tree/calls.txt")" "--shape 8B" "the 8B step"
}

run_case "device.sh run: parts most wanted first, a log each in OUT" case_order
run_case "device.sh run: a part is cut at the budget, the rest skipped with a reason" case_budget
run_case "device.sh run: DEVICE_ONLY picks the parts" case_only
mr_finish
