#!/usr/bin/env bash
# gpu_jobs_test.sh MESHRUN: meshrun jobs on the GPUs of this machine (the gpu
# suite; every case is skipped, and the suite reports SKIP, where meshrun
# sees no GPU or was built without CUDA):
#   - NCCL groups on every axis of the plan (`meshrun check`: world, role and
#     mesh-axis groups, each collective verified), with 2 ranks;
#   - SFT on CUDA in bf16 (fp32 master weights) follows the fp32 CPU loss
#     curve within bf16 tolerance, on 1 rank and on 2 ranks (dp 2 over NCCL);
#   - exact resume on CUDA: a run stopped at its step-8 checkpoint and run
#     again ends with the straight run's losses and weights, bit for bit;
#   - meshrun generate with CUDA graphs samples what --eager samples.
# Two ranks need two GPUs: meshrun gives each local rank its own device, and
# NCCL (since 2.5) refuses two ranks of one communicator on one device
# ("Duplicate GPU detected"), so on a single-GPU machine the 2-rank cases
# are skipped, saying so. Sequence parallelism's CUDA code still runs there:
# gpu_unit starts two sp ranks sharing the GPU over Gloo.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../integration/lib/common.sh
source "$here/../integration/lib/common.sh"

mr_meshrun_argument "$0" "$@"
RECIPE=$(realpath "$here/../../recipes/sft-tiny.toml")
export MR_TIMEOUT=300

mr_init gpu

GPUS=$("$MESHRUN" --version | sed -n 's/^cuda: compiled .*, \([0-9]*\) GPUs visible$/\1/p')
require_gpu() { [[ ${GPUS:-0} -ge 1 ]] || skip "no GPU visible to meshrun ($("$MESHRUN" --version | grep '^cuda'))"; }

# run_sft NAME [--set ...]: sft-tiny into MR_TMP/NAME, 32 steps, a loss per step.
run_sft() {
  local name=$1
  shift
  isolate "$MR_TMP/$name"
  assert_exit 0 "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set logging.steps=1 --set train.max_steps=32 "$@"
}

# on_gpus PROCS: the --set overrides of a CUDA job of PROCS ranks.
on_gpus() {
  ON_GPUS=(--set launch.device=cuda --set launch.backend=nccl --set "launch.procs_per_node=$1")
}

# require_gpus N: skip unless meshrun sees N GPUs (one per NCCL rank).
require_gpus() {
  require_gpu
  [[ $GPUS -ge $1 ]] || skip "$1 NCCL ranks need $1 GPUs (NCCL refuses two ranks on one device); this machine shows $GPUS"
}

# close_curves A B TOLERANCE: per-step losses agree within TOLERANCE (relative).
close_curves() {
  "$MR_PYTHON" - "$1" "$2" "$3" <<'PY' || fail "loss curves of $1 and $2 differ by more than $3"
import json, sys
a, b, tolerance = sys.argv[1], sys.argv[2], float(sys.argv[3])
curves = [[json.loads(line)["loss"] for line in open(run + "/metrics.jsonl")] for run in (a, b)]
assert len(curves[0]) == len(curves[1]) > 0, [len(c) for c in curves]
worst = max(abs(x - y) / abs(x) for x, y in zip(*curves))
print(f"largest relative loss difference {worst:.4f} over {len(curves[0])} steps")
assert worst <= tolerance, worst
PY
}

case_nccl_groups() {
  require_gpus 2
  on_gpus 2
  local rc=0
  with_timeout "$MR_TIMEOUT" "$MESHRUN" check "$RECIPE" "${ON_GPUS[@]}" \
    --set "launch.master_port=$(free_port)" >"$MR_TMP/check.out" 2>"$MR_TMP/check.err" || rc=$?
  MR_OUT=$(<"$MR_TMP/check.out") MR_ERR=$(<"$MR_TMP/check.err")
  if ((rc != 0)); then
    fail "meshrun check on 2 GPUs exited $rc: $MR_ERR"
  fi
  assert_contains "$MR_OUT$MR_ERR" "world of 2 on cuda with nccl" "check's report"
  assert_contains "$MR_OUT$MR_ERR" "checked, all passed" "check's report"
}

case_sft_bf16_one_rank() {
  require_gpu
  run_sft cpu1 --set launch.procs_per_node=1
  on_gpus 1
  run_sft gpu1 "${ON_GPUS[@]}" --set roles.actor.dtype=bf16
  close_curves "$MR_TMP/cpu1" "$MR_TMP/gpu1" 0.05
}

case_sft_bf16_two_ranks() {
  require_gpus 2
  [[ -f $MR_TMP/cpu2/metrics.jsonl ]] || run_sft cpu2
  on_gpus 2
  isolate "$MR_TMP/gpu2"
  local rc=0
  "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set logging.steps=1 --set train.max_steps=32 "${ON_GPUS[@]}" \
    --set roles.actor.dtype=bf16 >"$MR_TMP/gpu2.out" 2>"$MR_TMP/gpu2.err" || rc=$?
  MR_OUT=$(<"$MR_TMP/gpu2.out") MR_ERR=$(<"$MR_TMP/gpu2.err")
  if ((rc != 0)); then
    fail "2-rank SFT on CUDA exited $rc: $MR_ERR"
  fi
  close_curves "$MR_TMP/cpu2" "$MR_TMP/gpu2" 0.05
}

# Sequence parallelism on CUDA (2 ranks over NCCL, the fused attention
# with a rectangular mask): the fp32 CPU dp 2 curve within bf16 tolerance.
case_sft_sp2_bf16() {
  require_gpus 2
  [[ -f $MR_TMP/cpu2/metrics.jsonl ]] || run_sft cpu2
  on_gpus 2
  isolate "$MR_TMP/gpu_sp2"
  local rc=0
  "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set logging.steps=1 --set train.max_steps=32 "${ON_GPUS[@]}" \
    --set roles.actor.dtype=bf16 --set mesh.sp=2 >"$MR_TMP/gpu_sp2.out" 2>"$MR_TMP/gpu_sp2.err" || rc=$?
  MR_OUT=$(<"$MR_TMP/gpu_sp2.out") MR_ERR=$(<"$MR_TMP/gpu_sp2.err")
  if ((rc != 0)); then
    fail "2-rank SFT at sp 2 on CUDA exited $rc: $MR_ERR"
  fi
  close_curves "$MR_TMP/cpu2" "$MR_TMP/gpu_sp2" 0.05
}

case_exact_resume() {
  require_gpu
  on_gpus 1
  run_sft straight "${ON_GPUS[@]}" --set roles.actor.dtype=bf16 --set checkpoint.save_steps=8
  # The interrupted run: killed once its step-16 checkpoint is committed,
  # then started again unchanged.
  local run=$MR_TMP/resumed pid
  isolate "$run"
  setsid "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set logging.steps=1 --set train.max_steps=32 "${ON_GPUS[@]}" \
    --set roles.actor.dtype=bf16 --set checkpoint.save_steps=8 >"$MR_TMP/resumed.log" 2>&1 &
  pid=$!
  wait_until 120 "the step 16 checkpoint" test -d "$run/checkpoints/global_step_16" || fail "no checkpoint at step 16"
  kill -9 -- "-$pid"
  wait "$pid" || true
  run_sft resumed "${ON_GPUS[@]}" --set roles.actor.dtype=bf16 --set checkpoint.save_steps=8
  assert_contains "$MR_ERR" "checkpoint: resuming from" "the resumed run's log"
  "$MR_PYTHON" - "$MR_TMP/straight" "$MR_TMP/resumed" <<'PY' || fail "the resumed run differs from the straight one"
import json, sys
import torch
from safetensors_reader import read_tensors
a, b = sys.argv[1:]
curves = [[json.loads(line)["loss"] for line in open(run + "/metrics.jsonl")] for run in (a, b)]
assert curves[0] == curves[1], (curves[0], curves[1])
wa, wb = read_tensors(a + "/model/model.safetensors"), read_tensors(b + "/model/model.safetensors")
assert wa.keys() == wb.keys()
for name in wa:
    assert torch.equal(wa[name], wb[name]), name
print(f"{len(curves[0])} steps and {len(wa)} tensors identical")
PY
}

# meshrun generate on CUDA: decode steps replayed from CUDA graphs (the
# default) sample what --eager samples, greedy and seeded, 4 samples a prompt.
case_generate_graphs() {
  require_gpu
  local args=(generate builtin:tiny --tokenizer builtin:bytes --device cuda --max-new-tokens 24 --num-samples 4
              --batch 8 --format jsonl --seed 3)
  for temperature in 0 1; do
    "$MESHRUN" "${args[@]}" --temperature "$temperature" --prompt "ab" >"$MR_TMP/graphs.jsonl" || fail "generate failed"
    "$MESHRUN" "${args[@]}" --temperature "$temperature" --prompt "ab" --eager >"$MR_TMP/eager.jsonl" ||
      fail "generate --eager failed"
    cmp -s "$MR_TMP/graphs.jsonl" "$MR_TMP/eager.jsonl" ||
      fail "temperature $temperature: CUDA graphs and --eager sampled differently: $(diff "$MR_TMP/graphs.jsonl" "$MR_TMP/eager.jsonl" | head -4)"
  done
}

export PYTHONPATH="$here/../integration/lib${PYTHONPATH:+:$PYTHONPATH}"
run_case "NCCL: every group of the plan built and verified on 2 ranks" case_nccl_groups
run_case "SFT, 1 rank: CUDA bf16 follows the fp32 CPU loss curve" case_sft_bf16_one_rank
run_case "SFT, 2 ranks (dp 2 over NCCL): CUDA bf16 follows the fp32 CPU loss curve" case_sft_bf16_two_ranks
run_case "SFT, 2 ranks at sp 2 over NCCL: CUDA bf16 follows the fp32 CPU loss curve" case_sft_sp2_bf16
run_case "CUDA: resume from a checkpoint ends exactly as the straight run" case_exact_resume
run_case "generate on CUDA: CUDA graph decode steps sample what --eager samples" case_generate_graphs
mr_finish
