#!/usr/bin/env bash
# preference_test.sh MESHRUN: `meshrun recipes/dpo-tiny.toml` and
# `recipes/rm-tiny.toml` end to end with real processes: 2 local workers
# (dp 2) learn the shipped synthetic preference. DPO: step 1's loss is ln 2
# (policy == reference), reward accuracy reaches 0.9 and every metric is
# logged; the same curve under tp 2, sp 2 and ZeRO-3, with [roles.ref]
# naming the actor's model and with [colocate] sleep; the ipo loss learns
# too. RM: accuracy reaches 0.9, the output is a *ForSequenceClassification
# directory that serves as a PPO reward model, tp 2 and sp 2 give its
# curve. Runs killed mid-way resume to the same curve and weights;
# malformed pair files are located lint errors.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
source "$here/lib/common.sh"

mr_meshrun_argument "$0" "$@"
RECIPE=$(realpath "$here/../../recipes/dpo-tiny.toml")
RM_RECIPE=$(realpath "$here/../../recipes/rm-tiny.toml")
QUICKSTART=$(realpath "$here/../../recipes/quickstart.toml")
export MR_TIMEOUT=240

mr_init preference

# run_dpo NAME [--set ...]: trains dpo-tiny into MR_TMP/NAME.
run_dpo() { run_recipe "$1" "$RECIPE" "${@:2}"; }

# run_rm NAME [--set ...]: trains rm-tiny into MR_TMP/NAME.
run_rm() { run_recipe "$1" "$RM_RECIPE" "${@:2}"; }

# check_learns DIR: every metric on every line, ln 2 at step 1 and an
# accuracy of at least 0.9 over the last 8 steps, a falling loss.
check_learns() {
  "$MR_PYTHON" - "$1" <<'PY' || fail "run in $1 does not check out"
import json, math, os, sys
run = sys.argv[1]
records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
assert len(records) >= 16, len(records)
for i, r in enumerate(records):
    for key in ("loss", "reward_accuracy", "reward_margin", "chosen_reward", "rejected_reward", "lr", "grad_norm"):
        assert isinstance(r.get(key), (int, float)) and math.isfinite(r[key]), f"line {i + 1}: {key} = {r.get(key)!r}"
    assert r["step"] == i + 1, r
first = records[0]
assert abs(first["loss"] - math.log(2)) < 1e-6, f"step 1 loss {first['loss']} is not ln 2"
assert first["reward_margin"] == 0 and first["chosen_reward"] == 0, first
accuracy = sum(r["reward_accuracy"] for r in records[-8:]) / 8
losses = [r["loss"] for r in records]
print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, accuracy over the last 8 steps {accuracy:.3f}")
assert accuracy >= 0.9, accuracy
assert losses[-1] < 0.5 * losses[0], losses
assert all(abs(r["reward_margin"] - (r["chosen_reward"] - r["rejected_reward"])) < 1e-6 for r in records)
# The held-out pairs (data.eval_path) every 16 steps and after the last.
evaluated = [r["step"] for r in records if "eval_loss" in r]
assert evaluated == [16, 32], evaluated
assert records[-1]["eval_reward_accuracy"] >= 0.9, records[-1]
assert records[-1]["eval_loss"] < records[15]["eval_loss"] < math.log(2), (records[15], records[-1])
assert os.path.isfile(os.path.join(run, "model", "config.json")), "no model written"
PY
}

# same_curve DIR_A DIR_B: per-step loss, margin and accuracy within 1e-5
# (relative).
same_curve() {
  "$MR_PYTHON" - "$1" "$2" <<'PY' || fail "runs $1 and $2 differ"
import json, sys
runs = [[json.loads(line) for line in open(run + "/metrics.jsonl")] for run in sys.argv[1:]]
assert len(runs[0]) == len(runs[1]) > 0, [len(r) for r in runs]
for step, (a, b) in enumerate(zip(*runs), 1):
    for key in ("loss", "reward_margin", "reward_accuracy", "margin", "accuracy", "eval_loss"):
        if key not in a:
            continue
        assert abs(a[key] - b[key]) <= 1e-5 * max(1.0, abs(a[key])), f"step {step} {key}: {a[key]} vs {b[key]}"
print(f"{len(runs[0])} steps agree")
PY
}

case_dpo_tiny() {
  run_dpo tiny
  check_learns "$MR_TMP/tiny"
  assert_contains "$MR_ERR" "reference the actor's initial weights" "the run's log"
}

case_layouts() {
  [[ -f $MR_TMP/tiny/metrics.jsonl ]] || run_dpo tiny
  run_dpo tp2 --set mesh.tp=2
  same_curve "$MR_TMP/tiny" "$MR_TMP/tp2"
  run_dpo sp2 --set mesh.sp=2
  same_curve "$MR_TMP/tiny" "$MR_TMP/sp2"
  run_dpo zero3 --set roles.actor.zero_stage=3
  same_curve "$MR_TMP/tiny" "$MR_TMP/zero3"
}

# A [roles.ref] naming the actor's model is the same reference (same seed,
# same weights); [colocate] sleep parks it in host memory between uses.
case_explicit_reference_and_sleep() {
  [[ -f $MR_TMP/tiny/metrics.jsonl ]] || run_dpo tiny
  run_dpo ref --set roles.ref.model=builtin:tiny --set roles.ref.dtype=fp32 --set colocate.sleep=true
  assert_contains "$MR_ERR" "reference builtin:tiny" "the run's log"
  assert_not_contains "$MR_ERR" "warning" "the run's log"
  same_curve "$MR_TMP/tiny" "$MR_TMP/ref"
}

case_ipo() {
  run_dpo ipo --set dpo.loss=ipo --set dpo.beta=0.5
  "$MR_PYTHON" - "$MR_TMP/ipo/metrics.jsonl" <<'PY' || fail "ipo does not learn"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
# Step 1: margin 0, loss (0 - 1/(2β))² = 1.
assert abs(records[0]["loss"] - 1.0) < 1e-6, records[0]["loss"]
accuracy = sum(r["reward_accuracy"] for r in records[-8:]) / 8
assert accuracy >= 0.9 and records[-1]["loss"] < records[0]["loss"], (accuracy, records[-1]["loss"])
PY
}

case_kill_and_resume() {
  kill_and_resume dpo "$RECIPE"
  kill_and_resume rm "$RM_RECIPE"
}

# rm-tiny learns; its output is a sequence-classification model (score
# head [1, hidden]) that PPO loads as its reward model.
case_reward_model() {
  run_rm rm
  "$MR_PYTHON" - "$MR_TMP/rm" <<'PY' || fail "the reward model does not check out"
import json, math, os, struct, sys
run = sys.argv[1]
records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
for r in records:
    for key in ("loss", "accuracy", "margin", "chosen_score", "rejected_score"):
        assert math.isfinite(r[key]), (r["step"], key)
accuracy = sum(r["accuracy"] for r in records[-8:]) / 8
print(f"loss {records[0]['loss']:.4f} -> {records[-1]['loss']:.4f}, accuracy over the last 8 steps {accuracy:.3f}, "
      f"eval accuracy {records[-1]['eval_accuracy']:.3f}")
assert accuracy >= 0.9 and records[-1]["loss"] < 0.5 * records[0]["loss"], accuracy
assert [r["step"] for r in records if "eval_accuracy" in r] == [16, 32]
assert records[-1]["eval_accuracy"] >= 0.9, records[-1]
config = json.load(open(os.path.join(run, "model", "config.json")))
assert config["architectures"] == ["LlamaForSequenceClassification"] and config["num_labels"] == 1, config
with open(os.path.join(run, "model", "model.safetensors"), "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
assert header["score.weight"]["shape"] == [1, config["hidden_size"]], header["score.weight"]
assert "lm_head.weight" not in header
PY
  run_recipe ppo_with_rm "$QUICKSTART" --set "roles.reward.model=$MR_TMP/rm/model" --set roles.reward.dtype=fp32 \
    --set train.max_steps=3
  "$MR_PYTHON" - "$MR_TMP/ppo_with_rm/metrics.jsonl" <<'PY' || fail "PPO did not score with the trained reward model"
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
assert len(records) == 3 and all(r["model_reward_mean"] != 0 for r in records), records
PY
  run_rm rm_tp2 --set mesh.tp=2
  same_curve "$MR_TMP/rm" "$MR_TMP/rm_tp2"
  run_rm rm_sp2 --set mesh.sp=2
  same_curve "$MR_TMP/rm" "$MR_TMP/rm_sp2"
}

# Pair files lint rejects, each problem at its line and key.
case_bad_pairs() {
  local dir=$MR_TMP/bad
  mkdir -p "$dir"
  cat >"$dir/pairs.jsonl" <<'JSONL'
{"prompt": "a", "chosen": "b", "rejected": "c"}
{"prompt": "a", "chosen": "b"}
{"prompt": "a", "chosen": "same", "rejected": "same"}
JSONL
  assert_exit 1 "$MESHRUN" lint "$RECIPE" --set "data.path=$dir/pairs.jsonl"
  assert_contains "$MR_OUT$MR_ERR" "$dir/pairs.jsonl:2: error: key \"rejected\": missing" "lint's report"
  assert_contains "$MR_OUT$MR_ERR" "$dir/pairs.jsonl:3: error: key \"rejected\": is the same as \"chosen\"" \
    "lint's report"
  assert_exit 1 "$MESHRUN" lint "$RECIPE" --set dpo.loss=ipo --set dpo.label_smoothing=0.1
  assert_contains "$MR_OUT$MR_ERR" "[dpo.label-smoothing]" "lint's report"
  # A reference with another tokenizer's vocabulary fails before any process starts.
  assert_exit 1 "$MESHRUN" lint "$RECIPE" --set roles.ref.model=Qwen/Qwen2.5-0.5B
  assert_contains "$MR_OUT$MR_ERR" "the reference Qwen/Qwen2.5-0.5B has a vocabulary of 151936 tokens" "lint's report"
  assert_contains "$MR_OUT$MR_ERR" "[plan.reference]" "lint's report"
}

run_case "dpo-tiny: ln 2 at step 1, the preference learnt (accuracy >= 0.9)" case_dpo_tiny
run_case "tp 2, sp 2 and ZeRO-3 give the dp 2 curve" case_layouts
run_case "an explicit reference and colocate sleep change nothing" case_explicit_reference_and_sleep
run_case "the ipo loss: 1 at step 1, learns" case_ipo
run_case "rm-tiny learns; its output is PPO's reward model; tp 2 and sp 2 give its curve" case_reward_model
run_case "kill -9 mid-run and resume (dpo, rm): the same curve and weights" case_kill_and_resume
run_case "malformed pairs and settings, a reference of another vocabulary: located lint errors" case_bad_pairs
mr_finish
