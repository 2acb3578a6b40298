#!/usr/bin/env python3
"""A 2-process CPU job beside a competing busy load (issue #35, item 6).

Runs the quickstart recipe (PPO, 2 local processes) alone and beside
`--busy` processes that each spin on a core, in interleaved rounds (this
machine's speed drifts over minutes, so only same-round ratios count),
each way (POLICIES below): as `meshrun` starts the engine, and with a
fixed team that sleeps at once, spins about 0.1 ms first or spins
libgomp's default milliseconds first.
Reports the median seconds per step from the rows' timestamps in
metrics.jsonl, and compares the slowdown with the fair share: with W
workers and B busy processes on C cores the job gets min(1, C / (W + B))
of the CPU it had, so a proportional slowdown is max(1, (W + B) / C).
A job that spins while it waits (on a collective, a queue) loses far more
than that. Standard library only: it runs under any python3.

  python3 bench/contention_bench.py --meshrun build/meshrun --recipe recipes/quickstart.toml
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


# How the engine's OpenMP threads wait and whether the team follows the
# CPU left to it, as environment variables (None: unset; libgomp ignores an
# empty value). "meshrun" leaves all three unset: what `meshrun` then does
# (src/cli/engine_handoff.cpp: PASSIVE with a spin of about 0.1 ms;
# src/train/train_threads.cpp: the team shrinks to the cores other
# processes leave). The others keep the team fixed: "passive" sleeps at
# once (meshrun's default before the governor), "bounded" spins about
# 0.1 ms first, "spin" is libgomp's own default of milliseconds.
POLICIES = {
    "meshrun": {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None, "MESHRUN_ADAPTIVE_THREADS": None},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None, "MESHRUN_ADAPTIVE_THREADS": "0"},
    "bounded": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "10000", "MESHRUN_ADAPTIVE_THREADS": "0"},
    "spin": {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": None, "MESHRUN_ADAPTIVE_THREADS": "0"},
}


def step_seconds(log_dir):
    """The median seconds between rows, and the rows' cpu/threads ("-" when the governor is off)."""
    stamps, threads = [], []
    with open(os.path.join(log_dir, "metrics.jsonl")) as rows:
        for line in rows:
            row = json.loads(line)
            stamps.append(row["time"])
            threads.append(row.get("cpu/threads"))
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    shown = "-" if all(t is None for t in threads) else "".join(str(t) for t in threads)
    return (statistics.median(gaps) if gaps else float("nan")), shown


def run_job(args, folder, port, environment):
    log_dir = os.path.join(folder, "run")
    command = [
        args.meshrun, args.recipe,
        "--set", f"train.max_steps={args.steps}",
        "--set", "checkpoint.save_steps=-1",
        "--set", f'checkpoint.path="{folder}/ck"',
        "--set", f'checkpoint.output="{folder}/model"',
        "--set", f'logging.dir="{log_dir}"',
        "--set", f"launch.master_port={port}",
    ]
    for assignment in args.set:
        command += ["--set", assignment]
    started = time.monotonic()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=args.timeout,
                          env=environment)
    if done.returncode != 0:
        sys.exit(f"contention_bench: the job failed ({done.returncode}):\n{done.stdout[-2000:]}")
    seconds, threads = step_seconds(log_dir)
    return seconds, threads, time.monotonic() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--meshrun", required=True)
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2, help="the recipe's processes")
    parser.add_argument("--busy", type=int, default=1, help="competing processes, one spinning core each")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="passed on to meshrun (e.g. launch.procs_per_node=1 with --workers 1)")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    fair = max(1.0, (args.workers + args.busy) / cores)
    modes = [(load, policy) for policy in POLICIES for load in ("alone", "loaded")]
    seconds_of = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="meshrun-contention-") as root:
        for round_index in range(args.rounds):
            for index, (load, policy) in enumerate(modes):
                folder = os.path.join(root, f"{load}-{policy}-{round_index}")
                port = 29000 + (os.getpid() + 4 * round_index + index) % 2000
                environment = dict(os.environ)
                for name, value in POLICIES[policy].items():
                    if value is None:
                        environment.pop(name, None)
                    else:
                        environment[name] = value
                competitors = []
                if load == "loaded":
                    competitors = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
                try:
                    seconds, threads, wall = run_job(args, folder, port, environment)
                finally:
                    for competitor in competitors:
                        competitor.kill()
                        competitor.wait()
                seconds_of[(load, policy)].append(seconds)
                print(f"round {round_index + 1} {load:6s} {policy:7s}: {seconds * 1000:8.1f} ms/step  (job {wall:.1f} s; threads per step {threads})")
    print(f"\n{cores} cores, {args.workers} workers, {args.busy} busy process(es); "
          f"a proportional slowdown would be {fair:.2f}x")
    for policy in POLICIES:
        alone, loaded = seconds_of[("alone", policy)], seconds_of[("loaded", policy)]
        ratios = [b / a for a, b in zip(alone, loaded)]
        slowdown = statistics.median(ratios)
        print(f"{policy:7s}: alone {statistics.median(alone) * 1000:.1f} ms/step, loaded "
              f"{statistics.median(loaded) * 1000:.1f} ms/step: slowdown {slowdown:.2f}x "
              f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)}), {slowdown / fair:.2f}x the proportional one")
    spin_alone = statistics.median(seconds_of[("alone", "spin")])
    for policy in ("meshrun", "passive", "bounded"):
        print(f"alone, {policy} / spin: {statistics.median(seconds_of[('alone', policy)]) / spin_alone:.2f}")

if __name__ == "__main__":
    main()
