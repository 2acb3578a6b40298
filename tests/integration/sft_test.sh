#!/usr/bin/env bash
# sft_test.sh MESHRUN: `meshrun recipes/sft-tiny.toml` end to end with real
# processes: 2 local workers (dp 2) train the tiny built-in model on the
# shipped JSONL set; the loss falls clearly, metrics.jsonl has every key at
# every logging step, and the final model is a Hugging Face directory whose
# weights match its config.json. Then the same with tp 2, with ZeRO-3 and
# with dp 2 x tp 2 + ZeRO-2 on 4 workers (all three the same loss curve), and
# a malformed data line that must end the job with a located error.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
source "$here/lib/common.sh"

mr_meshrun_argument "$0" "$@"
RECIPE=$(realpath "$here/../../recipes/sft-tiny.toml")
export MR_TIMEOUT=240

mr_init sft

# check_run DIR MIN_DROP: metrics.jsonl in DIR has step, loss, lr, grad_norm
# and tokens_per_s on every line, consecutive steps, and the mean loss of the
# last 3 steps is below the mean of the first 3 by at least MIN_DROP (a
# fraction of the first); the model in DIR/model is a Hugging Face
# directory: config.json and safetensors tensors of the shapes it implies.
check_run() {
  "$MR_PYTHON" - "$1" "$2" <<'EOF' || fail "run in $1 does not check out"
import json, os, struct, sys
run, min_drop = sys.argv[1], float(sys.argv[2])
records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
assert records, "metrics.jsonl is empty"
for i, record in enumerate(records):
    for key in ("step", "loss", "lr", "grad_norm", "tokens_per_s"):
        assert isinstance(record.get(key), (int, float)), f"line {i + 1} lacks a number for {key}: {record}"
    assert record["step"] == i + 1, f"line {i + 1} has step {record['step']}"
losses = [r["loss"] for r in records]
first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
print(f"loss {first:.4f} -> {last:.4f} over {len(losses)} steps")
assert last < first * (1 - min_drop), f"loss did not fall by {min_drop:.0%}: {first:.4f} -> {last:.4f}"

model = os.path.join(run, "model")
config = json.load(open(os.path.join(model, "config.json")))
assert config["architectures"] == ["LlamaForCausalLM"], config
h, v, layers = config["hidden_size"], config["vocab_size"], config["num_hidden_layers"]
kv = config["num_key_value_heads"] * (h // config["num_attention_heads"])
with open(os.path.join(model, "model.safetensors"), "rb") as f:
    size = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(size))
header.pop("__metadata__", None)
expect = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h],
          f"model.layers.{layers - 1}.self_attn.k_proj.weight": [kv, h],
          f"model.layers.0.mlp.down_proj.weight": [h, config["intermediate_size"]]}
if not config.get("tie_word_embeddings"):
    expect["lm_head.weight"] = [v, h]
for name, shape in expect.items():
    assert header.get(name, {}).get("shape") == shape, f"{name}: {header.get(name)} expected shape {shape}"
assert len(header) == 2 + 9 * layers + (0 if config.get("tie_word_embeddings") else 1), sorted(header)
EOF
}

# same_curve DIR_A DIR_B: the two runs' per-step losses agree within 1e-4
# (relative): the SFT loss is the global token mean, whatever the layout.
same_curve() {
  "$MR_PYTHON" - "$1" "$2" <<'EOF' || fail "loss curves of $1 and $2 differ"
import json, sys
curves = [[json.loads(line)["loss"] for line in open(run + "/metrics.jsonl")] for run in sys.argv[1:]]
assert len(curves[0]) == len(curves[1]), curves
for step, (a, b) in enumerate(zip(*curves), 1):
    assert abs(a - b) <= 1e-4 * abs(a), f"step {step}: {a} vs {b}"
EOF
}

# run_sft NAME [--set ...]: trains sft-tiny into MR_TMP/NAME.
run_sft() {
  local name=$1
  shift
  local run=$MR_TMP/$name
  isolate "$run"
  assert_exit 0 "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set logging.steps=1 "$@"
  log "$(grep -o 'loss [0-9.]* → [0-9.]*' <<<"$MR_ERR$MR_OUT" | tail -1)"
}

case_dp2() {
  run_sft dp2
  check_run "$MR_TMP/dp2" 0.3
}

# [data] eval_path: eval_loss every 8 steps and after the last (rows
# written whatever the logging cadence), falling, the same under sp 2 ×
# ZeRO-3; the held-out set is the shipped sft_tiny_eval.jsonl.
case_eval() {
  local eval_set
  eval_set=$(realpath "$here/../../recipes/data/sft_tiny_eval.jsonl")
  local settings=(--set "data.eval_path=$eval_set" --set train.eval_steps=8 --set train.max_steps=24)
  run_sft eval "${settings[@]}" --set logging.steps=5
  run_sft eval_sp2 "${settings[@]}" --set mesh.sp=2 --set roles.actor.zero_stage=3
  "$MR_PYTHON" - "$MR_TMP/eval" "$MR_TMP/eval_sp2" <<'PY' || fail "eval rows do not check out"
import json, sys
a, b = ([json.loads(line) for line in open(run + "/metrics.jsonl")] for run in sys.argv[1:])
rows = [r for r in a if "eval_loss" in r]
assert [r["step"] for r in rows] == [8, 16, 24], [r["step"] for r in a]
assert [r["step"] for r in a] == [5, 8, 10, 15, 16, 20, 24], [r["step"] for r in a]
losses = [r["eval_loss"] for r in rows]
print("eval_loss", " ".join(f"{x:.4f}" for x in losses))
assert losses[-1] < losses[0], losses
other = [r["eval_loss"] for r in b if "eval_loss" in r]
assert all(abs(x - y) <= 1e-4 * x for x, y in zip(losses, other)) and len(other) == 3, (losses, other)
PY
}

# Multi-turn chats: every assistant turn is trained by default, the final one
# with data.loss_turns = "last"; the loss tokens are exactly what the
# built-in chat format gives ("<|role|>\ncontent\n" per message, eos after
# the final reply), counted in the log's data line and the per-step rows.
case_multi_turn() {
  local data=$MR_TMP/multi_turn.jsonl
  "$MR_PYTHON" - "$data" <<'PY'
import json, random, string, sys
rng = random.Random(5)
with open(sys.argv[1], "w") as f:
    for i in range(64):
        turns = []
        for t in range(rng.randint(1, 3)):
            n = rng.randint(2, 5)
            turns += [{"role": "user", "content": f"next {n}"},
                      {"role": "assistant", "content": string.ascii_lowercase[i % 20:i % 20 + n]}]
        f.write(json.dumps({"messages": turns}) + "\n")
PY
  local settings=(--set "data.path=$data" --set data.max_len=128 --set train.epochs=1)
  run_sft turns_all "${settings[@]}"
  local all_log=$MR_ERR$MR_OUT
  run_sft turns_last "${settings[@]}" --set data.loss_turns=last
  local last_log=$MR_ERR$MR_OUT
  "$MR_PYTHON" - "$data" "$MR_TMP/turns_all" "$MR_TMP/turns_last" "$all_log" "$last_log" <<'PY' ||
import json, re, sys
chats = [json.loads(line)["messages"] for line in open(sys.argv[1])]
replies = [[m["content"] for m in chat if m["role"] == "assistant"] for chat in chats]
expect_all = sum(sum(len(r) + 1 for r in rs) + 1 for rs in replies)  # content + "\n" each, eos after the last
expect_last = sum(len(rs[-1]) + 2 for rs in replies)
for run, log, expect in ((sys.argv[2], sys.argv[4], expect_all), (sys.argv[3], sys.argv[5], expect_last)):
    logged = int(re.search(r"(\d+) loss tokens\)", log).group(1))
    rows = [json.loads(line) for line in open(run + "/metrics.jsonl")]
    stepped = sum(r["loss_tokens"] for r in rows)
    print(run.rsplit("/", 1)[1], "loss tokens", logged, "per-step sum", stepped, "expected", expect)
    assert logged == expect and stepped == expect, (logged, stepped, expect)
    assert rows[-1]["loss"] < rows[0]["loss"], [r["loss"] for r in rows]
assert expect_all > expect_last
PY
    fail "multi-turn loss tokens do not check out"
}

case_tp2() {
  run_sft tp2 --set mesh.tp=2 --set train.max_steps=8
  check_run "$MR_TMP/tp2" 0.15
}

case_zero3() {
  run_sft zero3 --set roles.actor.zero_stage=3 --set train.max_steps=8
  check_run "$MR_TMP/zero3" 0.15
  [[ ! -f $MR_TMP/tp2/metrics.jsonl ]] || same_curve "$MR_TMP/tp2" "$MR_TMP/zero3"
}

case_dp2_tp2() {
  run_sft dp2tp2 --set launch.procs_per_node=4 --set mesh.tp=2 --set roles.actor.zero_stage=2 \
    --set train.max_steps=8
  check_run "$MR_TMP/dp2tp2" 0.15
  [[ ! -f $MR_TMP/zero3/metrics.jsonl ]] || same_curve "$MR_TMP/zero3" "$MR_TMP/dp2tp2"
}

# Qwen3's layout (builtin:tiny-qwen3: per-head q/k norms, heads wider than
# hidden / heads): tp 2, where each rank's q/k norm gradients come from its
# own heads and are summed, gives the dp 2 curve; the output is a Qwen3
# directory with the norms, and meshrun generate loads it.
case_qwen3() {
  run_sft qwen3_dp2 --set 'roles.actor.model="builtin:tiny-qwen3"' --set train.max_steps=8
  run_sft qwen3_tp2 --set 'roles.actor.model="builtin:tiny-qwen3"' --set mesh.tp=2 --set train.max_steps=8
  same_curve "$MR_TMP/qwen3_dp2" "$MR_TMP/qwen3_tp2"
  PYTHONPATH="$here/lib" "$MR_PYTHON" - "$MR_TMP/qwen3_tp2/model" <<'PY' || fail "the Qwen3 output does not check out"
import json, sys
from safetensors_reader import read_tensors
config = json.load(open(sys.argv[1] + "/config.json"))
assert config["architectures"] == ["Qwen3ForCausalLM"] and config["model_type"] == "qwen3", config
assert config["head_dim"] == 32 and config["hidden_size"] == 64, config
tensors = read_tensors(sys.argv[1] + "/model.safetensors")
assert list(tensors["model.layers.1.self_attn.q_norm.weight"].shape) == [32], tensors.keys()
assert list(tensors["model.layers.0.self_attn.q_proj.weight"].shape) == [4 * 32, 64]
assert list(tensors["model.layers.0.self_attn.o_proj.weight"].shape) == [64, 4 * 32]
# Trained: the norms moved off their initial ones.
assert not bool((tensors["model.layers.0.self_attn.k_norm.weight"] == 1).all())
PY
  assert_exit 0 "$MESHRUN" generate "$MR_TMP/qwen3_tp2/model" --tokenizer builtin:bytes --prompt "Hello" \
    --max-new-tokens 4
}

# OLMo 2's layout (builtin:tiny-olmo2: post-norms, q/k norms over the whole
# projections): sp 2 gives the dp 2 curve; the output is an Olmo2ForCausalLM
# directory with those norms, trained, which meshrun generate loads; tp 2
# is refused by the plan.
case_olmo2() {
  run_sft olmo2_dp2 --set 'roles.actor.model="builtin:tiny-olmo2"' --set train.max_steps=8
  run_sft olmo2_sp2 --set 'roles.actor.model="builtin:tiny-olmo2"' --set mesh.sp=2 --set train.max_steps=8
  same_curve "$MR_TMP/olmo2_dp2" "$MR_TMP/olmo2_sp2"
  PYTHONPATH="$here/lib" "$MR_PYTHON" - "$MR_TMP/olmo2_sp2/model" <<'PY' || fail "the OLMo 2 output does not check out"
import json, sys
from safetensors_reader import read_tensors
config = json.load(open(sys.argv[1] + "/config.json"))
assert config["architectures"] == ["Olmo2ForCausalLM"] and config["model_type"] == "olmo2", config
tensors = read_tensors(sys.argv[1] + "/model.safetensors")
assert list(tensors["model.layers.1.self_attn.q_norm.weight"].shape) == [64], tensors.keys()
assert list(tensors["model.layers.1.self_attn.k_norm.weight"].shape) == [32], tensors.keys()
assert "model.layers.0.post_feedforward_layernorm.weight" in tensors, tensors.keys()
assert "model.layers.0.input_layernorm.weight" not in tensors, tensors.keys()
assert "lm_head.weight" in tensors
# Trained: the norms moved off their initial ones.
assert not bool((tensors["model.layers.0.post_feedforward_layernorm.weight"] == 1).all())
assert not bool((tensors["model.layers.0.self_attn.k_norm.weight"] == 1).all())
PY
  assert_exit 0 "$MESHRUN" generate "$MR_TMP/olmo2_sp2/model" --tokenizer builtin:bytes --prompt "Hello" \
    --max-new-tokens 4
  assert_exit 1 "$MESHRUN" lint "$RECIPE" --set 'roles.actor.model="builtin:tiny-olmo2"' --set mesh.tp=2
  assert_contains "$MR_OUT$MR_ERR" "[mesh.qk-norm-tp]" "lint's output"
}

# Gemma 2's layout (builtin:tiny-gemma2: a window of 32 on layer 0 only,
# soft-capped scores and logits, sandwich norms × (1 + w), GeGLU, tied):
# sp 2 and tp 2 give the dp 2 curve; the output is a Gemma2ForCausalLM
# directory whose norms trained away from 0, which meshrun generate loads;
# LoRA on it writes an adapter.
case_gemma2() {
  local gemma=(--set 'roles.actor.model="builtin:tiny-gemma2"' --set train.max_steps=8)
  run_sft gemma2_dp2 "${gemma[@]}"
  run_sft gemma2_sp2 "${gemma[@]}" --set mesh.sp=2
  run_sft gemma2_tp2 "${gemma[@]}" --set mesh.tp=2
  same_curve "$MR_TMP/gemma2_dp2" "$MR_TMP/gemma2_sp2"
  same_curve "$MR_TMP/gemma2_dp2" "$MR_TMP/gemma2_tp2"
  PYTHONPATH="$here/lib" "$MR_PYTHON" - "$MR_TMP/gemma2_sp2/model" <<'PY' || fail "the Gemma 2 output does not check out"
import json, sys
from safetensors_reader import read_tensors
config = json.load(open(sys.argv[1] + "/config.json"))
assert config["architectures"] == ["Gemma2ForCausalLM"] and config["model_type"] == "gemma2", config
assert config["layer_types"] == ["sliding_attention", "full_attention"] and config["sliding_window"] == 32, config
assert config["attn_logit_softcapping"] == 50.0 and config["final_logit_softcapping"] == 30.0, config
assert config["hidden_activation"] == "gelu_pytorch_tanh", config
tensors = read_tensors(sys.argv[1] + "/model.safetensors")
assert "model.layers.1.pre_feedforward_layernorm.weight" in tensors, tensors.keys()
assert "lm_head.weight" not in tensors  # tied
# Trained: the offsets moved off 0.
assert not bool((tensors["model.layers.0.post_feedforward_layernorm.weight"] == 0).all())
PY
  assert_exit 0 "$MESHRUN" generate "$MR_TMP/gemma2_sp2/model" --tokenizer builtin:bytes --prompt "Hello" \
    --max-new-tokens 4
  # LoRA on every projection of Gemma 2: a merged model and a PEFT adapter.
  run_sft gemma2_lora "${gemma[@]}" --set roles.actor.lora_rank=4 --set train.max_steps=4
  [[ -f $MR_TMP/gemma2_lora/model/adapter/adapter_model.safetensors ]] || fail "no LoRA adapter for Gemma 2"
}

# A mixture of experts (builtin:tiny-moe, a Qwen3-MoE: 4 experts, top-2):
# tp 2 and sp 2 × ZeRO-3 × gradient checkpointing give the same loss and
# load-balancing curves (sp ranks balance over the whole rows); moe/aux_loss
# and moe/expert_load_max on every line; a strong router_aux_loss_coef
# balances the routers (the aux loss ends lower than without it); a tp 2
# checkpoint resumed at sp 2 × ZeRO-2 ends as the straight run; the output
# is a Qwen3MoeForCausalLM directory with every expert, which meshrun
# generate loads; LoRA named onto experts is refused, on attention it trains.
case_moe() {
  local moe=(--set 'roles.actor.model="builtin:tiny-moe"' --set train.max_steps=12)
  run_sft moe_tp2 "${moe[@]}" --set mesh.tp=2 --set roles.actor.router_aux_loss_coef=1 --set checkpoint.save_steps=6
  run_sft moe_sp2 "${moe[@]}" --set mesh.sp=2 --set roles.actor.zero_stage=3 \
    --set roles.actor.gradient_checkpointing=true --set roles.actor.router_aux_loss_coef=1
  same_curve "$MR_TMP/moe_tp2" "$MR_TMP/moe_sp2"
  run_sft moe_unbalanced "${moe[@]}" --set mesh.tp=2 --set roles.actor.router_aux_loss_coef=0
  # The step-6 checkpoint of tp 2 resumed at sp 2 × ZeRO-2 (experts and
  # routers resharded) ends as the straight run.
  rm -rf "$MR_TMP/moe_tp2/checkpoints/global_step_12"
  isolate "$MR_TMP/moe_resumed"
  assert_exit 0 "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set logging.steps=1 "${moe[@]}" \
    --set roles.actor.router_aux_loss_coef=1 --set mesh.sp=2 --set roles.actor.zero_stage=2 \
    --set "checkpoint.path=\"$MR_TMP/moe_tp2/checkpoints\""
  assert_contains "$MR_ERR$MR_OUT" "resuming from" "the resumed run's log"
  "$MR_PYTHON" - "$MR_TMP/moe_tp2/metrics.jsonl" "$MR_TMP/moe_resumed/metrics.jsonl" <<'PY' || fail "the resumed MoE run differs"
import json, sys
straight = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
resumed = [json.loads(line) for line in open(sys.argv[2])]
assert resumed[0]["step"] == 7 and resumed[-1]["step"] == 12, [r["step"] for r in resumed]
for r in resumed:
    for key in ("loss", "moe/aux_loss"):
        assert abs(r[key] - straight[r["step"]][key]) <= 1e-4 * abs(r[key]), (key, r, straight[r["step"]])
PY
  PYTHONPATH="$here/lib" "$MR_PYTHON" - "$MR_TMP" <<'PY' || fail "the MoE runs do not check out"
import json, sys
from safetensors_reader import read_tensors
root = sys.argv[1]
runs = {name: [json.loads(line) for line in open(f"{root}/{name}/metrics.jsonl")]
        for name in ("moe_tp2", "moe_sp2", "moe_unbalanced")}
for name, records in runs.items():
    for record in records:
        assert isinstance(record.get("moe/aux_loss"), float), (name, record)
        assert record["moe/expert_load_max"] >= 1.0, (name, record)
for a, b in zip(runs["moe_tp2"], runs["moe_sp2"]):
    assert abs(a["moe/aux_loss"] - b["moe/aux_loss"]) <= 1e-3, (a, b)
balanced, free = runs["moe_tp2"][-1]["moe/aux_loss"], runs["moe_unbalanced"][-1]["moe/aux_loss"]
print(f"aux loss after 12 steps: {balanced:.4f} with coefficient 1, {free:.4f} without")
assert balanced < free - 0.1, (balanced, free)
model = f"{root}/moe_sp2/model"
config = json.load(open(model + "/config.json"))
assert config["architectures"] == ["Qwen3MoeForCausalLM"] and config["num_experts"] == 4, config
assert config["num_experts_per_tok"] == 2 and config["moe_intermediate_size"] == 64, config
tensors = read_tensors(model + "/model.safetensors")
assert list(tensors["model.layers.1.mlp.gate.weight"].shape) == [4, 64], tensors.keys()
for e in range(4):
    assert list(tensors[f"model.layers.1.mlp.experts.{e}.down_proj.weight"].shape) == [64, 64]
assert "model.layers.0.mlp.gate_proj.weight" not in tensors
PY
  assert_exit 0 "$MESHRUN" generate "$MR_TMP/moe_sp2/model" --tokenizer builtin:bytes --prompt "Hello" \
    --max-new-tokens 4
  # LoRA: experts take none (lint's lora.experts when named); attention's train.
  assert_exit 1 "$MESHRUN" lint "$RECIPE" "${moe[@]}" --set roles.actor.lora_rank=4 \
    --set 'roles.actor.lora_targets=["q_proj","up_proj"]'
  assert_contains "$MR_OUT$MR_ERR" "[lora.experts]" "lint's output"
  run_sft moe_lora "${moe[@]}" --set roles.actor.lora_rank=4 --set 'roles.actor.lora_targets=["q_proj","v_proj"]' \
    --set train.max_steps=4
  [[ -f $MR_TMP/moe_lora/model/adapter/adapter_model.safetensors ]] || fail "no LoRA adapter for the MoE"
}

# Expert parallelism (builtin:tiny-moe, 4 experts): ep 2 inside dp 2 gives
# the ep 1 curve (loss and moe/aux_loss within 1e-5, grad norm within 1e-4)
# and the same model, and so do ZeRO-3 with checkpointing, tp 2 × ep 2,
# sp 2 × ep 2 (4 processes) and LoRA (the merged model whole); the step-3 checkpoint of ep 1 resumes at ep 2
# (experts resharded) and that of ep 2 at ep 1, each ending as the straight
# run; plan shows the groups; lint refuses an ep that does not divide dp
# or the experts, and a role's own ep on a dense model.
case_expert_parallel() {
  local moe=(--set 'roles.actor.model="builtin:tiny-moe"' --set train.max_steps=6
             --set roles.actor.router_aux_loss_coef=1)
  run_sft ep1 "${moe[@]}" --set checkpoint.save_steps=3
  run_sft ep2 "${moe[@]}" --set mesh.ep=2 --set roles.actor.zero_stage=1 --set checkpoint.save_steps=3
  run_sft ep2_zero3 "${moe[@]}" --set mesh.ep=2 --set roles.actor.zero_stage=3 \
    --set roles.actor.gradient_checkpointing=true
  run_sft ep2_tp2 "${moe[@]}" --set launch.procs_per_node=4 --set mesh.tp=2 --set mesh.ep=2 \
    --set roles.actor.zero_stage=2
  run_sft ep2_sp2 "${moe[@]}" --set launch.procs_per_node=4 --set mesh.sp=2 --set mesh.ep=2 \
    --set roles.actor.zero_stage=2
  # LoRA: the frozen experts stay split; the merged output is whole.
  run_sft ep1_lora "${moe[@]}" --set roles.actor.lora_rank=4 --set train.max_steps=3
  run_sft ep2_lora "${moe[@]}" --set roles.actor.lora_rank=4 --set train.max_steps=3 --set mesh.ep=2
  for resumed in "ep1_to_ep2 ep1 mesh.ep=2" "ep2_to_ep1 ep2 mesh.ep=1"; do
    read -r name from setting <<<"$resumed"
    rm -rf "$MR_TMP/$from/checkpoints/global_step_6"
    isolate "$MR_TMP/$name"
    assert_exit 0 "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set logging.steps=1 "${moe[@]}" --set "$setting" \
      --set roles.actor.zero_stage=2 --set "checkpoint.path=\"$MR_TMP/$from/checkpoints\""
    assert_contains "$MR_ERR$MR_OUT" "resuming from" "the resumed run's log"
  done
  PYTHONPATH="$here/lib" "$MR_PYTHON" - "$MR_TMP" <<'PY' || fail "the expert-parallel runs differ from ep 1"
import json, sys
from safetensors_reader import read_tensors
root = sys.argv[1]
def rows(name):
    return {r["step"]: r for r in map(json.loads, open(f"{root}/{name}/metrics.jsonl"))}
straight = rows("ep1")
for name in ("ep2", "ep2_zero3", "ep2_tp2", "ep2_sp2", "ep1_to_ep2", "ep2_to_ep1"):
    run = rows(name)
    assert sorted(run) == ([4, 5, 6] if "_to_" in name else list(range(1, 7))), (name, sorted(run))
    for step, r in run.items():
        s = straight[step]
        for key, tolerance in (("loss", 1e-5), ("moe/aux_loss", 1e-5), ("grad_norm", 1e-4)):
            assert abs(r[key] - s[key]) <= tolerance * abs(s[key]), (name, step, key, r[key], s[key])
# tp 2 sums each layer's output in another order, which Adam's first
# steps amplify (normalised updates of tiny gradients): a looser bound.
for name, bound in (("ep2", 1e-5), ("ep2_zero3", 1e-5), ("ep2_tp2", 5e-5), ("ep2_lora", 1e-5)):
    reference = read_tensors(f"{root}/ep1_lora/model/model.safetensors") if "lora" in name else \
        read_tensors(f"{root}/ep1/model/model.safetensors")
    tensors = read_tensors(f"{root}/{name}/model/model.safetensors")
    assert sorted(tensors) == sorted(reference), name
    worst = max((tensors[k] - reference[k]).abs().max().item() for k in reference)
    assert worst <= bound, (name, worst)
print("ep 2 = ep 1: losses, aux losses, grad norms, models, resumes")
PY
  assert_exit 0 "$MESHRUN" plan "$RECIPE" "${moe[@]}" --set launch.procs_per_node=4 --set mesh.ep=2
  assert_contains "$MR_OUT" "dp=4 sp=1 tp=1 ep=2" "the plan's mesh"
  assert_contains "$MR_OUT" "ep groups:" "the plan"
  assert_exit 1 "$MESHRUN" lint "$RECIPE" "${moe[@]}" --set mesh.tp=2 --set mesh.ep=2
  assert_contains "$MR_OUT$MR_ERR" "[mesh.ep-dp]" "lint's output for ep 2 at dp 1"
  assert_exit 1 "$MESHRUN" lint "$RECIPE" "${moe[@]}" --set launch.procs_per_node=3 --set mesh.ep=3 \
    --set batch.train=18 --set batch.micro_train=3
  assert_contains "$MR_OUT$MR_ERR" "[mesh.ep-experts]" "lint's output for 4 experts over ep 3"
  # [mesh] ep leaves a dense role at 1 (a shared key for a job's mixtures);
  # the role's own ep on a dense model is refused.
  assert_exit 0 "$MESHRUN" lint "$RECIPE" --set mesh.ep=2
  assert_exit 1 "$MESHRUN" lint "$RECIPE" --set roles.actor.mesh.ep=2
  assert_contains "$MR_OUT$MR_ERR" "is a dense" "lint's output for ep on a dense model"
}

# Phi-3's layout (builtin:tiny-phi3: untied, a window of 32 on every layer,
# shorter than the data's sequences): tp 2 gives the dp 2 curve; the output
# is a Phi3ForCausalLM directory whose q/k/v and gate/up are fused as
# transformers stores them, which a tp 2 run trains on from (split, then
# sharded) and meshrun generate loads. LoRA on it is refused by lint.
case_phi3() {
  run_sft phi3_dp2 --set 'roles.actor.model="builtin:tiny-phi3"' --set train.max_steps=8
  run_sft phi3_tp2 --set 'roles.actor.model="builtin:tiny-phi3"' --set mesh.tp=2 --set train.max_steps=8
  same_curve "$MR_TMP/phi3_dp2" "$MR_TMP/phi3_tp2"
  PYTHONPATH="$here/lib" "$MR_PYTHON" - "$MR_TMP/phi3_tp2/model" <<'PY' || fail "the Phi-3 output does not check out"
import json, sys
from safetensors_reader import read_tensors
config = json.load(open(sys.argv[1] + "/config.json"))
assert config["architectures"] == ["Phi3ForCausalLM"] and config["model_type"] == "phi3", config
assert config["sliding_window"] == 32 and config["partial_rotary_factor"] == 1.0, config
assert config["resid_pdrop"] == 0.0 and config["embd_pdrop"] == 0.0 and config["attention_dropout"] == 0.0, config
assert config["tie_word_embeddings"] is False and "attention_bias" not in config, config
tensors = read_tensors(sys.argv[1] + "/model.safetensors")
# 4 heads of 16 and 2 kv heads: q 64 + k 32 + v 32 rows; gate and up 2 x 176.
assert list(tensors["model.layers.1.self_attn.qkv_proj.weight"].shape) == [128, 64], tensors.keys()
assert list(tensors["model.layers.0.mlp.gate_up_proj.weight"].shape) == [352, 64]
assert list(tensors["lm_head.weight"].shape) == [264, 64]
assert not any(n.endswith((".q_proj.weight", ".k_proj.weight", ".v_proj.weight", ".gate_proj.weight", ".up_proj.weight"))
               for n in tensors), sorted(tensors)
assert len(tensors) == 3 + 6 * 2, sorted(tensors)
PY
  run_sft phi3_again --set "roles.actor.model=\"$MR_TMP/phi3_tp2/model\"" --set 'data.tokenizer="builtin:bytes"' \
    --set mesh.tp=2 --set train.max_steps=2
  "$MR_PYTHON" - "$MR_TMP/phi3_tp2" "$MR_TMP/phi3_again" <<'PY' ||
import json, sys
first, again = ([json.loads(line)["loss"] for line in open(run + "/metrics.jsonl")] for run in sys.argv[1:])
# Trained on from the saved weights: the first loss is nearer the saving run's last than its first
# (weights read from the wrong rows would start no better than a fresh model).
assert again[0] < first[0] - 0.5 * (first[0] - first[-1]), (first, again)
PY
    fail "training on from the saved Phi-3 model does not start where the first run ended"
  assert_exit 0 "$MESHRUN" generate "$MR_TMP/phi3_tp2/model" --tokenizer builtin:bytes --prompt "Hello" \
    --max-new-tokens 4
  assert_exit 1 "$MESHRUN" lint "$RECIPE" --set 'roles.actor.model="builtin:tiny-phi3"' --set roles.actor.lora_rank=8
  assert_contains "$MR_OUT$MR_ERR" "fused qkv_proj and gate_up_proj" "lint of LoRA on a Phi-3 model"
  assert_contains "$MR_OUT$MR_ERR" "[lora.unsupported]" "lint of LoRA on a Phi-3 model"
}

# Sequence parallelism: the same global batch on dp 1 × sp 2 (each sequence
# split over 2 ranks) gives the tp 2 curve (dp 1 too); sp 2 × tp 2 on 4
# workers with ZeRO-2 gives it as well.
case_sp2() {
  run_sft sp2 --set mesh.sp=2 --set train.max_steps=8
  check_run "$MR_TMP/sp2" 0.15
  assert_contains "$MR_ERR" "dp 1, sp 2, tp 1" "the sp 2 run's log"
  [[ ! -f $MR_TMP/tp2/metrics.jsonl ]] || same_curve "$MR_TMP/tp2" "$MR_TMP/sp2"
}

case_sp2_tp2() {
  run_sft sp2tp2 --set launch.procs_per_node=4 --set mesh.sp=2 --set mesh.tp=2 --set roles.actor.zero_stage=2 \
    --set train.max_steps=8
  check_run "$MR_TMP/sp2tp2" 0.15
  [[ ! -f $MR_TMP/tp2/metrics.jsonl ]] || same_curve "$MR_TMP/tp2" "$MR_TMP/sp2tp2"
}

case_bad_line() {
  local dir=$MR_TMP/bad
  mkdir -p "$dir"
  head -n 40 "$(dirname "$RECIPE")/data/sft_tiny.jsonl" >"$dir/data.jsonl"
  echo '{"input": "reverse: abc\n", "output": ' >>"$dir/data.jsonl"
  isolate "$dir"
  assert_exit 1 "$MESHRUN" "$RECIPE" --set "data.path=$dir/data.jsonl" "${MR_ISOLATED[@]}"
  assert_contains "$MR_ERR$MR_OUT" "data.jsonl:41" "error output"
}

# Gradients that stay non-finite (a learning rate of 1e30 without clipping
# blows the weights up at the first update) end the job after
# train.max_skipped_steps skipped steps in a row, with the reason on every
# rank, instead of skipping through the whole budget and exiting 0.
case_non_finite() {
  local run=$MR_TMP/non_finite
  isolate "$run"
  # max_restarts does not restart it: an exact resume would fail the same way.
  assert_exit 1 "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set logging.steps=1 --set roles.actor.learning_rate=1e30 \
    --set roles.actor.max_norm=0 --set train.max_skipped_steps=3 --set launch.max_restarts=2 \
    --set launch.restart_delay=0
  assert_contains "$MR_ERR$MR_OUT" "model error: the gradients were non-finite in 3 optimizer steps in a row" "error output"
  assert_contains "$MR_ERR$MR_OUT" "train.max_skipped_steps = 3" "error output"
  assert_contains "$MR_ERR$MR_OUT" "not restarting ([launch] max_restarts = 2): rank" \
    "error output"
  assert_not_contains "$MR_ERR$MR_OUT" "restarting the workers" "error output"
  [[ ! -e $run/model ]] || fail "a run stopped on non-finite gradients must not write a final model"
}

# same_run DIR_A DIR_B: equal per-step losses (bit for bit, as JSON prints
# them) and byte-identical final weights.
same_run() {
  "$MR_PYTHON" - "$1" "$2" <<'PY' || fail "runs $1 and $2 differ"
import json, sys
a, b = ([json.loads(line) for line in open(run + "/metrics.jsonl")] for run in sys.argv[1:])
assert [r["step"] for r in a] == [r["step"] for r in b], ([r["step"] for r in a], [r["step"] for r in b])
for x, y in zip(a, b):
    assert x["loss"] == y["loss"] and x["grad_norm"] == y["grad_norm"], (x, y)
assert open(sys.argv[1] + "/model/model.safetensors", "rb").read() == open(sys.argv[2] + "/model/model.safetensors", "rb").read(), "weights differ"
PY
}

# TensorBoard's own reader (EventAccumulator) reads the event files back:
# every row's loss and lr at its step. A resume from an earlier checkpoint
# leaves the first run's later steps in its file; TensorBoard must drop them.
case_tensorboard() {
  "$MR_PYTHON" -c "import tensorboard" 2>/dev/null || fail "the tensorboard package is missing: run scripts/setup.sh --test"
  local run=$MR_TMP/tensorboard
  run_sft tensorboard --set logging.tensorboard=true --set train.max_steps=6 --set checkpoint.save_steps=2
  rm -rf "$run/checkpoints/global_step_6"  # resume from step 4: steps 5 and 6 of the first file are stale
  sleep 1  # the second run's event file is named by a later second
  run_sft tensorboard --set logging.tensorboard=true --set train.max_steps=8 --set checkpoint.save_steps=2
  assert_contains "$MR_ERR" "resuming from" "the resumed run's log"
  "$MR_PYTHON" - "$run" <<'PY' || fail "TensorBoard's reader disagrees with metrics.jsonl"
import glob, json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
run = sys.argv[1]
assert len(glob.glob(run + "/events.out.tfevents.*")) == 2, glob.glob(run + "/events.out.tfevents.*")
rows = [json.loads(line) for line in open(run + "/metrics.jsonl")]
assert [r["step"] for r in rows] == list(range(1, 9)), [r["step"] for r in rows]
events = EventAccumulator(run)
events.Reload()
tags = events.Tags()["scalars"]
for key in ("loss", "lr", "grad_norm", "tokens_per_s", "time"):
    assert key in tags, (key, tags)
for key in ("loss", "lr", "grad_norm"):
    scalars = events.Scalars(key)
    assert [s.step for s in scalars] == list(range(1, 9)), (key, [s.step for s in scalars])
    for s, row in zip(scalars, rows):
        assert math.isclose(s.value, row[key], rel_tol=1e-6), (key, s.step, s.value, row[key])
PY
}

# The console. On a terminal (a pty from script(1)) the launcher draws its
# rank 0's progress line in place (carriage return, erase line): step N/total,
# tokens/s, elapsed and ETA, no relay marker left; piped, every line of the
# launcher and the workers starts with a timestamp.
case_console() {
  local run=$MR_TMP/console command
  isolate "$run"
  printf -v command '%q ' "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set train.max_steps=4 --set logging.steps=1
  timeout 120 script -qefc "$command" /dev/null >"$MR_TMP/console.tty" </dev/null ||
    fail "the run on a terminal failed: $(tail -c 2000 "$MR_TMP/console.tty")"
  "$MR_PYTHON" - "$MR_TMP/console.tty" <<'PY' || fail "the terminal output is not drawn in place"
import re, sys
text = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
assert "\x1e" not in text, "a relay marker reached the terminal"
for step in range(1, 5):
    drawn = re.search(r"\r\x1b\[K\[rank 0\] sft step %d/4 \| \d+s elapsed, ETA \d+s \| loss [0-9.]+ .*tokens/s [0-9]+" % step, text)
    assert drawn, ("step %d is not drawn in place" % step, text[-3000:])
assert not re.search(r"^\d{4}-\d\d-\d\d ", text, re.M), "timestamps on a terminal"
assert "sft finished: 4 steps" in text, text[-2000:]
PY
  run_sft console_plain --set train.max_steps=2
  grep -qE '^\[rank 0\] [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} \[meshrun\] info: sft step 2/2 \| [0-9]+s elapsed, ETA [0-9]+s \| loss ' \
    <<<"$MR_ERR" || fail "no timestamped progress line in the piped output: $MR_ERR"
  grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} \[meshrun\] info: starting 2 local workers' \
    <<<"$MR_ERR" || fail "the launcher's own lines carry no timestamp: $MR_ERR"
}

# The intra-op team follows the CPU other processes leave it
# (src/train/train_threads.cpp): one process of 2 threads, pinned with two
# spinning processes to 2 CPUs, runs on one thread (cpu/threads in
# metrics.jsonl, a log line saying why) and never outside [1, 2]; with
# MESHRUN_ADAPTIVE_THREADS=0 the rows carry no cpu/threads. (Alone it keeps
# both threads, which a shared machine running other tests cannot promise.)
case_threads_beside_busy() {
  local cpus pid
  cpus=$("$MR_PYTHON" -c 'import os; c = sorted(os.sched_getaffinity(0)); print(",".join(map(str, c[:2])) if len(c) > 1 else "")')
  [[ -n $cpus ]] || skip "needs 2 CPUs"
  require_cmd taskset
  for _ in 1 2; do
    taskset -c "$cpus" "$MR_PYTHON" -c 'while True: pass' &
    pid=$!
    mr_on_exit "kill $pid 2>/dev/null; wait $pid 2>/dev/null; true"
  done
  isolate "$MR_TMP/threads"
  MESHRUN_THREADS=2 assert_exit 0 taskset -c "$cpus" "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set logging.steps=1 \
    --set launch.procs_per_node=1 --set train.epochs=100 --set train.max_steps=300
  assert_contains "$MR_ERR" "other processes used" "the log of a shrunk team"
  "$MR_PYTHON" - "$MR_TMP/threads/metrics.jsonl" <<'PY' || fail "cpu/threads does not follow the busy CPUs"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
threads = [row.get("cpu/threads") for row in rows]
assert all(t in (1, 2) for t in threads), threads
# The governor samples at most once a second: from 2.5 s after the first
# row on, every step ran on one thread.
settled = [row["cpu/threads"] for row in rows if row["time"] >= rows[0]["time"] + 2.5]
assert settled and set(settled) == {1}, (len(settled), threads)
print("cpu/threads per step:", "".join(map(str, threads)))
PY
  MESHRUN_ADAPTIVE_THREADS=0 MESHRUN_THREADS=2 run_sft threads_fixed --set launch.procs_per_node=1 --set train.max_steps=2
  ! grep -q "cpu/threads" "$MR_TMP/threads_fixed/metrics.jsonl" || fail "a fixed team reports cpu/threads"
}

# logging.dir/resolved.toml: lint accepts it; run on its own (only the
# output folders moved) it reproduces the run exactly; a resume under a
# changed recipe warns naming the changed key, and the earlier resolved
# recipe is kept beside the new one.
case_resolved_recipe() {
  local run=$MR_TMP/resolved again=$MR_TMP/resolved_again
  run_sft resolved --set train.max_steps=6 --set checkpoint.save_steps=3 --set roles.actor.learning_rate=2e-3
  [[ -f $run/resolved.toml ]] || fail "no resolved.toml in $run"
  grep -q '^learning_rate = 0.002$' "$run/resolved.toml" || fail "the --set learning rate is not in resolved.toml"
  assert_exit 0 "$MESHRUN" lint "$run/resolved.toml"
  isolate "$again"
  assert_exit 0 "$MESHRUN" "$run/resolved.toml" "${MR_ISOLATED[@]}"
  same_run "$run" "$again"
  rm -rf "$run/checkpoints/global_step_6"
  run_sft resolved --set train.max_steps=6 --set checkpoint.save_steps=3 --set roles.actor.learning_rate=1e-3
  assert_contains "$MR_ERR" "resuming from the checkpoint of step 3 under a different recipe" \
    "the resumed run's log"
  assert_contains "$MR_ERR" "roles.actor.learning_rate: 0.002 -> 0.001" "the resumed run's log"
  compgen -G "$run/resolved-*.toml" >/dev/null || fail "the earlier resolved recipe was not kept"
  grep -q '^learning_rate = 0.001$' "$run/resolved.toml" || fail "resolved.toml is not the resumed run's"
}

# A model and a dataset named as on the Hugging Face hub resolve in a local
# cache laid out as huggingface_hub does (refs/main → snapshots/<commit>);
# lint and plan say where; nothing is downloaded; a missing name is a clear error.
case_hub_cache() {
  run_sft hub_base --set train.max_steps=2
  local commit=0123456789abcdef0123456789abcdef01234567 data_commit=89abcdef0123456789abcdef0123456789abcdef
  local repo=$HF_HUB_CACHE/models--meshrun--sft-tiny datasets=$HF_HUB_CACHE/datasets--meshrun--reverse
  mkdir -p "$repo/refs" "$repo/snapshots" "$datasets/refs" "$datasets/snapshots/$data_commit/data"
  # A preset's trained folder gets a generation_config.json derived from its config.json.
  grep -q '"_from_model_config": true' "$MR_TMP/hub_base/model/generation_config.json" ||
    fail "no generation_config.json derived for the preset's trained model"
  cp -r "$MR_TMP/hub_base/model" "$repo/snapshots/$commit"
  printf '%s' "$commit" >"$repo/refs/main"
  # A base model's own generation_config.json (sampling defaults) is carried into the trained folder.
  printf '{"eos_token_id": 257, "temperature": 0.6}\n' >"$repo/snapshots/$commit/generation_config.json"
  cp "$(dirname "$RECIPE")/data/sft_tiny.jsonl" "$datasets/snapshots/$data_commit/data/train.jsonl"
  printf '%s\n' "$data_commit" >"$datasets/refs/main"
  local names=(--set roles.actor.model=meshrun/sft-tiny --set data.path=meshrun/reverse --set data.tokenizer=builtin:bytes)
  assert_exit 0 "$MESHRUN" lint "$RECIPE" "${names[@]}"
  assert_contains "$MR_ERR$MR_OUT" "meshrun/sft-tiny is $repo/snapshots/$commit in the local Hugging Face cache" "lint"
  assert_contains "$MR_ERR$MR_OUT" "the dataset meshrun/reverse is $datasets/snapshots/$data_commit/data/train.jsonl" "lint"
  assert_exit 0 "$MESHRUN" plan "$RECIPE" "${names[@]}"
  assert_contains "$MR_OUT" "Hugging Face cache: $repo/snapshots/$commit/config.json" "plan"
  run_sft hub "${names[@]}" --set train.max_steps=2
  [[ -f $MR_TMP/hub/model/model.safetensors ]] || fail "no model trained from the hub name"
  grep -q '"temperature": 0.6' "$MR_TMP/hub/model/generation_config.json" ||
    fail "the hub model's generation_config.json was not carried into the trained folder"
  # Missing from the cache: lint notes it, the run fails naming the cache folder.
  isolate "$MR_TMP/hub_missing"
  assert_exit 1 "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set roles.actor.model=meshrun/absent --set data.tokenizer=builtin:bytes
  assert_contains "$MR_ERR$MR_OUT" "meshrun/absent is not in the local Hugging Face cache (no $HF_HUB_CACHE/models--meshrun--absent)" "the run's error"
  assert_contains "$MR_ERR$MR_OUT" "huggingface-cli download meshrun/absent" "the run's error"
  # A dangling ref: its snapshot is gone.
  printf '%s' fedcba9876543210fedcba9876543210fedcba98 >"$repo/refs/v2"
  assert_exit 1 "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set roles.actor.model=meshrun/sft-tiny@v2
  assert_contains "$MR_ERR$MR_OUT" "a dangling ref" "the run's error"
}

case_kill_and_resume() {
  run_sft straight --set checkpoint.save_steps=8
  local run=$MR_TMP/killed port
  port=$(free_port)
  setsid "$MESHRUN" "$RECIPE" --set "logging.dir=$run" --set logging.steps=1 --set "checkpoint.output=$run/model" \
    --set "checkpoint.path=$run/checkpoints" --set checkpoint.save_steps=8 --set "launch.master_port=$port" \
    >"$MR_TMP/killed.log" 2>&1 &
  local pid=$!
  wait_until 60 "a checkpoint at step 24 or later" checkpoint_at_least "$run/checkpoints" 24 ||
    fail "no checkpoint at step 24 or later"
  kill -9 -- "-$pid"
  wait "$pid" || true
  log "killed at $(wc -l <"$run/metrics.jsonl") logged steps; checkpoints: $(ls "$run/checkpoints" | tr '\n' ' ')"
  # The newest checkpoint corrupted as well: resume must fall back to the
  # one before it and still end exactly where the straight run did.
  local newest
  newest=$(ls -d "$run"/checkpoints/global_step_* | sort -t_ -k3 -n | tail -1)
  printf 'garbage' | dd of="$newest/rank-1.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
  run_sft killed --set checkpoint.save_steps=8
  assert_contains "$MR_ERR" "fails verification" "the resumed run's log"
  assert_contains "$MR_ERR" "checkpoint: resuming from" "the resumed run's log"
  same_run "$MR_TMP/straight" "$run"
}

case_restart_after_worker_death() {
  [[ -f $MR_TMP/straight/metrics.jsonl ]] || run_sft straight --set checkpoint.save_steps=8
  local run=$MR_TMP/restarted
  "$MESHRUN" "$RECIPE" --set "logging.dir=$run" --set logging.steps=1 --set "checkpoint.output=$run/model" \
    --set "checkpoint.path=$run/checkpoints" --set checkpoint.save_steps=8 --set launch.max_restarts=1 \
    --set launch.restart_delay=0.5 --set "launch.master_port=$(free_port)" >"$MR_TMP/restarted.log" 2>&1 &
  local pid=$! victim="" child
  wait_until 60 "a checkpoint at step 16 or later" checkpoint_at_least "$run/checkpoints" 16 ||
    fail "no checkpoint at step 16 or later"
  for child in $(pgrep -P "$pid"); do
    tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | grep -qx RANK=1 && victim=$child
  done
  [[ -n $victim ]] || fail "no rank 1 worker under the launcher"
  kill -9 "$victim"
  local rc=0
  wait "$pid" || rc=$?
  local output
  output=$(<"$MR_TMP/restarted.log")
  ((rc == 0)) || fail "the restarted job exited $rc: $output"
  assert_contains "$output" "rank 1 was killed by signal 9" "launcher log"
  assert_contains "$output" "restarting the workers" "launcher log"
  assert_contains "$output" "checkpoint: resuming from" "launcher log"
  same_run "$MR_TMP/straight" "$run"
}

# close_weights DIR_A DIR_B: the final models' tensors agree within 1e-4 of
# each tensor's largest magnitude (layouts sum in different orders).
close_weights() {
  PYTHONPATH="$here/lib" "$MR_PYTHON" - "$1/model" "$2/model" <<'PY' || fail "final weights of $1 and $2 differ"
import sys
from safetensors_reader import read_tensors
a, b = (read_tensors(d + "/model.safetensors") for d in sys.argv[1:])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
for name in a:
    scale = max(float(a[name].abs().max()), 1e-12)
    diff = float((a[name] - b[name]).abs().max()) / scale
    assert diff <= 1e-4, f"{name}: relative difference {diff}"
PY
}

# A dp 2 ZeRO-2 run's step-32 checkpoint resumed under other layouts: each
# logs the resharding and continues the same loss curve to the same weights.
case_reshard() {
  run_sft zero2 --set roles.actor.zero_stage=2 --set checkpoint.save_steps=32
  local target name
  for target in "dp1 launch.procs_per_node=1" "dp4 launch.procs_per_node=4" "zero3 roles.actor.zero_stage=3" \
    "tp2 mesh.tp=2" "sp2 mesh.sp=2"; do
    name=reshard_${target%% *}
    mkdir -p "$MR_TMP/$name/checkpoints"
    cp -r "$MR_TMP/zero2/checkpoints/global_step_32" "$MR_TMP/$name/checkpoints/"
    head -n 32 "$MR_TMP/zero2/metrics.jsonl" >"$MR_TMP/$name/metrics.jsonl"
    run_sft "$name" --set "${target#* }"
    assert_contains "$MR_ERR" "resharding \"world 2; actor dp 2 tp 1 zero 2 fp32\"" "$name's log"
    same_curve "$MR_TMP/zero2" "$MR_TMP/$name"
    close_weights "$MR_TMP/zero2" "$MR_TMP/$name"
  done
}

# `meshrun ckpt convert` of the final (step 64) checkpoint gives the run's
# own output model, tensor for tensor, and file for file.
case_convert() {
  [[ -f $MR_TMP/zero2/metrics.jsonl ]] || run_sft zero2 --set roles.actor.zero_stage=2 --set checkpoint.save_steps=32
  assert_exit 0 "$MESHRUN" ckpt convert "$MR_TMP/zero2/checkpoints" "$MR_TMP/converted"
  assert_contains "$MR_OUT" "global_step_64" "ckpt convert's report"
  PYTHONPATH="$here/lib" "$MR_PYTHON" - "$MR_TMP/zero2/model" "$MR_TMP/converted" <<'PY' || fail "the converted model differs from the run's"
import json, os, sys
from safetensors_reader import read_tensors
a, b = (read_tensors(d + "/model.safetensors") for d in sys.argv[1:])
assert a.keys() == b.keys()
assert all(a[name].equal(b[name]) for name in a), [name for name in a if not a[name].equal(b[name])]
assert json.load(open(sys.argv[1] + "/config.json")) == json.load(open(sys.argv[2] + "/config.json"))
# Completed as the run's output is: the same files, the same generation_config.json.
assert sorted(os.listdir(sys.argv[1])) == sorted(os.listdir(sys.argv[2])), (os.listdir(sys.argv[1]), os.listdir(sys.argv[2]))
assert open(sys.argv[1] + "/generation_config.json").read() == open(sys.argv[2] + "/generation_config.json").read()
PY
  # Never into a checkpoint (its files would fail the manifest): the sealed
  # folder, one below it and the checkpoints' root are refused, and the
  # checkpoint still verifies.
  local step=$MR_TMP/zero2/checkpoints/global_step_64 output
  for output in "$step" "$step/hf" "$MR_TMP/zero2/checkpoints"; do
    assert_exit 1 "$MESHRUN" ckpt convert "$step" "$output"
    assert_contains "$MR_ERR" "or inside it; name a folder outside the checkpoints" "ckpt convert into $output"
  done
  [[ ! -e $step/config.json && ! -e $step/hf ]] || fail "ckpt convert wrote into the checkpoint"
  assert_exit 0 "$MESHRUN" ckpt inspect "$step"
}

# [checkpoint] async: the same checkpoints, losses and weights as a
# synchronous run, and a resume from its checkpoint ends where it did.
case_async() {
  [[ -f $MR_TMP/straight/metrics.jsonl ]] || run_sft straight --set checkpoint.save_steps=8
  run_sft async --set checkpoint.save_steps=8 --set checkpoint.async=true
  assert_contains "$MR_ERR" "written in the background" "the async run's log"
  same_run "$MR_TMP/straight" "$MR_TMP/async"
  assert_exit 0 "$MESHRUN" ckpt inspect "$MR_TMP/async/checkpoints"
  local run=$MR_TMP/async_resumed
  mkdir -p "$run/checkpoints"
  cp -r "$MR_TMP/async/checkpoints/global_step_48" "$run/checkpoints/"
  head -n 48 "$MR_TMP/async/metrics.jsonl" >"$run/metrics.jsonl"
  run_sft async_resumed --set checkpoint.save_steps=8 --set checkpoint.async=true
  assert_contains "$MR_ERR" "checkpoint: resuming from" "the resumed async run's log"
  same_run "$MR_TMP/straight" "$run"
}

# checkpoint_at_least DIR N: DIR holds a complete checkpoint of step N or
# later, short of the last (64). Not one exact step: keep_last rotates a
# step away a few seconds later, and a poll on a loaded machine can miss it.
checkpoint_at_least() {
  local dir=$1 least=$2 path step
  for path in "$dir"/global_step_*; do
    step=${path##*_}
    [[ $step =~ ^[0-9]+$ && -f $path/manifest.json ]] && ((step >= least && step < 64)) && return 0
  done
  return 1
}

# start_torchrun_worker RUN RANK PORT: one worker of a 2-process job in a
# torchrun-style environment, in the background (setsid: $! is meshrun).
start_torchrun_worker() {
  local run=$1 rank=$2 port=$3
  RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    setsid "$MESHRUN" "$RECIPE" --set launch.type=torchrun --set "logging.dir=$run" --set logging.steps=1 \
    --set "checkpoint.output=$run/model" --set "checkpoint.path=$run/checkpoints" --set checkpoint.save_steps=8 \
    >"$run-rank$rank.log" 2>&1 &
}

# Under an outside launcher nothing restarts the job: a worker killed
# mid-run makes the other exit non-zero saying how to resume, and starting
# the job again resumes it to the straight run's losses and weights.
case_outside_launcher_resume() {
  [[ -f $MR_TMP/straight/metrics.jsonl ]] || run_sft straight --set checkpoint.save_steps=8
  local run=$MR_TMP/torchrun port pid0 pid1 rc=0
  mkdir -p "$run"
  port=$(free_port)
  start_torchrun_worker "$run" 0 "$port"
  pid0=$!
  start_torchrun_worker "$run" 1 "$port"
  pid1=$!
  wait_until 60 "a checkpoint at step 16 or later" checkpoint_at_least "$run/checkpoints" 16 ||
    fail "no checkpoint at step 16 or later; rank 0: $(tail -3 "$run-rank0.log"); rank 1: $(tail -3 "$run-rank1.log")"
  kill -9 "$pid1"
  wait "$pid1" 2>/dev/null || true
  wait_until 60 "rank 0 to exit after rank 1's death" bash -c "! kill -0 $pid0 2>/dev/null" ||
    { kill -9 "$pid0"; fail "rank 0 did not stop within 60 s of rank 1's death"; }
  wait "$pid0" || rc=$?
  ((rc != 0)) || fail "rank 0 exited 0 although rank 1 was killed"
  assert_contains "$(<"$run-rank0.log")" "to resume, run the job again unchanged" "rank 0's log"
  log "rank 0 exited $rc after rank 1's death; checkpoints: $(ls "$run/checkpoints" | tr '\n' ' ')"
  port=$(free_port)
  start_torchrun_worker "$run" 0 "$port"
  pid0=$!
  start_torchrun_worker "$run" 1 "$port"
  pid1=$!
  wait_until 120 "the resumed job to finish" bash -c "! kill -0 $pid0 2>/dev/null && ! kill -0 $pid1 2>/dev/null" ||
    { kill -9 "$pid0" "$pid1"; fail "the resumed job did not finish within 120 s"; }
  wait "$pid0" || fail "the resumed rank 0 failed: $(tail -5 "$run-rank0.log")"
  wait "$pid1" || fail "the resumed rank 1 failed: $(tail -5 "$run-rank1.log")"
  assert_contains "$(<"$run-rank0.log")" "checkpoint: resuming from" "the resumed rank 0's log"
  same_run "$MR_TMP/straight" "$run"
}

# An sbatch script runs `meshrun RECIPE` as the batch step (SLURM_PROCID 0,
# no SLURM_STEP_NUM_TASKS), `mpirun -np 1` as a world of one: alone, so a
# one-node recipe of 2 processes gets its workers from the local launcher.
# An srun step of 2 tasks is not alone: its tasks must be the workers.
case_local_inside_allocation() {
  local slurm=(SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_NNODES=1 SLURM_TASKS_PER_NODE=4
               SLURM_NODELIST=localhost SLURM_JOB_ID=5)
  isolate "$MR_TMP/in-sbatch"
  assert_exit 0 env "${slurm[@]}" "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set train.max_steps=2
  [[ $(wc -l <"$MR_TMP/in-sbatch/metrics.jsonl") -ge 1 ]] || fail "no metrics from the run in the batch step"
  isolate "$MR_TMP/in-mpirun"
  assert_exit 0 env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0 \
    OMPI_COMM_WORLD_LOCAL_SIZE=1 "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set train.max_steps=2
  isolate "$MR_TMP/in-srun"
  assert_exit 1 env "${slurm[@]}" SLURM_STEP_NUM_TASKS=4 "$MESHRUN" "$RECIPE" "${MR_ISOLATED[@]}" --set train.max_steps=2
  assert_contains "$MR_ERR" "launch.type = \"local\", but slurm started this process as one of several tasks" \
    "the srun step's error"
}

case_load_policies() {
  local run=$MR_TMP/policies
  assert_exit 1 "$MESHRUN" "$RECIPE" --set "logging.dir=$run" --set "checkpoint.output=$run/model" \
    --set "checkpoint.path=$run/checkpoints" --set checkpoint.load=require --set "launch.master_port=$(free_port)"
  assert_contains "$MR_ERR" "checkpoint.load = \"require\" but $run/checkpoints holds no complete checkpoint" "error"
  run_sft policies --set train.max_steps=4 --set checkpoint.save_steps=1 --set checkpoint.keep_last=2
  # A fresh run beside the first one's checkpoints (steps 3 and 4): they
  # are set aside, not rotated against its own steps 1 and 2.
  run_sft policies --set train.max_steps=2 --set checkpoint.load=never --set checkpoint.save_steps=1 \
    --set checkpoint.keep_last=2
  assert_not_contains "$MR_ERR" "resuming" "a run with load = never"
  assert_contains "$MR_ERR" "were moved into $run/checkpoints/replaced-" "the fresh run's log"
  [[ $(wc -l <"$run/metrics.jsonl") == 2 ]] || fail "a fresh run must start its metrics over"
  [[ -d $run/checkpoints/global_step_1 && -d $run/checkpoints/global_step_2 ]] ||
    fail "the fresh run's checkpoints: $(ls "$run/checkpoints")"
  [[ ! -e $run/checkpoints/global_step_4 ]] || fail "the earlier run's step 4 is still among the fresh run's"
  local aside
  aside=$(echo "$run"/checkpoints/replaced-*)
  [[ -f $aside/global_step_3/manifest.json && -f $aside/global_step_4/manifest.json ]] ||
    fail "the earlier run's checkpoints were not kept: $(ls "$aside")"
  "$MESHRUN" ckpt inspect "$aside" >/dev/null || fail "the set-aside checkpoints do not verify"
}

run_case "[logging] tensorboard: TensorBoard's reader sees every metric, stale steps dropped on resume" case_tensorboard
run_case "hub names resolve offline in the local Hugging Face cache" case_hub_cache
run_case "the console: progress drawn in place on a terminal, timestamps when piped" case_console
run_case "the intra-op team shrinks to the CPUs two busy processes leave it" case_threads_beside_busy
run_case "resolved.toml: lint accepts it, it reproduces the run, a changed resume names the key" case_resolved_recipe
run_case "sft-tiny, 2 local workers (dp 2): loss falls, metrics, HF output" case_dp2
run_case "multi-turn chats: every assistant turn trained by default, the last with data.loss_turns" case_multi_turn
run_case "sft-tiny with tp 2" case_tp2
run_case "[data] eval_path: eval_loss at its cadence and the end, the same under sp 2 x ZeRO-3" case_eval
run_case "sft-tiny with ZeRO-3: the tp 2 loss curve" case_zero3
run_case "Qwen3's layout (builtin:tiny-qwen3): tp 2 gives the dp 2 curve; the output is a Qwen3 model that loads" case_qwen3
run_case "Gemma 2's layout (builtin:tiny-gemma2): sp 2 and tp 2 give the dp 2 curve; the output is a Gemma 2 model that loads" case_gemma2
run_case "a mixture of experts (builtin:tiny-moe): tp 2 and sp 2 × ZeRO-3 give the same curves; the load-balancing loss balances; resumed resharded; the output is a Qwen3-MoE model" case_moe
run_case "expert parallelism: ep 2 gives the ep 1 curve and model (ZeRO-3, tp 2 x ep 2, sp 2 x ep 2); checkpoints reshard across ep; lint refuses bad ep" case_expert_parallel
run_case "OLMo 2's layout (builtin:tiny-olmo2): sp 2 gives the dp 2 curve; the output is an OLMo 2 model that loads; tp 2 refused" case_olmo2
run_case "Phi-3's layout (builtin:tiny-phi3): tp 2 gives the dp 2 curve; the output is a Phi3 model with fused projections that trains on, loads and refuses LoRA" case_phi3
run_case "sft-tiny on 4 workers, dp 2 x tp 2 with ZeRO-2: the same curve" case_dp2_tp2
run_case "sft-tiny with sp 2: the tp 2 loss curve" case_sp2
run_case "sft-tiny on 4 workers, sp 2 x tp 2 with ZeRO-2: the same curve" case_sp2_tp2
run_case "a malformed data line ends the job with its location" case_bad_line
run_case "gradients non-finite for train.max_skipped_steps steps in a row end the job with a model error" case_non_finite
run_case "kill -9 mid-run, newest checkpoint corrupted: resume gives the same losses and weights" case_kill_and_resume
run_case "checkpoint.load require / never" case_load_policies
run_case "inside a SLURM allocation's batch script or an mpirun of one, the local launcher starts the workers" case_local_inside_allocation
run_case "max_restarts = 1: a worker killed mid-run, the job restarts and ends as if uninterrupted" case_restart_after_worker_death
run_case "torchrun-style job: a killed worker stops the job with how to resume; run again, it resumes" case_outside_launcher_resume
run_case "a dp 2 ZeRO-2 checkpoint resumes under dp 1, dp 4, ZeRO-3, tp 2 and sp 2 (resharding)" case_reshard
run_case "ckpt convert of the final checkpoint equals the run's output model" case_convert
run_case "checkpoint.async: same checkpoints and results as synchronous saving, and resume" case_async
mr_finish
