#!/usr/bin/env python3
# The entrypoint of the Ray job that `meshrun submit RECIPE --ray` submits:
# it reserves one STRICT_PACK placement group per node of the plan's cluster
# (procs_per_node bundles of {CPU: 1}, or {CPU: 1, GPU: 1} on cuda), starts
# one Ray actor per bundle, and has each actor run one native meshrun worker
# with torchrun's variables plus MESHRUN_LAUNCHER=ray. It supervises them as
# meshrun's local launcher does: the first failing rank stops the others and
# sets the job's exit status, and [launch] max_restarts restarts the group.
#
# Invariants: every wait is bounded (placement, each answer from an actor,
# stopping); a worker dies with its actor (PR_SET_PDEATHSIG) and the actors
# and placement groups go with this script (try/finally, and Ray ends a job's
# actors when its driver dies); output follows the local launcher's policy
# (rank 0's stdout and every rank's stderr, prefixed "[rank N] "; other
# ranks' stdout only as its last lines when that rank fails); every line of
# this script's own starts with "[ray] ".
#
# Why not Ray Train's TorchTrainer: it runs Python functions in its workers
# and owns the process group; meshrun's workers are a native binary that does
# its own rendezvous from torchrun's variables, so all Ray has to give is the
# placement and a process per bundle. Python only because Ray's API is.

import argparse
import base64
import collections
import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

POLL_INTERVAL = 0.2  # seconds between two polls of every worker
ANSWER_TIMEOUT = 60.0  # the longest an actor may take to answer a call
OUTPUT_DRAIN = 2.0  # how long after a worker's end its pipes may stay open
SIGNAL_STOP_WAIT = 2.0  # Ray SIGKILLs a stopped job's entrypoint ~3 s after SIGTERM
PENDING_LINES = 10000  # lines an actor holds per stream between two polls
KEPT_LINES = 20  # hidden stdout lines kept per rank for its failure report
PR_SET_PDEATHSIG = 1


def say(text):
    print("[ray] " + text, file=sys.stderr, flush=True)


def one_line(error):
    return " ".join(str(error).split())[:300] or type(error).__name__


class WorkerProcess:
    """One native worker under one Ray actor (ray.remote wraps it in
    Job.run_attempt(); the class travels by value, as it lives in __main__).
    Its methods run one at a time on the actor's main thread, which matters:
    PR_SET_PDEATHSIG fires when the thread that forked the child ends."""

    def __init__(self):
        self.process = None
        self.readers = []
        self.lock = threading.Lock()
        self.pending = {name: collections.deque(maxlen=PENDING_LINES) for name in ("out", "err")}
        self.dropped = {"out": 0, "err": 0}
        self.records = None
        self.rank = None
        self.ended_at = None
        self.exit = None
        self.stopped = False

    def node_ip(self):
        import ray

        return ray.util.get_node_ip_address()

    def gpu_ids(self):
        import ray

        return [str(gpu) for gpu in ray.get_gpu_ids()]

    def choose_port(self, preferred):
        ip = self.node_ip()
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        for port in (preferred, 0):
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((ip, port))
                except OSError:
                    if port == 0:
                        raise
                    continue
                return sock.getsockname()[1]

    def start(self, argv, env, cwd=None):
        self.rank = env["RANK"]
        self.records = tempfile.mkdtemp(prefix="meshrun-ray-failures-")
        full_env = dict(os.environ, **env, MESHRUN_FAILURE_RECORD=self.records)
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork
        parent = os.getpid()

        def die_with_actor():
            # Ray blocks SIGINT in its processes; a worker gets a plain mask.
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the actor died before prctl
                os.kill(os.getpid(), signal.SIGKILL)

        try:
            self.process = subprocess.Popen(
                argv, env=full_env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=die_with_actor)
        except OSError as error:
            shutil.rmtree(self.records, ignore_errors=True)
            self.exit = {"status": 127, "description": f"could not be started: {error}",
                         "repeats": False}
            return
        for name, stream in (("out", self.process.stdout), ("err", self.process.stderr)):
            reader = threading.Thread(target=self._read, args=(name, stream), daemon=True)
            reader.start()
            self.readers.append(reader)

    def _read(self, name, stream):
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            with self.lock:
                if len(self.pending[name]) == PENDING_LINES:
                    self.dropped[name] += 1  # the deque drops the oldest
                self.pending[name].append(line)
        stream.close()

    def _take(self, name):
        with self.lock:
            lines = list(self.pending[name])
            self.pending[name].clear()
            if self.dropped[name]:
                lines.insert(0, f"... {self.dropped[name]} lines dropped")
                self.dropped[name] = 0
        return lines

    def _exit_info(self):
        if self.exit is not None or self.process is None:
            return self.exit
        code = self.process.poll()
        if code is None:
            return None
        if self.ended_at is None:
            self.ended_at = time.monotonic()
        if (any(reader.is_alive() for reader in self.readers)
                and time.monotonic() - self.ended_at < OUTPUT_DRAIN):
            return None  # its last lines may still be in the pipes
        if code >= 0:
            info = {"status": code, "description": f"exited with status {code}"}
        else:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            info = {"signal": -code, "description": f"was killed by signal {-code} ({name})"}
        info["repeats"] = False
        try:
            with open(os.path.join(self.records, f"rank-{self.rank}"), errors="replace") as record:
                info["repeats"] = "repeats" in record.read(64)
        except OSError:
            pass
        shutil.rmtree(self.records, ignore_errors=True)
        self.exit = info
        return info

    def poll(self):
        """(stdout lines, stderr lines, exit): each line once; exit is None
        while the worker runs, and comes with its last lines."""
        info = self._exit_info()  # before taking the lines: none can follow it
        return self._take("out"), self._take("err"), info

    def stop(self, grace):
        """SIGTERM to the worker's process group, SIGKILL after `grace`
        seconds; idempotent. Returns what poll() returns, with the exit."""
        if self.process is not None and not self.stopped:
            self.stopped = True
            if self.process.poll() is None:
                self._signal_group(signal.SIGTERM)
                try:
                    self.process.wait(grace)
                except subprocess.TimeoutExpired:
                    pass
            self._signal_group(signal.SIGKILL)  # and whatever it left behind
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                pass
            deadline = time.monotonic() + OUTPUT_DRAIN
            for reader in self.readers:
                reader.join(max(0.0, deadline - time.monotonic()))
            self.ended_at = time.monotonic() - OUTPUT_DRAIN  # what it wrote is all there is
        return self.poll()

    def _signal_group(self, signum):
        try:
            os.killpg(self.process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


class Failure:
    """Why an attempt ended: `text` follows "rank N", `code` is the job's
    status, `lost` says the rank's actor is dead or hung; `repeating` is the
    first rank whose failure a restart would repeat."""

    def __init__(self, rank, text, code, lost=False):
        self.rank, self.text, self.code, self.lost = rank, text, code, lost
        self.repeating = None


class Interrupted(BaseException):
    """SIGTERM or SIGINT (`ray job stop`), raised by check_stop()."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


# The handler only notes the signal: an exception raised inside Ray's C++
# calls (ray.wait runs the handlers) comes out as a SystemError. Every wait
# is sliced and calls check_stop(), so the stop starts within 0.5 s.
_stop = {"signal": None, "armed": False}


def on_signal(signum, frame):
    if _stop["signal"] is None:
        _stop["signal"] = signum


def check_stop():
    if _stop["armed"] and _stop["signal"] is not None:
        _stop["armed"] = False  # once: stopping waits too
        raise Interrupted(_stop["signal"])


def pause(seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check_stop()
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    check_stop()


class Job:
    def __init__(self, options, argv, job_id):
        self.options, self.argv, self.job_id = options, argv, job_id
        self.world = options.nodes * options.procs_per_node
        self.bundle = {"CPU": 1, "GPU": 1} if options.device == "cuda" else {"CPU": 1}
        self.groups = []
        self.actors = []

    def place(self):
        """Reserves the placement groups; False (after saying why) when the
        cluster cannot place one within --placement-timeout."""
        from ray.util.placement_group import placement_group

        o = self.options
        self.groups = [
            placement_group([dict(self.bundle) for _ in range(o.procs_per_node)],
                            strategy="STRICT_PACK", name=f"meshrun-{self.job_id}-node-{node}")
            for node in range(o.nodes)]
        deadline = time.monotonic() + o.placement_timeout
        for node, group in enumerate(self.groups):
            if not wait_for([group.ready()], deadline - time.monotonic()):
                bundle = "{" + ", ".join(f"{k}: {v}" for k, v in self.bundle.items()) + "}"
                say(f"the placement group of node {node} of {o.nodes} ({o.procs_per_node} "
                    f"bundles of {bundle}) was not placed within {o.placement_timeout:g} s; "
                    f"the cluster's free resources: {free_resources(self.bundle)}")
                return False
        return True

    def gather(self, refs, timeout=ANSWER_TIMEOUT):
        """{rank: answer or Failure} for {rank: ObjectRef}, within `timeout`."""
        import ray
        from ray.exceptions import RayError

        ready = wait_for(list(refs.values()), timeout)
        answers = {}
        for rank, ref in sorted(refs.items()):
            if ref not in ready:
                answers[rank] = Failure(rank, f"'s Ray worker did not answer for {timeout:g} s",
                                        1, lost=True)
                continue
            try:
                answers[rank] = ray.get(ref)
            except RayError as error:
                answers[rank] = Failure(rank, f"'s Ray worker died: {one_line(error)}", 1,
                                        lost=True)
        return answers

    def run_attempt(self):
        """Starts the workers and supervises them to the end: None when every
        rank exits 0, else the first failure."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        o = self.options
        actor = ray.remote(WorkerProcess)
        gpus = 1 if o.device == "cuda" else 0
        self.actors = []
        for rank in range(self.world):
            node, local = divmod(rank, o.procs_per_node)
            where = PlacementGroupSchedulingStrategy(placement_group=self.groups[node],
                                                     placement_group_bundle_index=local)
            self.actors.append(actor.options(num_cpus=1, num_gpus=gpus, max_restarts=0,
                                             scheduling_strategy=where).remote())
        # The rendezvous: rank 0's node, the recipe's master port when free there.
        ips = self.gather({rank: a.node_ip.remote() for rank, a in enumerate(self.actors)})
        failed = first_failure(ips)
        if failed:
            return self.fail(failed)
        port = self.gather({0: self.actors[0].choose_port.remote(o.master_port)})[0]
        if isinstance(port, Failure):
            return self.fail(port)
        devices = {}
        if o.device == "cuda":
            ids = self.gather({rank: a.gpu_ids.remote() for rank, a in enumerate(self.actors)})
            failed = first_failure(ids)
            if failed:
                return self.fail(failed)
            for node in range(o.nodes):  # local rank i sees its own GPU as device i
                ranks = range(node * o.procs_per_node, (node + 1) * o.procs_per_node)
                devices[node] = ",".join(ids[rank][0] for rank in ranks)
        if port != o.master_port and o.master_port != 0:
            say(f"master port {o.master_port} is taken on {ips[0]}; using {port}")
        say(f"starting {self.world} workers on {len(set(ips.values()))} Ray node(s) "
            f"(master {ips[0]}:{port})")
        starts = {}
        for rank, a in enumerate(self.actors):
            node, local = divmod(rank, o.procs_per_node)
            env = {"RANK": rank, "LOCAL_RANK": local, "WORLD_SIZE": self.world,
                   "LOCAL_WORLD_SIZE": o.procs_per_node, "GROUP_RANK": node, "NODE_RANK": node,
                   "MASTER_ADDR": ips[0], "MASTER_PORT": port, "MESHRUN_LAUNCHER": "ray",
                   "MESHRUN_CONSOLE": "plain", "MESHRUN_RAY_JOB_ID": self.job_id,
                   "PYTHONUNBUFFERED": 1}
            if o.device == "cuda":
                env["CUDA_VISIBLE_DEVICES"] = devices[node]
            starts[rank] = a.start.remote(self.argv, {k: str(v) for k, v in env.items()}, o.cwd)
        failed = first_failure(self.gather(starts))
        return self.fail(failed) if failed else self.supervise()

    def supervise(self):
        tails = {rank: collections.deque(maxlen=KEPT_LINES) for rank in range(self.world)}
        running = set(range(self.world))
        repeating = []
        failed = None
        while running and not failed:
            pause(POLL_INTERVAL)
            answers = self.gather({rank: self.actors[rank].poll.remote() for rank in running})
            for rank, answer in answers.items():  # in rank order
                if isinstance(answer, Failure):
                    running.discard(rank)
                    failed = failed or answer
                    continue
                out, err, info = answer
                self.show(rank, out, err, tails)
                if info is not None:
                    running.discard(rank)
                    repeating += [rank] if info["repeats"] else []
                    if not failed and info.get("status") != 0:
                        failed = exit_failure(rank, info)
        return self.fail(failed, tails, repeating) if failed else None

    def fail(self, failed, tails=None, repeating=()):
        """Reports the attempt's failure, stops every worker (what the failing
        one left behind too, unless its actor is lost), and notes the first
        rank whose failure a restart would repeat."""
        say(f"rank {failed.rank}{failed.text}")
        tails = tails or {}
        repeating = list(repeating)
        grace = self.options.stop_grace
        stops = self.gather({rank: a.stop.remote(grace) for rank, a in enumerate(self.actors)
                             if rank != failed.rank or not failed.lost},
                            timeout=grace + ANSWER_TIMEOUT)
        for rank, answer in stops.items():
            if not isinstance(answer, Failure):
                self.show(rank, answer[0], answer[1], tails)
                repeating += [rank] if answer[2] and answer[2]["repeats"] else []
        failed.repeating = min(repeating, default=None)
        tail = tails.get(failed.rank)
        if tail:
            say(f"the last lines rank {failed.rank} wrote to stdout:")
            for line in tail:
                print(f"[rank {failed.rank}] {line}", file=sys.stderr)
            sys.stderr.flush()
        return failed

    def show(self, rank, out, err, tails):
        if rank == 0 or self.options.show_all_ranks:
            for line in out:
                print(f"[rank {rank}] {line}")
            sys.stdout.flush()
        elif rank in tails:
            tails[rank].extend(out)
        for line in err:
            print(f"[rank {rank}] {line}", file=sys.stderr)
        sys.stderr.flush()

    def interrupt(self):
        """On SIGTERM/SIGINT: SIGTERM to every worker, SIGKILL within 2 s."""
        grace = min(self.options.stop_grace, SIGNAL_STOP_WAIT * 0.75)
        refs = {rank: a.stop.remote(grace) for rank, a in enumerate(self.actors)}
        answers = self.gather(refs, timeout=SIGNAL_STOP_WAIT)
        for rank, answer in answers.items():  # the workers' last words
            if not isinstance(answer, Failure):
                self.show(rank, answer[0], answer[1], {})
        self.kill_workers()

    def kill_workers(self):
        import ray

        for a in self.actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # already gone
                pass
        self.actors = []

    def release(self):
        from ray.util.placement_group import remove_placement_group

        self.kill_workers()
        for group in self.groups:
            try:
                remove_placement_group(group)
            except Exception:  # already gone with the cluster
                pass
        self.groups = []


def wait_for(refs, timeout):
    """The refs of `refs` ready within `timeout` seconds. It waits in short
    slices: a signal's handler (`ray job stop`) runs only between two calls."""
    import ray

    deadline = time.monotonic() + timeout
    pending = list(refs)
    while pending and time.monotonic() < deadline:
        check_stop()
        slice_s = min(0.5, deadline - time.monotonic())
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=max(0.0, slice_s))
    return [ref for ref in refs if ref not in pending]


def first_failure(answers):
    return next((a for _, a in sorted(answers.items()) if isinstance(a, Failure)), None)


def exit_failure(rank, info):
    code = info["status"] if "status" in info else 128 + info["signal"]
    return Failure(rank, " " + info["description"], code)


def free_resources(bundle):
    import ray

    free = {key: value for key, value in ray.available_resources().items()
            if not key.startswith("node:") and "_group_" not in key}  # not placement groups' own
    for key in bundle:
        free.setdefault(key, 0)  # Ray leaves out what is all taken
    shown = []
    for key, value in sorted(free.items()):
        if key.endswith("memory"):
            shown.append(f"{key}: {value / 2**30:.1f} GiB")
        else:
            shown.append(f"{key}: {value:g}")
    return "{" + ", ".join(shown) + "}"


def ray_job_id():
    import ray

    try:
        config = json.loads(os.environ["RAY_JOB_CONFIG_JSON_ENV_VAR"])
        submission_id = config["metadata"]["job_submission_id"]
        if submission_id:
            return str(submission_id)
    except (KeyError, TypeError, ValueError):
        pass
    return ray.get_runtime_context().get_job_id()


def run(options, argv):
    import ray

    ray.init(log_to_driver=False, logging_level=logging.WARNING)
    job = Job(options, argv, ray_job_id())
    signal.signal(signal.SIGTERM, on_signal)  # replaces ray.init's handler
    signal.signal(signal.SIGINT, on_signal)
    _stop["armed"] = True
    try:
        say(f"job {job.job_id}: {options.nodes} node(s) x {options.procs_per_node} worker(s) "
            f"on {options.device}")
        if not job.place():
            return 1
        for attempt in range(options.max_restarts + 1):
            failed = job.run_attempt()
            if failed is None:
                say(f"all {job.world} workers finished")
                return 0
            if attempt == options.max_restarts:
                break
            if failed.repeating is not None:
                say(f"not restarting (max_restarts = {options.max_restarts}): rank "
                    f"{failed.repeating} failed in a way a restart from the checkpoint would "
                    "repeat (the recipe, the data, a hook or the model)")
                break
            say(f"restarting the workers in {options.restart_delay:g} s (restart {attempt + 1} of "
                f"{options.max_restarts}); training resumes from the newest checkpoint")
            job.kill_workers()
            pause(options.restart_delay)
        say(f"job failed: rank {failed.rank}{failed.text}")
        return failed.code
    except Interrupted as stop:
        job.interrupt()
        say(f"stopped by {signal.Signals(stop.signum).name}")
        return 128 + stop.signum
    finally:
        _stop["armed"] = False
        job.release()


SPEC_KEYS = {"nodes": int, "procs_per_node": int, "device": str, "master_port": int,
             "max_restarts": int, "restart_delay": float, "placement_timeout": float}


def parse_args(args):
    parser = argparse.ArgumentParser(
        prog="ray_job.py",
        description="The entrypoint of meshrun's Ray job (meshrun submit --ray).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="run")
    run_parser = commands.add_parser(
        "run", help="place and supervise the workers",
        usage="%(prog)s {--spec SPEC | --nodes N --procs-per-node P --device {cpu,cuda} "
              "--master-port PORT --max-restarts R --restart-delay S --placement-timeout S} "
              "[--stop-grace S] [--show-all-ranks] [-- ARGV...]",
        epilog="ARGV, after --, is the worker's command line. --spec is the base64 of a JSON "
               "object with those options (nodes, procs_per_node, ...) and argv, as `meshrun "
               "submit --ray` passes them: `ray job submit` hands its words to a shell unquoted.")
    run_parser.add_argument("--spec", help="every option and the argv as base64 JSON")
    run_parser.add_argument("--nodes", type=int)
    run_parser.add_argument("--procs-per-node", type=int)
    run_parser.add_argument("--device", choices=("cpu", "cuda"))
    run_parser.add_argument("--master-port", type=int)
    run_parser.add_argument("--max-restarts", type=int)
    run_parser.add_argument("--restart-delay", type=float, metavar="SECONDS")
    run_parser.add_argument("--placement-timeout", type=float, metavar="SECONDS")
    run_parser.add_argument("--stop-grace", type=float, default=5.0, metavar="SECONDS",
                            help="SIGTERM to SIGKILL when the workers are stopped (default 5)")
    run_parser.add_argument("--cwd", metavar="DIR",
                            help="the workers' working directory (default: the actor's, where "
                                 "`ray start` ran); relative paths in --set values resolve there")
    run_parser.add_argument("--show-all-ranks", action="store_true",
                            help="show every rank's stdout, not only rank 0's")
    split = args.index("--") if "--" in args else len(args)
    options = parser.parse_args(args[:split])
    argv = args[split + 1:]
    fields = [key for key in SPEC_KEYS if getattr(options, key) is not None]
    if options.spec is not None:
        if fields or argv or options.cwd:
            run_parser.error("--spec carries the options and the worker's command line; "
                             "pass nothing else")
        try:
            spec = json.loads(base64.b64decode(options.spec, validate=True))
            for key, kind in SPEC_KEYS.items():
                setattr(options, key, kind(spec[key]))
            argv = [str(word) for word in spec["argv"]]
            options.cwd = str(spec["cwd"]) if spec.get("cwd") else None
        except KeyError as error:
            run_parser.error(f"--spec has no {error}")
        except (ValueError, TypeError) as error:
            run_parser.error(f"--spec is not the base64 of a job spec: {one_line(error)}")
    elif len(fields) < len(SPEC_KEYS):
        missing = [key for key in SPEC_KEYS if key not in fields]
        run_parser.error("missing " + ", ".join("--" + key.replace("_", "-") for key in missing))
    problems = [
        (options.nodes < 1, "--nodes must be at least 1"),
        (options.procs_per_node < 1, "--procs-per-node must be at least 1"),
        (options.device not in ("cpu", "cuda"), "--device must be cpu or cuda"),
        (not 0 <= options.master_port <= 65535, "--master-port must be a port (0 to 65535)"),
        (options.max_restarts < 0, "--max-restarts must be 0 or more"),
        (options.restart_delay < 0, "--restart-delay must be 0 or more"),
        (not options.placement_timeout > 0, "--placement-timeout must be more than 0"),
        (not options.stop_grace >= 0, "--stop-grace must be 0 or more"),
        (not argv, "no worker command line after --"),
    ]
    for bad, message in problems:
        if bad:
            run_parser.error(message)
    return options, argv


def main():
    options, argv = parse_args(sys.argv[1:])
    try:
        return run(options, argv)
    except Exception as error:  # reported as one of this script's lines
        say(f"error: {type(error).__name__}: {one_line(error)}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
