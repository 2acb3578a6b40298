#!/usr/bin/env bash
# lora_test.sh MESHRUN: `meshrun recipes/lora-tiny.toml` end to end with
# real processes: rank-16 adapters learn while the base stays frozen; the
# output is the merged model (equal to base + (alpha/r)·B·A, every other
# tensor the base's own) with adapter/ in PEFT format, which `meshrun
# generate BASE --adapter DIR` applies to give the merged model's text. tp 2
# and ZeRO-3 give the dp 2 curve; a run killed mid-way resumes to the same
# curve and weights; DPO and the PPO actor train adapters too (PPO's engines
# get merged weights); bad settings are lint errors.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
source "$here/lib/common.sh"

mr_meshrun_argument "$0" "$@"
RECIPE=$(realpath "$here/../../recipes/lora-tiny.toml")
BASE=$(realpath "$here/../../recipes/data/tiny-base")
DPO_RECIPE=$(realpath "$here/../../recipes/dpo-tiny.toml")
RM_RECIPE=$(realpath "$here/../../recipes/rm-tiny.toml")
QUICKSTART=$(realpath "$here/../../recipes/quickstart.toml")
export MR_TIMEOUT=240

mr_init lora

# check_adapter DIR RANK ALPHA BASE: DIR/model is the merged model: every
# adapted weight equals BASE's + (ALPHA/RANK)·B·A from DIR/model/adapter
# (PEFT names and shapes), every other tensor BASE's own (BASE: a model
# directory; "-" skips the comparison with the base).
check_adapter() {
  PYTHONPATH="$here/lib" "$MR_PYTHON" - "$@" <<'PY' || fail "the adapter of $1 does not check out"
import json, os, sys
import torch
from safetensors_reader import read_tensors
run, rank, alpha, base = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]

def read(path):
    return {name: tensor.float() for name, tensor in read_tensors(path).items()}

config = json.load(open(os.path.join(run, "model", "adapter", "adapter_config.json")))
assert config["peft_type"] == "LORA" and config["r"] == rank and config["lora_alpha"] == alpha, config
assert sorted(config["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]), config
assert config["base_model_name_or_path"], config
adapter = read(os.path.join(run, "model", "adapter", "adapter_model.safetensors"))
merged = read(os.path.join(run, "model", "model.safetensors"))
modules = sorted({name[len("base_model.model."):-len(".lora_A.weight")] for name in adapter if name.endswith(".lora_A.weight")})
layers = json.load(open(os.path.join(run, "model", "config.json")))["num_hidden_layers"]
assert len(modules) == 7 * layers and len(adapter) == 2 * len(modules), sorted(adapter)
moved = 0
reference = read(os.path.join(base, "model.safetensors")) if base != "-" else None
for module in modules:
    a = adapter[f"base_model.model.{module}.lora_A.weight"]
    b = adapter[f"base_model.model.{module}.lora_B.weight"]
    w = merged[f"{module}.weight"]
    assert a.shape == (rank, w.shape[1]) and b.shape == (w.shape[0], rank), (module, a.shape, b.shape, w.shape)
    moved += float(b.abs().max()) > 0
    if reference is not None:
        expect = reference[f"{module}.weight"] + (alpha / rank) * (b @ a)
        assert torch.allclose(w, expect, rtol=1e-5, atol=1e-6), (module, float((w - expect).abs().max()))
assert moved == len(modules), f"only {moved} of {len(modules)} adapters moved"
if reference is not None:
    assert set(reference) == set(merged), set(reference) ^ set(merged)
    for name in merged:
        if name[: -len(".weight")] not in modules:
            assert torch.equal(merged[name], reference[name]), f"{name} is not the frozen base's"
print(f"{len(modules)} adapted modules, merged = base + (alpha/r)·B·A")
PY
}

# the_same DIR_A DIR_B: per-step losses within 1e-5 (relative) and final
# merged weights and adapters within 1e-4 (absolute: Adam's normalised steps
# carry fp32 reductions taken in another order; a wrong split is off by far
# more).
the_same() {
  PYTHONPATH="$here/lib" "$MR_PYTHON" - "$1" "$2" <<'PY' || fail "runs $1 and $2 differ"
import json, sys
import torch
from safetensors_reader import read_tensors
runs = [[json.loads(line) for line in open(run + "/metrics.jsonl")] for run in sys.argv[1:]]
assert len(runs[0]) == len(runs[1]) > 0, [len(r) for r in runs]
for step, (a, b) in enumerate(zip(*runs), 1):
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]), (step, a["loss"], b["loss"])
for name in ("model/model.safetensors", "model/adapter/adapter_model.safetensors"):
    x, y = (read_tensors(run + "/" + name) for run in sys.argv[1:])
    assert x.keys() == y.keys()
    for key in x:
        assert torch.allclose(x[key], y[key], rtol=1e-3, atol=1e-4), (name, key, float((x[key] - y[key]).abs().max()))
PY
}

# lora-tiny as shipped: the loss falls (about half as far as training the
# whole model would take it in those steps), the merge is exact.
case_lora_tiny() {
  run_recipe tiny "$RECIPE"
  assert_contains "$MR_ERR$MR_OUT" "the LoRA adapter to" "the run's log"
  "$MR_PYTHON" - "$MR_TMP/tiny" <<'PY' || fail "lora-tiny does not learn"
import json, sys
losses = [json.loads(line)["loss"] for line in open(sys.argv[1] + "/metrics.jsonl")]
first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
print(f"loss {first:.4f} -> {last:.4f} over {len(losses)} steps")
assert last < 0.97 * first, (first, last)
PY
  check_adapter "$MR_TMP/tiny" 16 32 "$BASE"
  # The plan counts optimizer state for the adapters only.
  assert_exit 0 "$MESHRUN" plan "$RECIPE"
  assert_contains "$MR_OUT" "lora:" "the plan"
  assert_contains "$MR_OUT" "trained parameters, the base frozen" "the plan"
}

# Another rank and alpha on the bf16 base, the merge exact again; generating
# with BASE --adapter gives the merged model's text.
case_merge_and_generate() {
  run_recipe r4 "$RECIPE" --set roles.actor.lora_rank=4 --set roles.actor.lora_alpha=8 --set train.max_steps=12
  check_adapter "$MR_TMP/r4" 4 8 "$BASE"
  # 32 training prompts, sampled with one seed: enough text to tell the models apart.
  head -32 "$BASE/../sft_tiny.jsonl" >"$MR_TMP/prompts.jsonl"
  local options=(--prompts "$MR_TMP/prompts.jsonl" --input-key input --tokenizer builtin:bytes --max-new-tokens 16
                 --temperature 1 --seed 7 --format jsonl)
  assert_exit 0 "$MESHRUN" generate "$MR_TMP/r4/model" "${options[@]}"
  local merged=$MR_OUT
  assert_exit 0 "$MESHRUN" generate "$BASE" --adapter "$MR_TMP/r4/model/adapter" "${options[@]}"
  [[ $MR_OUT == "$merged" ]] || fail "generate --adapter differs from the merged model: $(diff <(echo "$MR_OUT") <(echo "$merged") | head -4)"
  assert_exit 0 "$MESHRUN" generate "$BASE" "${options[@]}"
  [[ $MR_OUT != "$merged" ]] || fail "the base alone generates what the adapted model does"
  log "merged and --adapter: the same $(wc -l <<<"$merged") responses, $(grep -o '"tokens":[0-9]*' <<<"$merged" | awk -F: '{ s += $2 } END { print s }') tokens"
  assert_exit 1 "$MESHRUN" generate "$BASE" --adapter "$MR_TMP/no-such-adapter" "${options[@]}"
  assert_contains "$MR_ERR" "adapter_config.json: no such file" "generate's error"
}

case_layouts() {
  local settings=(--set train.max_steps=8)
  run_recipe dp2 "$RECIPE" "${settings[@]}"
  run_recipe tp2 "$RECIPE" "${settings[@]}" --set mesh.tp=2
  the_same "$MR_TMP/dp2" "$MR_TMP/tp2"
  run_recipe zero3 "$RECIPE" "${settings[@]}" --set roles.actor.zero_stage=3
  the_same "$MR_TMP/dp2" "$MR_TMP/zero3"
}

case_kill_and_resume() {
  kill_and_resume lora "$RECIPE"
  local run=$MR_TMP/lora-killed
  for file in model/model.safetensors model/adapter/adapter_model.safetensors; do
    cmp -s "$MR_TMP/lora-straight/$file" "$run/$file" || fail "$file differs"
  done
  # Rank files hold the adapters alone: ckpt convert says where the model is.
  assert_exit 1 "$MESHRUN" ckpt convert "$run/checkpoints" "$MR_TMP/converted"
  assert_contains "$MR_ERR" "holds the LoRA adapters of actor only, not a whole model" "ckpt convert's error"
}

case_dpo() {
  run_recipe dpo "$DPO_RECIPE" --set roles.actor.lora_rank=8 --set roles.actor.learning_rate=1e-2 \
    --set train.max_steps=16
  # The reference is the actor's own base with the adapters off, not a copy.
  assert_contains "$MR_ERR" "reference the actor's base with its adapters off" "the run's log"
  "$MR_PYTHON" - "$MR_TMP/dpo" <<'PY' || fail "DPO with LoRA does not check out"
import json, math, os, sys
rows = [json.loads(line) for line in open(sys.argv[1] + "/metrics.jsonl")]
assert abs(rows[0]["loss"] - math.log(2)) < 1e-6, rows[0]
print(f"loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}, accuracy {rows[-1]['reward_accuracy']}")
assert rows[-1]["loss"] < rows[0]["loss"], [r["loss"] for r in rows]
assert os.path.isfile(sys.argv[1] + "/model/adapter/adapter_model.safetensors")
PY
}

case_lint() {
  assert_exit 1 "$MESHRUN" lint "$RECIPE" --set 'roles.actor.lora_targets=["q_proj", "qproj"]'
  assert_contains "$MR_OUT$MR_ERR" '"qproj" names no projection of a Llama-style decoder layer [lora.target]' "lint"
  assert_contains "$MR_OUT$MR_ERR" 'did you mean "q_proj"?' "lint"
  assert_exit 1 "$MESHRUN" lint "$RECIPE" --set roles.actor.lora_rank=65
  assert_contains "$MR_OUT$MR_ERR" "lora_rank = 65 exceeds q_proj of tiny-base ([64, 64]): a rank is at most 64 [lora.rank]" "lint"
  assert_exit 1 "$MESHRUN" lint "$RM_RECIPE" --set roles.actor.lora_rank=8
  assert_contains "$MR_OUT$MR_ERR" "[lora.unsupported]" "lint"
}

# The PPO actor trains adapters; the engines get the merged weights each
# step, so their log-probs still agree with the actor's recomputation.
case_ppo() {
  run_recipe ppo "$QUICKSTART" --set roles.actor.lora_rank=8 --set roles.actor.learning_rate=1e-2 \
    --set train.max_steps=6
  PYTHONPATH="$MR_LIB" "$MR_PYTHON" - "$MR_TMP/ppo" <<'PY' || fail "PPO with LoRA does not check out"
import json, os, sys
from logprob_parity import check_logprob_parity
rows = [json.loads(line) for line in open(sys.argv[1] + "/metrics.jsonl")]
assert len(rows) == 6, len(rows)
check_logprob_parity(rows)
assert os.path.isfile(sys.argv[1] + "/model/adapter/adapter_model.safetensors")
PY
  assert_contains "$MR_ERR$MR_OUT" "the LoRA adapter to" "the run's log"
  check_adapter "$MR_TMP/ppo" 8 16 -  # every adapter moved: the parity above is not that of a still model
}

run_case "lora-tiny learns with a frozen base; merged model and PEFT adapter; the plan" case_lora_tiny
run_case "merged = base + (alpha/r)·B·A exactly; generate --adapter gives the merged model's text" case_merge_and_generate
run_case "tp 2 and ZeRO-3 give the dp 2 curve and weights" case_layouts
run_case "kill -9 mid-run and resume: the same curve, adapter and merged weights" case_kill_and_resume
run_case "DPO trains adapters: ln 2 at step 1, learns" case_dpo
run_case "the PPO actor trains adapters; engines get merged weights (log-prob parity)" case_ppo
run_case "a target that names no module, a rank larger than the layer, a reward model: lint errors" case_lint
mr_finish
