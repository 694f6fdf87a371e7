"""Substrates side by side: one trivial task on every provider, one table.

    .venv/bin/python bench/substrates.py [--quick] [--rows warm,sandbox-warm,...] [--json PATH]
        [--peers-python .venv-peers/bin/python]

Every row drives `bench/envs/proctor_env.py` (one template, no hooks) with an agent that
answers and nothing else, so the figures are what the substrate costs. Each row runs in
a fresh interpreter of its own (`bench/substrates.py --row NAME --out FILE`); the Ray
row runs in fresh network and pid namespaces with only `lo` up, where it starts a
two-node cluster of its own (as `tests/ray` does), since Ray outside one binds the
machine's interface. Per row:

- start-to-ready: sequential rollouts, from entering the provider to an answered
  `hello` (connect included), p50 and p90, after two that warm the caches;
- rollouts/s: `run_taskset` of N rows at max_concurrent 8 and at 32, wall clock;
- peak RSS per substrate: the processes one rollout's substrate added (its server, and
  bwrap, podman and conmon around it where there are), their VmHWM summed; PSS beside
  it counts pages shared with a zygote once; `fixed` is what stays up for all rollouts
  (a zygote, the Ray cluster; for the in-process row, the whole process).

Every figure is measured in the run that prints it, peers included. Two baseline rows
come first, measured the same way, and the ratio columns divide by them: `python -c pass`
(a fresh interpreter, spawn to reaped exit; rates with 8 and 32 in flight) and a bare
fork whose child exits at once. The last row is the HUD SDK's `SubprocessRuntime`
(hud==0.6.21, under `--peers-python`, through `bench/_hud_side.py` as `bench/rollouts.py`
runs it: scrubbed environment, loopback only); without a peers python it says so.

A row whose provider module is missing reads `n/a (not built)`; one whose prerequisites
are missing says which. Budgets from the issue are judged where they exist. Progress
goes to stderr, the table to stdout; `--json PATH` keeps every raw figure. The load
average is printed with the table: on a busy machine read the ratio columns.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
SOURCE = BENCH / "envs" / "proctor_env.py"
RAY_TESTS = BENCH.parent / "tests" / "ray"
DISCARD = 2  # sequential rollouts that only warm the page cache and the provider
MEMORY_SAMPLES = 10  # sequential rollouts whose processes are measured


@dataclass(frozen=True)
class Spec:
    """One row: a provider, its module, its budgets and its sizes (full, quick)."""

    label: str
    module: str | None  # None: nothing to import here (a baseline, a peer)
    ready_ms: float | None = None  # start-to-ready p50 budget
    per_s: float | None = None  # rollouts/s budget, at both concurrencies
    seq: tuple[int, int] = (20, 5)  # sequential start-to-ready samples
    n: tuple[int, int] = (64, 16)  # rollouts per throughput run


ROWS = {
    "pass": Spec("baseline: `python -c pass`, spawn to exit", None, seq=(50, 20), n=(200, 64)),
    "fork": Spec("baseline: bare fork, child exits at once", None, seq=(500, 200),
                 n=(2000, 500)),
    "local": Spec("local (in-process, not isolated)", "proctor.runtimes._local",
                  seq=(200, 50), n=(2000, 400)),
    "subprocess": Spec("subprocess, cold", "proctor.runtimes._subprocess"),
    "warm": Spec("warm pool (SubprocessRuntime warm=1; rates exclude zygote start-up)",
                 "proctor.runtimes._subprocess",
                 ready_ms=10, per_s=100, seq=(100, 30), n=(400, 100)),
    "sandbox": Spec("sandbox (bwrap), cold", "proctor.runtimes._sandbox"),
    "sandbox-warm": Spec("sandbox (bwrap), warm", "proctor.runtimes._sandbox",
                         ready_ms=25, per_s=50, seq=(100, 30), n=(300, 100)),
    "container": Spec("container (podman, runc)", "proctor.runtimes._container",
                      ready_ms=600, seq=(10, 4), n=(48, 16)),
    "ray": Spec("Ray actor (2 local nodes)", "proctor.runtimes._ray", seq=(20, 5), n=(48, 16)),
    "hud": Spec("HUD SubprocessRuntime (hud 0.6.21), cold", None, seq=(5, 2), n=(32, 32)),
}  # fmt: skip
BASELINES = ("pass", "fork")


def log(msg: str) -> None:
    print(f"[substrates] {msg}", file=sys.stderr, flush=True)


# -- processes ---------------------------------------------------------------------------


def processes() -> dict[tuple[int, int], str]:
    """Every process this /proc shows: (pid, start time) -> command line."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, UnicodeDecodeError):
            continue
        found[(int(entry.name), int(stat[stat.rindex(")") + 2 :].split()[19]))] = cmd
    return found


def memory_kb(pids: list[int]) -> tuple[int, int]:
    """(sum of VmHWM, sum of Pss) in KiB over `pids`; a process gone counts 0."""
    hwm = pss = 0
    for pid in pids:
        with contextlib.suppress(OSError, StopIteration, ValueError):
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            hwm += int(next(ln for ln in status if ln.startswith("VmHWM:")).split()[1])
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
            pss += int(next(ln for ln in rollup if ln.startswith("Pss:")).split()[1])
    return hwm, pss


@dataclass
class Footprint:
    """Tells a rollout's substrate processes from the provider's standing ones."""

    substrate: Callable[[str], bool]  # a command line that belongs to a substrate
    new_only: bool = True  # substrate processes are those the rollout started
    fixed: Callable[[str], bool] | None = None  # standing processes (default: substrate's)


# -- providers -----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def provider(name: str, source: Path) -> AsyncIterator[tuple[Any, Footprint]]:
    """The row's provider, entered, and how to find its processes.

    `source` is this row's own copy of the environment, so that its path in a command
    line tells this row's processes from any other's.
    """
    mine = Footprint(lambda cmd: str(source) in cmd)
    if name == "local":
        from proctor.runtimes import LocalRuntime

        yield LocalRuntime(source), Footprint(lambda cmd: False)
    elif name in ("subprocess", "warm"):
        from proctor.runtimes import SubprocessRuntime

        async with SubprocessRuntime(source, warm=name == "warm") as runtime:
            yield runtime, mine
    elif name in ("sandbox", "sandbox-warm"):
        from proctor.runtimes._sandbox import SandboxRuntime

        async with SandboxRuntime(source, warm=name == "sandbox-warm") as runtime:
            yield runtime, mine
    elif name == "container":
        async with container(source) as pair:
            yield pair
    elif name == "ray":
        async with ray_cluster(source) as pair:
            yield pair
    else:
        raise ValueError(f"no row {name!r}")


@contextlib.asynccontextmanager
async def container(source: Path) -> AsyncIterator[tuple[Any, Footprint]]:
    from proctor.runtimes._container import ContainerRuntime
    from proctor.runtimes._image import python_image

    t0 = time.perf_counter()
    image = await asyncio.to_thread(python_image)
    log(f"image {image} ready in {time.perf_counter() - t0:.1f} s")
    runtime = ContainerRuntime(
        image,
        str(source),
        mounts=[f"{source.parent}:{source.parent}:ro"],
        oci_runtime=shutil.which("runc"),  # crun fails on this host's cgroups
    )
    batch = runtime.batch

    def part(cmd: str) -> bool:  # podman run, conmon and the server, by source or batch
        return str(source) in cmd or ("conmon" in cmd and batch in cmd)

    async with runtime:
        yield runtime, Footprint(part, fixed=lambda cmd: False)  # no daemon with podman


@contextlib.asynccontextmanager
async def ray_cluster(source: Path) -> AsyncIterator[tuple[Any, Footprint]]:
    sys.path.insert(0, str(RAY_TESTS))
    from ray_cluster import LocalCluster, loopback_up

    from proctor.runtimes._ray import RayRuntime

    loopback_up()
    t0 = time.perf_counter()
    cluster = LocalCluster(root=Path(tempfile.gettempdir()))
    try:
        await asyncio.to_thread(cluster.wait_nodes)
        log(f"Ray cluster up in {time.perf_counter() - t0:.1f} s")
        ray = Footprint(
            lambda cmd: "_EnvActor" in cmd,
            new_only=False,  # Ray may place an actor in a worker it started earlier
            # the namespace holds this row, its shell, and the cluster
            fixed=lambda cmd: "_EnvActor" not in cmd and "substrates.py" not in cmd,
        )
        yield RayRuntime(str(source)), ray
    finally:
        cluster.close()


def missing(name: str) -> str | None:
    """Why row `name` cannot run here, or None."""
    module = ROWS[name].module
    if module is not None and importlib.util.find_spec(module) is None:
        return "n/a (not built)"
    if name.startswith("sandbox") and shutil.which("bwrap") is None:
        return "needs bubblewrap: apt-get install -y bubblewrap"
    if name == "container":
        if shutil.which("podman") is None:
            return "needs podman (and runc): apt-get install -y podman runc"
        if shutil.which("runc") is None:
            return "needs runc (crun fails on this host's cgroups): apt-get install -y runc"
    if name == "ray":
        if importlib.util.find_spec("ray") is None:
            return "needs Ray: pip install 'proctor[ray]'"
        if shutil.which("unshare") is None:
            return "needs unshare (util-linux) for a private network namespace"
    return None


# -- one row, in its own process ---------------------------------------------------------------


def rows(n: int) -> list[Any]:
    from proctor import Task

    return [Task(env="bench", id="answer42", args={"i": i}) for i in range(n)]


async def answer(run: Any) -> None:
    run.trace.content = "42"


async def start_to_ready(runtime: Any, marks: Footprint, n: int) -> dict[str, Any]:
    from proctor.channel import connect

    ready: list[float] = []
    seen: list[tuple[int, int, int]] = []
    for k, task in enumerate(rows(DISCARD + n)):
        sample = DISCARD <= k < DISCARD + MEMORY_SAMPLES
        before = processes() if sample else {}
        t0 = time.perf_counter()
        async with runtime(task) as endpoint:
            async with connect(endpoint.target, token=endpoint.token) as client:
                took = time.perf_counter() - t0
                assert client.manifest is not None
            if sample:
                seen.append(footprint(marks, before))
        if k >= DISCARD:
            ready.append(took)
    return {
        "n": n,
        "ready_p50_ms": statistics.median(ready) * 1e3,
        "ready_p90_ms": statistics.quantiles(ready, n=10)[-1] * 1e3,
        # the median substrate: a sample may catch a neighbour's teardown
        "substrate_hwm_kb": statistics.median_low(f[0] for f in seen),
        "substrate_pss_kb": statistics.median_low(f[1] for f in seen),
        "fixed_hwm_kb": max(f[2] for f in seen),
    }


def footprint(marks: Footprint, before: dict[tuple[int, int], str]) -> tuple[int, int, int]:
    """(VmHWM, Pss) of a rollout's substrate processes, and VmHWM of the standing ones."""
    me = os.getpid()
    now = processes()
    ours = [k for k, cmd in now.items() if marks.substrate(cmd) and k[0] != me]
    substrate = [pid for pid, st in ours if not marks.new_only or (pid, st) not in before]
    standing = marks.fixed or marks.substrate
    fixed = [pid for (pid, st), cmd in now.items() if pid not in substrate and pid != me
             and (pid, st) in before and standing(cmd)]  # fmt: skip
    return (*memory_kb(substrate), memory_kb(fixed)[0])


async def throughput(runtime: Any, n: int, concurrency: int) -> dict[str, Any]:
    from proctor.engine import run_taskset

    t0 = time.perf_counter()
    job = await run_taskset(rows(n), answer, runtime=runtime, max_concurrent=concurrency)
    wall = time.perf_counter() - t0
    errors = [f"{r.error.phase}: {r.error.type}: {r.error.message}" for r in job.runs if r.error]
    return {"n": n, "seconds": wall, "per_s": n / wall, "errors": len(errors),
            "first_error": errors[0] if errors else None}  # fmt: skip


async def measure(name: str, quick: bool, source: Path) -> dict[str, Any]:
    spec = ROWS[name]
    seq, n = (spec.seq[1], spec.n[1]) if quick else (spec.seq[0], spec.n[0])
    t0 = time.perf_counter()
    async with provider(name, source) as (runtime, marks):
        out: dict[str, Any] = {"setup_s": time.perf_counter() - t0}
        log(f"{name}: {seq} sequential rollouts")
        out["seq"] = await start_to_ready(runtime, marks, seq)
        for limit in (8, 32):
            log(f"{name}: {n} rollouts at max_concurrent {limit}")
            out[f"at{limit}"] = await throughput(runtime, n, limit)
    if name == "local":
        out["seq"]["fixed_hwm_kb"] = memory_kb([os.getpid()])[0]
    return out


def measure_baseline(name: str, quick: bool) -> dict[str, Any]:
    """A baseline row, measured as the substrates are: sequential, then 8 and 32 in flight."""
    from _common import fork_exit, python_pass, reap

    spec = ROWS[name]
    seq, n = (spec.seq[1], spec.n[1]) if quick else (spec.seq[0], spec.n[0])
    start = fork_exit if name == "fork" else python_pass(sys.executable)
    reap(start, DISCARD, 1)
    walls = [reap(start, 1, 1) for _ in range(seq)]
    # a child's peak RSS; a forked child's is this process's, so none is given for it
    hwm = 0 if name == "fork" else resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    ready = {"ready_p50_ms": statistics.median(walls) * 1e3,
             "ready_p90_ms": statistics.quantiles(walls, n=10)[-1] * 1e3}  # fmt: skip
    out: dict[str, Any] = {
        "seq": {
            "n": seq,
            **ready,
            "substrate_hwm_kb": hwm,
            "substrate_pss_kb": 0,
            "fixed_hwm_kb": 0,
        }
    }
    for limit in (8, 32):
        wall = reap(start, n, limit)
        out[f"at{limit}"] = {"n": n, "seconds": wall, "per_s": n / wall, "errors": 0}
    return out


def hud_row(peers: str | None, quick: bool, tmp: Path, timeout: float) -> dict[str, Any]:
    """The HUD SDK's SubprocessRuntime, as `bench/rollouts.py` drives it (`_hud_side.py`)."""
    from rollouts import hud_environ, peers_usable, run_side

    usable, why = peers_usable(peers)
    if not usable or peers is None:
        return {"skipped": f"needs the HUD SDK: {why}"}
    spec, k = ROWS["hud"], int(quick)
    env, t0 = hud_environ(environ(), tmp), time.perf_counter()
    out: dict[str, Any] = {}
    for limit in (8, 32):
        params = {"n": spec.n[k], "concurrency": limit, "discard": 1 if limit == 8 else 0,
                  "cold": spec.seq[k] if limit == 8 else 0}  # fmt: skip
        side = run_side(os.path.abspath(peers), "_hud_side.py", {"subproc": params}, tmp,
                        env, timeout, ("subproc",))  # fmt: skip
        got = side.get("sections", {}).get("subproc") or {"error": side.get("error")}
        if "error" in got or got.get("complete") is False:
            return {"error": f"@{limit}: {got.get('error') or got.get('first_error')}"}
        out["version"] = (side.get("framework") or {}).get("version")
        out[f"at{limit}"] = {"n": got["n"], "seconds": got["n"] / got["rollouts_per_s"],
                             "per_s": got["rollouts_per_s"], "errors": got["errors"]}  # fmt: skip
        if limit == 8:
            out["seq"] = {"n": got["cold_n"], "ready_p50_ms": got["cold_hello_p50_ms"],
                          "ready_p90_ms": got["cold_hello_p90_ms"], "substrate_hwm_kb": 0,
                          "substrate_pss_kb": 0, "fixed_hwm_kb": 0}  # fmt: skip
    log(f"hud: {time.perf_counter() - t0:.1f} s")
    return out


def run_row(name: str, quick: bool, out: Path) -> int:
    """`--row NAME`: measure one row in this process and write its figures as JSON."""
    import logging

    # Python 3.11 logs "Exception in callback" when a server is torn down under a live
    # handler (fixed in 3.12); interpreter noise, not substrate work.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    if name in BASELINES:
        out.write_text(json.dumps(measure_baseline(name, quick)))
        return 0
    why = missing(name)
    with tempfile.TemporaryDirectory(prefix=f"proctor-substrates-{name}-") as tmp:
        source = Path(tmp, SOURCE.name)
        shutil.copyfile(SOURCE, source)
        for path in (Path(tmp), source):  # a sandbox runs it as nobody
            path.chmod(0o755)
        try:
            result = {"skipped": why} if why else asyncio.run(measure(name, quick, source))
        except Exception as exc:
            import traceback

            traceback.print_exc()
            result = {"error": f"{type(exc).__name__}: {exc}"}
    out.write_text(json.dumps(result))
    return 0


# -- the table -------------------------------------------------------------------------------


def environ() -> dict[str, str]:
    """This environment, with bytecode cached under a private prefix if writing is off.

    With PYTHONDONTWRITEBYTECODE set, proctor's editable `src/` is never cached, so every
    fresh interpreter would recompile it and the cold rows would measure the compiler.
    """
    env = dict(os.environ)
    if env.pop("PYTHONDONTWRITEBYTECODE", None) and "PYTHONPYCACHEPREFIX" not in env:
        env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "proctor-bench-pycache")
    return env


def spawn_row(name: str, quick: bool, tmp: Path, timeout: float) -> dict[str, Any]:
    out, err = tmp / f"{name}.json", tmp / f"{name}.log"
    argv = [sys.executable, str(Path(__file__).resolve()), "--row", name, "--out", str(out)]
    argv += ["--quick"] * quick
    if name == "ray" and missing(name) is None:
        sys.path.insert(0, str(RAY_TESTS))
        from ray_cluster import in_namespace

        argv = in_namespace(argv)
    t0 = time.perf_counter()
    try:
        with open(err, "wb") as stderr:
            rc = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
                env=environ(), timeout=timeout,
            ).returncode  # fmt: skip
    except subprocess.TimeoutExpired:
        rc = -1
    result: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    if not result:
        result = {"error": f"exited {rc} without figures" if rc != -1 else f"over {timeout:g} s"}
    log(f"{name}: {time.perf_counter() - t0:.1f} s")
    if "error" in result or rc != 0:
        for line in err.read_text(errors="replace").splitlines()[-12:]:
            print(f"    {line}", file=sys.stderr)
    return result


def verdict(spec: Spec, r: dict[str, Any]) -> str:
    misses = []
    ready = r["seq"]["ready_p50_ms"]
    if spec.ready_ms is not None and ready > spec.ready_ms:
        misses.append(f"ready {ready:.1f} > {spec.ready_ms:g} ms")
    for key in ("at8", "at32"):
        rate = r[key]["per_s"]
        if r[key]["errors"]:
            misses.append(f"{r[key]['errors']} failed @{key[2:]}")
        if spec.per_s is not None and rate < spec.per_s:
            misses.append(f"{rate:.0f}/s < {spec.per_s:g} @{key[2:]}")
    if misses:
        return "MISSED: " + "; ".join(misses)
    return "ok" if spec.ready_ms is not None or spec.per_s is not None else "-"


def budget(spec: Spec) -> str:
    parts = []
    if spec.ready_ms is not None:
        parts.append(f"<= {spec.ready_ms:g} ms")
    if spec.per_s is not None:
        parts.append(f">= {spec.per_s:g}/s")
    return ", ".join(parts) or "-"


def ms(value: float) -> str:
    return f"{value:.2f}" if value < 1 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def mib(kb: int) -> str:
    return f"{kb / 1024:.1f}" if kb else "-"


def times(value: float, base: dict[str, Any] | None, path: tuple[str, str]) -> str:
    """`value` as a multiple of the `python -c pass` baseline's figure at `path`."""
    if not base or "seq" not in base:
        return "-"
    r = value / base[path[0]][path[1]]
    return f"{r:.3f}x" if r < 0.1 else f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def rate(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.0f}"


def render(results: dict[str, dict[str, Any]]) -> str:
    head = (
        "| substrate | load | start-to-ready p50 / p90 ms | x pass | rollouts/s @8 | @32 "
        "| @8 x pass | peak RSS / substrate MiB | PSS MiB | fixed RSS MiB | budget | verdict |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    base = results.get("pass")
    for name, r in results.items():
        spec, load = ROWS[name], f"{r['load']:.1f}" if "load" in r else "-"
        if "skipped" in r or "error" in r:
            why = r.get("skipped") or f"failed: {r['error']}"
            lines.append(f"| {spec.label} | {load} | {why} | | | | | | | | {budget(spec)} | |")
            continue
        s = r["seq"]
        lines.append(
            f"| {spec.label} | {load} | {ms(s['ready_p50_ms'])} / {ms(s['ready_p90_ms'])} "
            f"| {times(s['ready_p50_ms'], base, ('seq', 'ready_p50_ms'))} "
            f"| {rate(r['at8']['per_s'])} | {rate(r['at32']['per_s'])} "
            f"| {times(r['at8']['per_s'], base, ('at8', 'per_s'))} "
            f"| {mib(s['substrate_hwm_kb'])} | {mib(s['substrate_pss_kb'])} "
            f"| {mib(s['fixed_hwm_kb'])} | {budget(spec)} | {verdict(spec, r)} |"
        )
    return "\n".join(lines)


def one_row(name: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Row `name`'s figures, with the load average when it started."""
    load = os.getloadavg()[0]
    if name == "hud":
        result = hud_row(args.peers_python, args.quick, tmp, args.timeout)
    else:
        result = spawn_row(name, args.quick, tmp, args.timeout)
    return {"load": load, **result}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rollouts per row")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows to run")
    parser.add_argument("--json", type=Path, help="also write every raw figure here")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per row")
    parser.add_argument(
        "--peers-python",
        default=os.environ.get("PROCTOR_PEERS_PYTHON"),
        help="python of the venv with hud==0.6.21, for the HUD row (default: "
        "$PROCTOR_PEERS_PYTHON)",
    )
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.row:
        return run_row(args.row, args.quick, args.out)
    names = [n for n in args.rows.split(",") if n]
    unknown = set(names) - set(ROWS)
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}; rows are {', '.join(ROWS)}")
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="proctor-substrates-") as tmp:
        results = {name: one_row(name, args, Path(tmp)) for name in names}
    load1 = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    cmd = shlex.join(getattr(sys, "orig_argv", sys.argv))
    print(f"Substrates: {cmd} on {os.cpu_count()} cores, {platform.python_version()}, "
          f"load average {load0[0]:.2f} before, {load1[0]:.2f} after")  # fmt: skip
    print()
    print(render(results))
    print()
    print("Start-to-ready: entering the provider to an answered hello (HUD: entering its "
          "runtime(task) to `hud.connect` answered). Rates: run_taskset (HUD: Taskset.run) "
          "wall clock, one substrate per rollout. load: the 1-minute load average as the row "
          "started. x pass: the figure over the `python -c "
          "pass` row's, measured in this run (below 1x is faster to ready, above 1x more "
          "rollouts/s).")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
