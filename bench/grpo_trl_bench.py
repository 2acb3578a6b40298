#!/usr/bin/env python3
"""A GRPO step of meshrun against TRL's GRPOTrainer (issue #36, item 6).

Both sides train the same Llama-style model (random weights, fp32, one
Hugging Face directory written here with a byte-level BPE tokenizer that
both read) on the same prompts and the same verifiable reward, with the same
settings: 8 prompts a step × 8 samples (64 completions), at most 32 new
tokens, temperature 1, top-p 1, no top-k; GRPO advantages (each group's
rewards less their mean, over their std); the k3 KL to a frozen reference
copy in the loss with beta 0.001; the clipped ratio at 0.2 aggregated over
the step's tokens (TRL's default loss "dapo", meshrun's "token-mean");
micro-batches of 16; one AdamW step per rollout batch (lr 1e-5 constant,
betas 0.9/0.999, clipping at 1.0); on this machine's CPU. TRL runs in one
process on 2 torch threads; meshrun with 1 process (2 threads: its default,
cores ÷ processes) and with 2 processes (1 thread each).

Time per step: the interval between consecutive steps' ends (meshrun: the
"time" stamps of metrics.jsonl; TRL: a TrainerCallback's on_step_end), step 1
left out as warm-up. Rounds interleave TRL, meshrun 1 process and meshrun 2
processes; the figure per side is the median over every measured step of
every round (this machine's speed drifts over minutes). Each run waits for
the machine to go quiet first and counts the CPU other processes took while
it ran (/proc/stat less its own); one where they took more than
--max-foreign cores is run again (in a trial run, two compilers beside
TRL made its 23M step 9x slower, 43 s instead of 4.6: its OpenMP threads
spin while they wait, libgomp's default). Everything is written under one temporary
folder (Hugging Face's caches too, offline), removed at the end unless --keep.

  .venv/bin/python bench/grpo_trl_bench.py --meshrun build/meshrun [--sizes small,medium]
      [--steps 8] [--rounds 3] [--workdir DIR] [--keep]

Needs `scripts/setup.sh --bench` (the pinned transformers, TRL, accelerate
and datasets in .venv). The same file is the TRL worker (--trl-worker), run
by the driver in a fresh process per run.
"""
import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

VOCAB = 4096
EOS = "<|endoftext|>"
SEED = 1234
THREADS = 2  # TRL's torch threads; meshrun's default on this 2-core machine with 1 process
SIZES = {
    # name: LlamaConfig fields
    "small": dict(hidden_size=192, num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2,
                  intermediate_size=512),
    "medium": dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=8,
                   intermediate_size=1376),
}
SETTINGS = dict(prompts_per_step=8, samples_per_prompt=8, micro_batch=16, max_new_tokens=32, beta=0.001,
                learning_rate=1e-5, epsilon=0.2, max_grad_norm=1.0)

# The reward, the same on both sides: the share of the response's bytes that
# are the prompt's labelled letter. meshrun runs grpo-tiny's own Lua hook;
# letter_share_reward below computes the same for TRL.
LUA_REWARD_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "recipes", "hooks",
                               "grpo_tiny_reward.lua")


def letter_share_reward(completions, answer, **_):
    rewards = []
    for text, letter in zip(completions, answer):
        data = text.encode("utf-8")
        rewards.append(data.count(letter.encode("utf-8")) / max(1, len(data)))
    return rewards


# --- the work folder: tokenizer, models, prompts, hook, recipes ----------------------------------

def words(rng, count):
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(count)]


def prompt_rows(count):
    rng = random.Random(SEED)
    rows = []
    for _ in range(count):
        letter = rng.choice("aeiou")
        rows.append({"prompt": f"{' '.join(words(rng, 2))} say {letter}{letter}:", "answer": letter})
    return rows


def write_tokenizer(folder, rows):
    """A byte-level BPE of exactly VOCAB ids (one of them the eos), trained on random words and the
    prompts, so that every id the random model samples decodes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    rng = random.Random(SEED)
    corpus = [" ".join(words(rng, 12)) for _ in range(4000)] + [row["prompt"] for row in rows]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus, trainer)
    if tokenizer.get_vocab_size() != VOCAB:
        raise SystemExit(f"the tokenizer has {tokenizer.get_vocab_size()} ids, not {VOCAB}")
    tokenizer.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS, "pad_token": EOS,
                   "bos_token": None, "model_max_length": 512, "clean_up_tokenization_spaces": False}, f)
    return tokenizer.token_to_id(EOS)


def write_model(folder, size, eos_id):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging
    logging.disable_progress_bar()
    config = LlamaConfig(vocab_size=VOCAB, max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=10000.0,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=eos_id, pad_token_id=eos_id,
                         **SIZES[size])
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(folder, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def check_tokenizer(meshrun, folder, text):
    """meshrun and transformers must read the tokenizer alike: the same ids for a prompt."""
    from transformers import AutoTokenizer
    theirs = AutoTokenizer.from_pretrained(folder)(text)["input_ids"]
    ours = json.loads(subprocess.run([meshrun, "tokenize", folder, "--text", text], check=True,
                                     capture_output=True, text=True).stdout)
    if ours != theirs:
        raise SystemExit(f"the tokenizers disagree on {text!r}: meshrun {ours}, transformers {theirs}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def meshrun_recipe(path, model, data, hook, out, procs, steps):
    s = SETTINGS
    text = f"""# grpo_trl_bench: meshrun's side of the GRPO step against TRL's GRPOTrainer.
name = "grpo-trl-bench"
algorithm = "ppo"
seed = {SEED}

[launch]
type = "local"
procs_per_node = {procs}
device = "cpu"
backend = "gloo"
master_port = {free_port()}
timeout_minutes = 10

[batch]
rollout = {s['prompts_per_step']}
n_samples_per_prompt = {s['samples_per_prompt']}
train = {s['prompts_per_step'] * s['samples_per_prompt']}
micro_train = {s['micro_batch']}
micro_rollout = {s['micro_batch']}

[roles.actor]
model = "{model}"
dtype = "fp32"
learning_rate = {s['learning_rate']}
lr_scheduler = "constant"
warmup_ratio = 0.0
adam_beta1 = 0.9
adam_beta2 = 0.999
adam_eps = 1e-8
weight_decay = 0.0
max_norm = {s['max_grad_norm']}

[roles.ref]
model = "{model}"
dtype = "fp32"

[colocate]
all = true

[rollout]
engines = {procs}
max_prompt_len = 64
max_new_tokens = {s['max_new_tokens']}
temperature = 1.0
top_p = 1.0

[ppo]
advantage = "group_norm"
kl_mode = "loss"
kl_estimator = "k3"
init_kl_coef = {s['beta']}
loss_agg = "token-mean"
eps_clip = {s['epsilon']}
eps_clip_high = {s['epsilon']}
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
    with open(path, "w") as f:
        f.write(text)


# --- a quiet machine --------------------------------------------------------------------------

def busy_seconds():
    """CPU seconds the whole machine has spent busy (/proc/stat), and those of this process and its
    waited-for descendants: their difference over a run is what other processes took."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    times = os.times()
    return ((user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK"),
            times.user + times.system + times.children_user + times.children_system)


class ForeignLoad:
    """Cores' worth of CPU that processes other than ours used between start() and cores()."""

    def start(self):
        self.wall = time.monotonic()
        self.machine, self.own = busy_seconds()

    def cores(self):
        machine, own = busy_seconds()
        return max(0.0, (machine - self.machine) - (own - self.own)) / max(1e-6, time.monotonic() - self.wall)


def wait_until_quiet(limit_s, threshold):
    """Waits (at most limit_s) until other processes use under `threshold` cores over 3 s."""
    load, start = ForeignLoad(), time.monotonic()
    while True:
        load.start()
        time.sleep(3)
        if load.cores() < threshold or time.monotonic() - start > limit_s:
            return time.monotonic() - start


# --- the two sides ----------------------------------------------------------------------------

def private_env(work):
    """Caches and temporary files inside the work folder; Hugging Face offline."""
    return dict(TMPDIR=os.path.join(work, "tmp"), HF_HOME=os.path.join(work, "hf"), HF_HUB_OFFLINE="1",
                HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", XDG_CACHE_HOME=os.path.join(work, "cache"),
                TOKENIZERS_PARALLELISM="false")


def child_env(work):
    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MESHRUN_THREADS", "OMP_WAIT_POLICY",
                "GOMP_SPINCOUNT", "MESHRUN_ADAPTIVE_THREADS"):
        env.pop(key, None)  # each side as a user starts it (meshrun picks its threads per process)
    env.update(private_env(work))
    return env


def metrics_rows(binary, recipe, out, work, log, keep_metrics=False):
    """Runs `binary recipe` as a user would (child_env) and returns the rows of its
    metrics.jsonl; the run's folder `out` is removed (with keep_metrics, metrics.jsonl is
    kept beside it first). rollout_phase_bench.py runs its binaries through this too."""
    with open(log, "w") as f:
        done = subprocess.run([binary, recipe], stdout=f, stderr=subprocess.STDOUT, env=child_env(work))
    if done.returncode != 0:
        with open(log) as f:
            sys.stderr.write(f.read()[-4000:])
        raise SystemExit(f"{binary} failed ({done.returncode}): {recipe}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if keep_metrics:
        shutil.copyfile(os.path.join(out, "metrics.jsonl"), out + ".metrics.jsonl")
    shutil.rmtree(out, ignore_errors=True)  # checkpoints and the final model: not needed
    return rows


def run_meshrun(meshrun, recipe, out, work, log):
    rows = metrics_rows(meshrun, recipe, out, work, log)
    steps = []
    for before, row in zip(rows, rows[1:]):  # step 1 is the warm-up
        steps.append(dict(step=row["time"] - before["time"], generate=row.get("time/rollout", 0.0),
                          score=row.get("time/scoring", 0.0) + row.get("time/hooks", 0.0),
                          train=row.get("time/train", 0.0) + row.get("time/sync", 0.0),
                          length=row.get("response_len", float("nan"))))
    return steps


def run_trl(model, data, out, steps, work, log):
    config = os.path.join(out + ".json")
    result = out + ".result.json"
    with open(config, "w") as f:
        json.dump(dict(model=model, data=data, out=out, steps=steps, result=result), f)
    with open(log, "w") as f:
        env = child_env(work)
        env.update(OMP_NUM_THREADS=str(THREADS))
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--trl-worker", config], stdout=f,
                              stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        with open(log) as f:
            sys.stderr.write(f.read()[-4000:])
        raise SystemExit(f"the TRL worker failed ({done.returncode})")
    with open(result) as f:
        steps = json.load(f)["steps"]
    shutil.rmtree(out, ignore_errors=True)
    return steps[1:]  # step 1 is the warm-up


def trl_worker(config_path):
    """One TRL GRPOTrainer run of `steps` optimizer steps; writes each step's times."""
    with open(config_path) as f:
        config = json.load(f)
    import torch
    torch.set_num_threads(THREADS)
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    with open(config["data"]) as f:
        rows = [json.loads(line) for line in f]
    s = SETTINGS
    clock = time.perf_counter
    phases = {"generate": 0.0, "generate_and_score": 0.0}

    class TimedTrainer(GRPOTrainer):
        def _generate(self, prompts):
            start = clock()
            try:
                return super()._generate(prompts)
            finally:
                phases["generate"] += clock() - start

        def _generate_and_score_completions(self, inputs):
            start = clock()
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                phases["generate_and_score"] += clock() - start

    records = []

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.begin = None
            self.last_end = None
            self.length = float("nan")

        def on_train_begin(self, args, state, control, **kwargs):
            self.last_end = clock()

        def on_step_begin(self, args, state, control, **kwargs):
            self.begin = clock()
            phases.update(generate=0.0, generate_and_score=0.0)

        def on_step_end(self, args, state, control, **kwargs):
            end = clock()
            inside = end - self.begin
            records.append(dict(step=end - self.last_end, inside=inside, generate=phases["generate"],
                                score=phases["generate_and_score"] - phases["generate"],
                                train=inside - phases["generate_and_score"]))
            self.last_end = end

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs and records:
                records[-1]["length"] = logs["completions/mean_length"]

    args = GRPOConfig(
        output_dir=config["out"], use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        report_to="none", logging_steps=1, save_strategy="no", eval_strategy="no", disable_tqdm=True,
        seed=SEED, max_steps=config["steps"], per_device_train_batch_size=s["micro_batch"],
        gradient_accumulation_steps=s["prompts_per_step"] * s["samples_per_prompt"] // s["micro_batch"],
        num_generations=s["samples_per_prompt"], max_completion_length=s["max_new_tokens"], temperature=1.0,
        top_p=1.0, top_k=0, beta=s["beta"], num_iterations=1, epsilon=s["epsilon"], loss_type="dapo",
        scale_rewards="group", learning_rate=s["learning_rate"], lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=0.0, max_grad_norm=s["max_grad_norm"],
        dataloader_num_workers=0)
    trainer = TimedTrainer(model=config["model"], reward_funcs=[letter_share_reward], args=args,
                           train_dataset=Dataset.from_list(rows), callbacks=[StepTimes()])
    dtypes = {p.dtype for p in trainer.model.parameters()}
    if dtypes != {torch.float32} or trainer.args.activation_checkpointing:
        raise SystemExit(f"TRL's model is not fp32 without checkpointing: {dtypes}, "
                         f"{trainer.args.activation_checkpointing}")
    trainer.train()
    with open(config["result"], "w") as f:
        json.dump({"steps": records, "threads": torch.get_num_threads()}, f)


# --- the driver -------------------------------------------------------------------------------

def median(values):
    return statistics.median(values) if values else float("nan")


def summary(steps):
    return {key: median([s[key] for s in steps if key in s]) for key in ("step", "generate", "score", "train",
                                                                         "length")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--meshrun", default="build/meshrun", help="the meshrun binary (meshrun-engine beside it)")
    parser.add_argument("--sizes", default="small,medium", help=f"comma list of {', '.join(SIZES)}")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run (the first is warm-up)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the three runs")
    parser.add_argument("--workdir", default=None, help="folder to make the temporary work folder in")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, models, recipes)")
    parser.add_argument("--max-foreign", type=float, default=0.25,
                        help="a run during which other processes used more cores than this is run again")
    parser.add_argument("--tries", type=int, default=3, help="runs of one measurement at most (see --max-foreign)")
    parser.add_argument("--quiet-wait", type=float, default=600,
                        help="seconds to wait at most before a run for other processes to go quiet")
    parser.add_argument("--trl-worker", metavar="CONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trl_worker:
        trl_worker(args.trl_worker)
        return
    sizes = [size for size in args.sizes.split(",") if size]
    unknown = [size for size in sizes if size not in SIZES]
    if unknown or args.steps < 2 or args.rounds < 1 or args.tries < 1:
        parser.error(f"sizes among {', '.join(SIZES)}, --steps ≥ 2, --rounds ≥ 1, --tries ≥ 1")
    meshrun = os.path.abspath(args.meshrun)
    version = subprocess.run([meshrun, "--version"], check=True, capture_output=True, text=True).stdout
    try:
        import datasets  # noqa: F401 (TRL's worker needs it)
        import transformers
        import trl
    except ImportError as error:
        print(f"grpo_trl_bench: {error}: run scripts/setup.sh --bench (skipped)", file=sys.stderr)
        sys.exit(77)  # meson's code for a skipped test
    print(f"meshrun: {meshrun} ({version.splitlines()[0]}, {version.splitlines()[1]}); TRL {trl.__version__}, "
          f"transformers {transformers.__version__}; {os.cpu_count()} cores; {args.steps} steps × {args.rounds} "
          f"rounds", flush=True)

    work = tempfile.mkdtemp(prefix="grpo_trl_bench.", dir=args.workdir)
    os.makedirs(os.path.join(work, "tmp"))
    os.environ.update(private_env(work))  # for the tokenizer and models written here too
    try:
        rows = prompt_rows(64)
        data = os.path.join(work, "prompts.jsonl")
        with open(data, "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        hook = os.path.join(work, "reward.lua")
        with open(hook, "w") as f:
            with open(LUA_REWARD_FILE) as source:
                f.write(source.read())
        models = {}
        for size in sizes:
            folder = os.path.join(work, f"model-{size}")
            os.makedirs(folder)
            eos_id = write_tokenizer(folder, rows)
            params = write_model(folder, size, eos_id)
            check_tokenizer(meshrun, folder, rows[0]["prompt"])
            models[size] = (folder, params)

        results = {size: {"trl": [], "p1": [], "p2": []} for size in sizes}
        per_round = {size: {"trl": [], "p1": [], "p2": []} for size in sizes}
        foreign_max = {size: {"trl": 0.0, "p1": 0.0, "p2": 0.0} for size in sizes}
        for round_ in range(args.rounds):
            for size in sizes:
                folder, _ = models[size]
                runs = [("trl", None), ("p1", 1), ("p2", 2)]
                for name, procs in runs:
                    for attempt in range(1, args.tries + 1):
                        tag = f"{size}-{name}-r{round_}-t{attempt}"
                        out = os.path.join(work, tag)
                        log = out + ".log"
                        waited = wait_until_quiet(args.quiet_wait, args.max_foreign / 2)
                        load = ForeignLoad()
                        load.start()
                        if procs is None:
                            steps = run_trl(folder, data, out, args.steps, work, log)
                        else:
                            recipe = out + ".toml"
                            meshrun_recipe(recipe, folder, data, hook, out, procs, args.steps)
                            steps = run_meshrun(meshrun, recipe, out, work, log)
                        foreign = load.cores()
                        seconds = time.monotonic() - load.wall
                        print(f"round {round_ + 1} {size} {name}: {median([s['step'] for s in steps]):.3f} s/step "
                              f"({seconds:.0f} s run after {waited:.0f} s waiting for a quiet machine; other "
                              f"processes used {foreign:.2f} cores)", flush=True)
                        if foreign <= args.max_foreign:
                            break
                    foreign_max[size][name] = max(foreign_max[size][name], foreign)
                    results[size][name] += steps
                    per_round[size][name].append(median([s["step"] for s in steps]))

        print()
        for size in sizes:
            _, params = models[size]
            trl_s, p1, p2 = (summary(results[size][k]) for k in ("trl", "p1", "p2"))
            print(f"{size} ({params / 1e6:.2f}M params): meshrun 1 proc {p1['step']:.3f} s/step "
                  f"({trl_s['step'] / p1['step']:.2f}× TRL); meshrun 2 procs {p2['step']:.3f} s/step "
                  f"({trl_s['step'] / p2['step']:.2f}×); TRL {trl_s['step']:.3f} s/step")
            for name, label, s in (("p1", "meshrun 1 proc", p1), ("p2", "meshrun 2 procs", p2), ("trl", "TRL", trl_s)):
                rounds = ", ".join(f"{x:.3f}" for x in per_round[size][name])
                print(f"  {label:16s} generate {s['generate']:.3f} s, score (ref, reward) {s['score']:.3f} s, "
                      f"train {s['train']:.3f} s; response length {s['length']:.1f}; per round: {rounds}; "
                      f"other processes ≤ {foreign_max[size][name]:.2f} cores")
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
