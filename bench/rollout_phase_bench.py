#!/usr/bin/env python3
"""One GRPO recipe's rollout phase (`time/rollout`) on two meshrun binaries (issue #36, item 8).

Compared: the same recipe run by --meshrun (today's engine: continuous batching over a paged KV
cache) and by --baseline (a binary built from commit 6cbb835, the last static-batch engine: each
batch decodes until its longest sequence stops, the stopped rows padded along), on a long-tailed
workload. The recipe is GRPO (group_norm advantages, the k3 KL to a frozen reference in the loss)
with 8 prompts a step × 8 samples each (batch.n_samples_per_prompt = 8; 64 completions), at most
256 new tokens, temperature 1, top-p 1; one process (launch.procs_per_node = 1, one engine that
holds the step's 64 samples, colocated with the actor and the reference), fp32 on this machine's
CPU, metrics logged every step. It uses only recipe keys both binaries accept (6cbb835's
src/recipe/schema_keys.cpp). Each run trains --steps steps (default 4); step 1 is left out as
warm-up.

The model: a Llama-style Hugging Face directory written here (24.6 M parameters: hidden 512,
6 layers, 8 heads, MLP 1536, vocab 4096; a byte-level BPE trained as bench/grpo_trl_bench.py
does it), random weights from a fixed seed, into which a two-state chain is folded so that the
response lengths are long-tailed: one channel of every token's embedding is a large constant (it
dominates each RMSNorm, so the final hidden state is nearly the last token's own) and a second
marks 256 "run-on" tokens. After an ordinary token the stop token (eos) has about 2.3 % probability
and a run-on token 0.4 %; after a run-on token the next is another run-on token with about 99.9 %
probability and eos 0.02 %. Most responses stop after a few dozen tokens, about one in eight runs
on to the cap (p50 about 33, p90 at the 256 cap: a chain simulation; the measured quantiles are
printed). The residual branches' output projections are initialized at 0.02/sqrt(2 × layers)
(GPT-2's scaling) so the layers barely move the chain. The stop probabilities are checked with one
forward pass before the runs.

Rounds interleave the two binaries (the order alternates each round; each round has its own
seed, the same for both sides), because this machine's speed drifts over minutes. Per side the
figure is the median of time/rollout over every measured step of every round; the ratio is
baseline ÷ meshrun (the ratio of the means is printed beside it). Response lengths come from
metrics.jsonl: response_len (mean) on both sides, response_len/p50 and /p90 where the binary logs
them (6cbb835 logs only the mean). Each run waits
(at most --quiet-wait s) for the machine to go quiet first and reports the CPU other processes
took while it ran; with --tries N > 1 one where they took more than --max-foreign cores is run
again. Everything is written under one temporary folder (Hugging Face's caches too, offline),
removed at the end unless --keep (which also keeps each run's metrics.jsonl).

  .venv/bin/python bench/rollout_phase_bench.py --meshrun build/meshrun \\
      --baseline /tmp/static/build/meshrun [--steps 4] [--rounds 3] [--prompts 8] [--keep]

  (the baseline: git worktree add /tmp/static 6cbb835; cd /tmp/static; meson setup build
   -Dtorch_python=/work/main/.venv/bin/python3 -Dtests=disabled; ninja -C build meshrun
   meshrun-engine: the front end hands `meshrun RECIPE` to the meshrun-engine beside it)

Sizes: on the 2-core machine a step takes 35-60 s (the update and the reference's forward on
64 × up to 288 tokens weigh more than the rollout), so a run of 4 steps takes 2.5-4 minutes and
the defaults (6 runs) 15-25 minutes; that is why a run has only 4 steps (3 measured, 9 per side
over 3 rounds). --prompts 4 halves a step.
"""
import argparse
import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("grpo_trl_bench", os.path.join(HERE, "grpo_trl_bench.py"))
trl_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trl_bench)  # its tokenizer, prompts, quiet-machine checks and environment

SEED = 1234
VOCAB = trl_bench.VOCAB  # 4096
CONFIG = dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=8,
              intermediate_size=1536)
SAMPLES_PER_PROMPT = 8
MAX_NEW_TOKENS = 256
MAX_PROMPT_LEN = 32
RUN_ON = 256  # tokens of the run-on state (the top of the vocabulary, eos excluded)
# The chain's per-step probabilities: after an ordinary token, eos and a run-on token; after a
# run-on token, eos and an ordinary token.
P_STOP, P_ENTER, P_STOP_RUN_ON, P_EXIT = 0.023, 0.004, 0.0002, 0.0008
CONSTANT, MARK = 64.0, 64.0  # the embedding's constant channel 0 and run-on mark on channel 1


# --- the model ---------------------------------------------------------------------------------

def run_on_ids(eos_id):
    return [t for t in range(VOCAB - 1, -1, -1) if t != eos_id][:RUN_ON]


def normed_channels(model, contexts):
    """The final norm's output channels 0 and 1 at each context's last position."""
    import torch
    out = {}
    handle = model.model.norm.register_forward_hook(lambda _m, _i, o: out.update(h=o))
    with torch.no_grad():
        for name, ids in contexts.items():
            model(torch.tensor([ids]))
            contexts[name] = (out["h"][0, -1, 0].item(), out["h"][0, -1, 1].item())
    handle.remove()
    return contexts


def next_token_probabilities(model, ids, eos_id, run_on):
    import torch
    with torch.no_grad():
        p = torch.softmax(model(torch.tensor([ids])).logits[0, -1].double(), -1)
    return p[eos_id].item(), p[run_on].sum().item()


def write_model(folder, eos_id, ordinary_context, run_on_context):
    """The Llama directory with the chain folded in; returns (parameters, measured probabilities)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging
    logging.disable_progress_bar()
    config = LlamaConfig(vocab_size=VOCAB, max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=10000.0,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=eos_id, pad_token_id=eos_id,
                         **CONFIG)
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    run_on = run_on_ids(eos_id)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(1.0 / math.sqrt(2 * config.num_hidden_layers))
            layer.mlp.down_proj.weight.mul_(1.0 / math.sqrt(2 * config.num_hidden_layers))
        embed = model.model.embed_tokens.weight
        embed[:, 0] = CONSTANT
        embed[:, 1] = 0.0
        embed[run_on, 1] = MARK
        head = model.lm_head.weight
        head[:, 0:2] = 0.0
        # The normed channels after an ordinary and after a run-on token, then the head's rows
        # that give each state its logits (every other token's stay near 0: near-uniform).
        (o0, _), (r0, r1) = normed_channels(model, {"ordinary": ordinary_context, "run_on": run_on_context}).values()
        others = VOCAB - 1 - RUN_ON

        def solve(ordinary_logit, run_on_logit):  # w0·o0 = ordinary_logit, w0·r0 + w1·r1 = run_on_logit
            w0 = ordinary_logit / o0
            return w0, (run_on_logit - w0 * r0) / r1

        # After an ordinary token: eos e^a, the run-on tokens RUN_ON·e^b, the others ≈ others.
        total = others / (1 - P_STOP - P_ENTER)
        stop_ordinary, enter = math.log(P_STOP * total), math.log(P_ENTER * total / RUN_ON)
        # After a run-on token: the ordinary tokens ≈ others (a P_EXIT share).
        total = others / P_EXIT
        stop_run_on, stay = math.log(P_STOP_RUN_ON * total), math.log((1 - P_EXIT - P_STOP_RUN_ON) * total / RUN_ON)
        head[eos_id, 0], head[eos_id, 1] = solve(stop_ordinary, stop_run_on)
        w0, w1 = solve(enter, stay)
        head[run_on, 0], head[run_on, 1] = w0, w1
    measured = {"ordinary": next_token_probabilities(model, ordinary_context, eos_id, run_on),
                "run_on": next_token_probabilities(model, run_on_context, eos_id, run_on)}
    model.save_pretrained(folder, safe_serialization=True)
    return sum(p.numel() for p in model.parameters()), measured


# --- the recipe -----------------------------------------------------------------------------

def recipe_text(model, data, hook, out, prompts, steps, seed):
    samples = prompts * SAMPLES_PER_PROMPT
    return f"""# rollout_phase_bench: GRPO on a long-tailed workload, the same recipe for both binaries.
name = "rollout-phase-bench"
algorithm = "ppo"
seed = {seed}

[launch]
type = "local"
procs_per_node = 1
device = "cpu"
backend = "gloo"
master_port = {trl_bench.free_port()}
timeout_minutes = 20

[batch]
rollout = {prompts}
n_samples_per_prompt = {SAMPLES_PER_PROMPT}
train = {samples}
micro_train = {min(16, samples)}
micro_rollout = {min(16, samples)}

[roles.actor]
model = "{model}"
dtype = "fp32"
learning_rate = 1e-5
lr_scheduler = "constant"
warmup_ratio = 0.0
max_norm = 1.0

[roles.ref]
model = "{model}"
dtype = "fp32"

[colocate]
all = true

[rollout]
engines = 1
max_prompt_len = {MAX_PROMPT_LEN}
max_new_tokens = {MAX_NEW_TOKENS}
temperature = 1.0
top_p = 1.0
# On the CPU an engine's KV cache is sized from this share of the host's memory; 0.9 (the
# default) leaves the colocated actor and reference too little by the plan's arithmetic.
memory_utilization = 0.5

[ppo]
advantage = "group_norm"
kl_mode = "loss"
kl_estimator = "k3"
init_kl_coef = 0.001
loss_agg = "seq-mean-token-mean"
eps_clip = 0.2
eps_clip_high = 0.28
max_epochs = 1
num_episodes = 1000

[train]
max_steps = {steps}

[data]
path = "{data}"
input_key = "prompt"
label_key = "answer"

[hooks]
script = "{hook}"

[checkpoint]
path = "{out}/checkpoints"
output = "{out}/model"
load = "never"

[logging]
steps = 1
dir = "{out}"
"""


# --- the runs -------------------------------------------------------------------------------

def run(binary, recipe, out, work, log, keep):
    """One run; its metrics rows after step 1."""
    rows = trl_bench.metrics_rows(binary, recipe, out, work, log, keep_metrics=keep)
    rows = [row for row in rows if "time/rollout" in row]
    if len(rows) < 2:
        raise SystemExit(f"{binary}: {len(rows)} steps with time/rollout in {out}/metrics.jsonl")
    return rows[1:]  # step 1 is the warm-up


def median(values):
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else float("nan")


def column(rows, key):
    return [row[key] for row in rows if key in row]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--meshrun", default="build/meshrun", help="today's binary (continuous batching)")
    parser.add_argument("--baseline", required=True, help="the static-batch binary (commit 6cbb835)")
    parser.add_argument("--steps", type=int, default=4, help="steps per run (the first is warm-up)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the two runs")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step (each 8 samples)")
    parser.add_argument("--workdir", default=None, help="folder to make the temporary work folder in")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, model, recipes, metrics)")
    parser.add_argument("--max-foreign", type=float, default=0.25,
                        help="a run during which other processes used more cores than this is run again")
    parser.add_argument("--tries", type=int, default=1, help="runs of one measurement at most (see --max-foreign)")
    parser.add_argument("--quiet-wait", type=float, default=120,
                        help="seconds to wait at most before a run for other processes to go quiet")
    args = parser.parse_args()
    if args.steps < 2 or args.rounds < 1 or args.tries < 1 or args.prompts < 1:
        parser.error("--steps ≥ 2, --rounds ≥ 1, --tries ≥ 1, --prompts ≥ 1")
    binaries = {"new": os.path.abspath(args.meshrun), "old": os.path.abspath(args.baseline)}
    for name, binary in binaries.items():
        version = subprocess.run([binary, "--version"], check=True, capture_output=True, text=True).stdout
        print(f"{name}: {binary} ({' '.join(version.split())})", flush=True)

    work = tempfile.mkdtemp(prefix="rollout_phase_bench.", dir=args.workdir)
    os.makedirs(os.path.join(work, "tmp"))
    os.environ.update(trl_bench.private_env(work))  # for the tokenizer and model written here too
    try:
        rows = trl_bench.prompt_rows(64)
        data = os.path.join(work, "prompts.jsonl")
        with open(data, "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        hook = os.path.join(work, "reward.lua")
        shutil.copyfile(trl_bench.LUA_REWARD_FILE, hook)
        model = os.path.join(work, "model")
        os.makedirs(model)
        eos_id = trl_bench.write_tokenizer(model, rows)
        from transformers import AutoTokenizer
        prompt_ids = AutoTokenizer.from_pretrained(model)(rows[0]["prompt"])["input_ids"]
        run_on = run_on_ids(eos_id)
        params, measured = write_model(model, eos_id, prompt_ids, prompt_ids + run_on[:3])
        for binary in binaries.values():
            trl_bench.check_tokenizer(binary, model, rows[0]["prompt"])
        print(f"model: {params / 1e6:.2f}M parameters; after an ordinary token eos {measured['ordinary'][0]:.4f}, "
              f"a run-on token {measured['ordinary'][1]:.4f}; after a run-on token eos {measured['run_on'][0]:.5f}, "
              f"another {measured['run_on'][1]:.4f} (aimed at {P_STOP}, {P_ENTER}, {P_STOP_RUN_ON}, "
              f"{1 - P_EXIT - P_STOP_RUN_ON:.4f})", flush=True)
        print(f"{args.prompts} prompts × {SAMPLES_PER_PROMPT} samples a step, max_new_tokens {MAX_NEW_TOKENS}; "
              f"{args.steps} steps × {args.rounds} rounds; {os.cpu_count()} cores", flush=True)

        results = {"old": [], "new": []}
        per_round = {"old": [], "new": []}
        for round_ in range(args.rounds):
            order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
            for name in order:
                for attempt in range(1, args.tries + 1):
                    tag = f"{name}-r{round_ + 1}-t{attempt}"
                    out = os.path.join(work, tag)
                    recipe = out + ".toml"
                    with open(recipe, "w") as f:
                        f.write(recipe_text(model, data, hook, out, args.prompts, args.steps, SEED + round_))
                    waited = trl_bench.wait_until_quiet(args.quiet_wait, args.max_foreign / 2)
                    load = trl_bench.ForeignLoad()
                    load.start()
                    steps = run(binaries[name], recipe, out, work, out + ".log", args.keep)
                    foreign, seconds = load.cores(), time.monotonic() - load.wall
                    rollout = median(column(steps, "time/rollout"))
                    print(f"round {round_ + 1} {name}: time/rollout {rollout:.3f} s (steps: "
                          f"{', '.join(f'{x:.2f}' for x in column(steps, 'time/rollout'))}); response_len mean "
                          f"{median(column(steps, 'response_len')):.1f}, p50 {median(column(steps, 'response_len/p50')):.0f}, "
                          f"p90 {median(column(steps, 'response_len/p90')):.0f}; run {seconds:.0f} s after {waited:.0f} s "
                          f"waiting; other processes used {foreign:.2f} cores", flush=True)
                    if foreign <= args.max_foreign:
                        break
                results[name] += steps
                per_round[name].append(rollout)

        print()
        summary = {}
        for name in ("old", "new"):
            steps = results[name]
            summary[name] = median(column(steps, "time/rollout"))
            print(f"{name} ({binaries[name]}): time/rollout median {summary[name]:.3f} s over {len(steps)} steps; "
                  f"per round {', '.join(f'{x:.3f}' for x in per_round[name])}; response_len mean "
                  f"{median(column(steps, 'response_len')):.1f}, per-step p50 {median(column(steps, 'response_len/p50')):.0f}, "
                  f"p90 {median(column(steps, 'response_len/p90')):.0f}, max {median(column(steps, 'response_len/max')):.0f} "
                  f"(medians over steps; nan: not logged)")
        ratios = [o / n for o, n in zip(per_round["old"], per_round["new"])]
        print(f"per-round ratios old/new: {', '.join(f'{r:.2f}' for r in ratios)}")
        means = {name: statistics.mean(column(results[name], "time/rollout")) for name in ("old", "new")}
        print(f"rollout phase: old/new = {summary['old'] / summary['new']:.2f}× on the medians (aim ≥ 2.5×), "
              f"{means['old'] / means['new']:.2f}× on the means ({means['old']:.3f} / {means['new']:.3f} s)")
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
