"""Rollout benchmarks: proctor and the HUD SDK side by side, in one run, one table.

    .venv/bin/python bench/rollouts.py --peers-python .venv-peers/bin/python [--quick]
        [--sizes 1k,10k,100k] [--batch-sizes 1k,10k,100k] [--scale-only]

Every section of each side runs in a fresh interpreter: `bench/_proctor_side.py` under
this python, `bench/_hud_side.py` under `--peers-python` (hud==0.6.21) with a scrubbed
environment (private HOME, no HUD_API_KEY, telemetry and CLI analytics off, every
HUD_*_URL pointed at 127.0.0.1:9; all traffic stays on 127.0.0.1). Both drive twin
trivial environments (`bench/envs/`) with a trivial agent, so the numbers are framework
overhead. Import time is measured here, in fresh interpreters too. The header gives the
load average and a bare-process baseline of the same run (`_common.baseline`: `python -c
pass` and a bare fork), the yardstick for the absolute figures on a busy machine. The
rows and budgets follow DESIGN.md section 8; without a peers python the HUD column reads
n/a, as it does on the rows of proctor's warm pool (`SubprocessRuntime(warm=True)`), which
HUD lacks. Progress goes to stderr, the report to stdout; `--json PATH` keeps every raw
number.

Then the scale table (`bench/_scale.py`): CPU and cyclic objects per rollout and peak
RSS at each of `--sizes` for `Taskset.run` keeping runs, summaries or nothing and for
`proctor run`, and at `--batch-sizes` for the batch runner, each in a fresh interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _scale
from _common import baseline, baseline_line, machine_cpu
from _sides import (
    PROCTOR_SECTIONS,
    child_environ,
    hud_environ,
    log,
    measure_imports,
    peers_usable,
    run_side,
)

BENCH = Path(__file__).resolve().parent

FULL = {
    "inproc": {"n": 1000, "concurrency": 50, "reps": 3, "warmup": 50},
    "subproc": {"n": 100, "concurrency": 4, "cold": 20, "discard": 1},
    "warmpool": {"n": 100, "concurrency": 4, "seq": 50, "discard": 1},
    "warm": {"iters": 2000, "warmup": 200},
    "newconn": {"iters": 1000, "warmup": 100},
    "hud_subproc": {"n": 10, "concurrency": 4, "cold": 5, "discard": 1},
    "import_runs": 7,
    "import_warmup": 1,
}
QUICK = {
    "inproc": {"n": 200, "concurrency": 50, "reps": 1, "warmup": 20},
    "subproc": {"n": 12, "concurrency": 4, "cold": 3, "discard": 1},
    "warmpool": {"n": 20, "concurrency": 4, "seq": 10, "discard": 1},
    "warm": {"iters": 300, "warmup": 50},
    "newconn": {"iters": 100, "warmup": 20},
    "hud_subproc": {"n": 1, "concurrency": 4, "cold": 1, "discard": 0},
    "import_runs": 1,
    "import_warmup": 0,
}

IMPORTS: dict[str, tuple[str, str | None]] = {
    # key: (proctor statement, HUD statement or None for proctor's python only)
    "import": ("import proctor", "import hud"),
    "api": (
        "from proctor import Environment, LocalRuntime, Taskset, connect, rollout",
        "from hud import Environment, LocalRuntime, Taskset, connect\nfrom hud.eval import rollout",
    ),
    "bare": ("pass", "pass"),  # the probe itself: `python -c pass` plus json, time and /proc
    # what any fresh python child pays before proctor loads (the notes on row 2c)
    "asyncio": ("import asyncio", None),
}

# -- the table -------------------------------------------------------------------------


@dataclass
class Row:
    key: str
    label: str
    budget: tuple[str, float] | str | None  # ("<=" | ">=", value), or a remark (no verdict)
    proctor: Any  # a number, or a string such as "n/a" / "error"
    hud: Any
    mark: str = ""  # footnote marker on the proctor value


def fmt(v: Any) -> str:
    if not isinstance(v, int | float):
        return str(v)
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def ratio(p: Any, h: Any) -> str:
    if not isinstance(p, int | float) or not isinstance(h, int | float) or not h:
        return "-"
    r = p / h
    return f"{r:.3f}x" if r < 0.1 else f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def verdict(row: Row) -> str:
    if not isinstance(row.budget, tuple) or not isinstance(row.proctor, int | float):
        return ""
    op, limit = row.budget
    ok = row.proctor <= limit if op == "<=" else row.proctor >= limit
    return "ok" if ok else "MISS"


def render(rows: list[Row]) -> str:
    head = ["#", "metric", "budget", "proctor", "HUD", "proctor/HUD", "budget?"]
    cells = [head]
    for r in rows:
        if isinstance(r.budget, tuple):
            budget = f"{r.budget[0]} {fmt(r.budget[1])}"
        else:
            budget = r.budget or "-"
        cells.append(
            [
                r.key,
                r.label,
                budget,
                fmt(r.proctor) + r.mark,
                fmt(r.hud),
                ratio(r.proctor, r.hud),
                verdict(r),
            ]
        )
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    right = {2, 3, 4, 5}
    lines = []
    for n, row in enumerate(cells):
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def pick(side: dict[str, Any], path: str) -> Any:
    """`section.field[.field]` from a side's results, or why there is no number."""
    if "sections" not in side:
        return "n/a" if side.get("absent") else "error"
    section, *fields = path.split(".")
    value: Any = side["sections"].get(section)
    if value is None or "skipped" in value:
        return "n/a"
    if "error" in value or value.get("complete") is False:
        return "error"
    for name in fields:
        value = value.get(name) if isinstance(value, dict) else None
    return "n/a" if value is None else value


def pick_import(side: dict[str, Any], key: str, field: str) -> Any:
    got = side.get("imports", {}).get(key)
    if got is None:
        return "n/a"
    return "error" if "error" in got else got[field]


def build_rows(cfg: dict[str, Any], p: dict[str, Any], h: dict[str, Any]) -> list[Row]:
    ip, sp, hs, wp = cfg["inproc"], cfg["subproc"], cfg["hud_subproc"], cfg["warmpool"]
    w, nc = cfg["warm"], cfg["newconn"]

    def row(key: str, label: str, budget: Any, path: str) -> Row:
        sec = p.get("sections", {}).get(path.split(".")[0]) or {}
        mark = "*" if sec.get("patched") else ""
        return Row(key, label, budget, pick(p, path), pick(h, path), mark)

    def subproc_cpu(side: dict[str, Any]) -> Any:
        a, b = pick(side, "subproc.parent_cpu_ms"), pick(side, "subproc.child_cpu_ms")
        return a + b if isinstance(a, float) and isinstance(b, float) else a

    reps = f", median of {ip['reps']}" if ip["reps"] > 1 else ""
    rows = [
        row(
            "1",
            f"in-process rollout CPU, ms ({ip['n']} x Taskset.run, LocalRuntime, "
            f"max_concurrent={ip['concurrency']}{reps})",
            ("<=", 0.25),
            "inproc.cpu_ms",
        ),
        row("1b", "in-process rollouts/s (wall, same runs)", None, "inproc.rollouts_per_s"),
        row(
            "2",
            f"cold subprocess rollouts/s (SubprocessRuntime, max_concurrent={sp['concurrency']}; "
            f"proctor n={sp['n']}, HUD n={hs['n']})",
            "ref; 2w: >= 100",
            "subproc.rollouts_per_s",
        ),
        Row(
            "2b",
            "subprocess CPU per rollout, ms (parent + env children)",
            None,
            subproc_cpu(p),
            subproc_cpu(h),
        ),
        row(
            "2c",
            f"cold substrate p50, spawn -> port announced, ms (sequential; "
            f"proctor n={sp['cold']}, HUD n={hs['cold']})",
            ("<=", 50),
            "subproc.cold_port_p50_ms",
        ),
        row(
            "2d",
            "cold substrate p50, spawn -> hello answered, ms",
            None,
            "subproc.cold_hello_p50_ms",
        ),
        Row(
            "2w",
            f"warm-pool rollouts/s (SubprocessRuntime(warm=True), "
            f"max_concurrent={wp['concurrency']}, n={wp['n']}; HUD: row 2)",
            (">=", 100),
            pick(p, "warmpool.rollouts_per_s"),
            pick(h, "subproc.rollouts_per_s"),
        ),
        row(
            "2wb",
            "warm-pool CPU per rollout, ms (whole machine over the batch, /proc/stat)",
            None,
            "warmpool.machine_cpu_ms",
        ),
        row(
            "2wc",
            f"warm substrate p50, runtime(task) -> Endpoint (fork, port announced), ms "
            f"(seq., n={wp['seq']})",
            ("<=", 10),
            "warmpool.port_p50_ms",
        ),
        row("", "warm substrate p99 (-> Endpoint), ms", None, "warmpool.port_p99_ms"),
        row(
            "2wd",
            "warm substrate p50, runtime(task) -> hello answered, ms (same runs)",
            None,
            "warmpool.hello_p50_ms",
        ),
        row("", "warm substrate p99 (-> hello answered), ms", None, "warmpool.hello_p99_ms"),
        row(
            "2wz",
            "zygote start, ms (first `async with runtime:`; spawn, import, load source; n=1)",
            None,
            "warmpool.zygote_start_ms",
        ),
    ]
    for loop, key in (("asyncio", "3"), ("uvloop", "3u")):
        rows += [
            row(
                key,
                f"warm start+grade p50, ms (1 TCP connection, {w['iters']} iters, {loop})",
                ("<=", 0.15),
                f"warm:{loop}.p50_ms",
            ),
            row("", f"warm start+grade p99, ms ({loop})", None, f"warm:{loop}.p99_ms"),
            row(
                "",
                f"warm start+grade p50 on the process's 2nd connection, ms ({loop})",
                ("<=", 0.15),
                f"warm:{loop}.second.p50_ms",
            ),
        ]
    for loop, key in (("asyncio", "4"), ("uvloop", "4u")):
        rows += [
            row(
                key,
                f"connect+hello+start+grade+close p50, ms (TCP, {nc['iters']} iters, {loop})",
                None,
                f"newconn:{loop}.p50_ms",
            ),
            row(
                "",
                f"connect+hello+start+grade+close p99, ms ({loop})",
                None,
                f"newconn:{loop}.p99_ms",
            ),
        ]

    def imp(key: str, label: str, budget: Any, name: str, field: str) -> Row:
        return Row(key, label, budget, pick_import(p, name, field), pick_import(h, name, field))

    runs = cfg["import_runs"]
    rows += [
        imp(
            "5",
            f"`import proctor` vs `import hud`, ms (in-process, median of {runs})",
            ("<=", 150),
            "import",
            "import_ms",
        ),
        imp("5b", "same, whole process wall, ms", None, "import", "wall_ms"),
        imp("5c", "same, RSS after import, MiB", None, "import", "rss_mib"),
        imp(
            "5d",
            "import of the rollout API (Environment, LocalRuntime, Taskset, connect, rollout), ms",
            None,
            "api",
            "import_ms",
        ),
    ]
    return rows


# -- main --------------------------------------------------------------------------------


def machine(load: tuple[float, float, float]) -> list[str]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    busy = ", ".join(f"{x:.2f}" for x in load)
    impl = f"{platform.python_implementation()} {platform.python_version()}"
    return [
        f"machine: nproc={nproc} ({model}); {platform.platform()}; load avg at start {busy}",
        f"python:  {impl} ({sys.executable})",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (< 30 s smoke run)")
    parser.add_argument(
        "--peers-python",
        default=os.environ.get("PROCTOR_PEERS_PYTHON"),
        help="python of the venv with hud==0.6.21 (default: $PROCTOR_PEERS_PYTHON)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write every raw result here")
    parser.add_argument("--sizes", type=_sizes, help="scale table sizes (default 1k,10k,100k)")
    parser.add_argument("--batch-sizes", type=_sizes, help="the batch's (default 1k,10k,100k)")
    parser.add_argument("--scale-only", action="store_true", help="only the scale table")
    args = parser.parse_args(argv)
    if args.scale_only:
        return scale(args)
    cfg = QUICK if args.quick else FULL
    timeout = 120.0 if args.quick else 1200.0
    started, load, busy0 = time.perf_counter(), os.getloadavg(), machine_cpu()
    base = baseline()
    has_peers, why = peers_usable(args.peers_python)
    # abspath, not resolve(): a venv's python is a symlink that must stay in its venv.
    peers = os.path.abspath(args.peers_python) if has_peers else None
    params = {k: cfg[k] for k in ("inproc", "subproc", "warmpool", "warm", "newconn")}
    runs, warmup = cfg["import_runs"], cfg["import_warmup"]
    base_env, pyc_note = child_environ()

    with tempfile.TemporaryDirectory(prefix="proctor-bench-") as name:
        tmp = Path(name)
        log("proctor side ...")
        p = run_side(
            sys.executable, "_proctor_side.py", params, tmp, base_env, timeout, PROCTOR_SECTIONS
        )
        hud_env = hud_environ(base_env, tmp)
        if peers is not None:
            log(f"HUD side ({peers}) ...")
            hud_params = {**params, "subproc": cfg["hud_subproc"]}
            h = run_side(peers, "_hud_side.py", hud_params, tmp, hud_env, timeout)
        else:
            log(f"HUD side skipped: {why}")
            h = {"error": why, "absent": True}
        log("import times ...")
        p["imports"], h["imports"] = {}, {}
        for key, (p_stmt, h_stmt) in IMPORTS.items():
            p["imports"][key] = measure_imports(sys.executable, p_stmt, runs, warmup, base_env, tmp)
            if peers is not None and h_stmt is not None:
                h["imports"][key] = measure_imports(peers, h_stmt, runs, warmup, hud_env, tmp)
        spans = sum(1 for _ in (tmp / "spans").iterdir())
        home_left = sorted(x.name for x in (tmp / "home").iterdir())

    rows = build_rows(cfg, p, h)
    lines = [
        "proctor vs HUD rollout benchmark" + (" (--quick: small counts)" if args.quick else ""),
        "command: " + shlex.join(getattr(sys, "orig_argv", sys.argv)),
        *machine(load),
        baseline_line(base),
        _versions(p, h, why),
        "",
        render(rows),
        "",
        *_notes(cfg, p, h, rows, spans, home_left, pyc_note),
        f"total bench time {time.perf_counter() - started:.0f} s; load avg at the end "
        + ", ".join(f"{x:.2f}" for x in os.getloadavg()),
        *_others(machine_cpu() - busy0, cfg["warmpool"]),
    ]
    print("\n".join(lines), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"config": cfg, "proctor": p, "hud": h}, indent=1))
    return scale(args)


def _sizes(text: str) -> list[int]:
    """`1000,10000` or `1k,10k,100k`."""
    return [int(x[:-1]) * 1000 if x.lower().endswith("k") else int(x) for x in text.split(",")]


def scale(args: argparse.Namespace) -> int:
    """The scale table, with the load before and after."""
    sizes = args.sizes or ([1000, 10_000] if args.quick else [1000, 10_000, 100_000])
    batch = args.batch_sizes or ([1000] if args.quick else [1000, 10_000, 100_000])
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="proctor-scale-") as name:
        lines, raw = _scale.section(sizes, batch, Path(name), 3600.0, log)
    print(
        "\n".join(
            [
                "",
                "scale: the same 1,000 rows, each run N/1,000 times; each line its own interpreter",
                "(RSS before: rows built, before the job; run and batch import the runner in it)",
                f"load avg before {load}, after " + ", ".join(f"{x:.2f}" for x in os.getloadavg()),
                *lines,
            ]
        )
    )
    if args.json:
        path = Path(args.json).with_suffix(".scale.json")
        path.write_text(json.dumps(raw, indent=1))
    return 0


def _others(busy: float, wp: dict[str, int]) -> list[str]:
    """How much CPU the machine spent on anything but this bench while it ran."""
    own = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        ru = resource.getrusage(who)
        own += ru.ru_utime + ru.ru_stime
    forks = wp["discard"] + wp["seq"] + wp["n"]
    text = (
        f"CPU while the bench ran: {busy:.1f} s busy machine-wide (/proc/stat), {own:.1f} s of "
        f"it in this bench's processes (rusage); the other {busy - own:.1f} s went to the warm "
        f"pool's {forks} forked children (a few ms each, invisible to rusage) and to other "
        "processes. A few seconds is background; tens of seconds mean something else competed "
        "for the CPUs and the numbers above are suspect."
    )
    return textwrap.wrap(text, 98)


def _versions(p: dict[str, Any], h: dict[str, Any], why: str) -> str:
    def one(side: dict[str, Any], name: str) -> str:
        info = side.get("framework")
        if not info:
            return f"{name} n/a ({why})" if side.get("absent") else f"{name} ?"
        return f"{name} {info['version']} (uvloop {info.get('uvloop') or 'not installed'})"

    return f"versions: {one(p, 'proctor')}; {one(h, 'hud')}"


def _notes(
    cfg: dict[str, Any],
    p: dict[str, Any],
    h: dict[str, Any],
    rows: list[Row],
    spans: int,
    home_left: list[str],
    pyc_note: str | None,
) -> list[str]:
    discard, wp = cfg["subproc"]["discard"], cfg["warmpool"]
    warmed = f" The first {discard} spawn(s) per side only warm the page cache." if discard else ""
    imports = p.get("imports", {})
    bare, aio = imports.get("bare") or {}, imports.get("asyncio") or {}
    why_cold = ""
    if "wall_ms" in bare and "wall_ms" in aio:
        missed = any(r.key == "2c" and verdict(r) == "MISS" for r in rows)
        why_cold = (
            (" 2c misses its <= 50 ms because" if missed else " For scale on 2c's <= 50 ms:")
            + f" a fresh python that only imports asyncio and exits takes {aio['wall_ms']:.0f}"
            f" ms wall here (the same probe importing nothing: {bare['wall_ms']:.0f} ms), "
            "before proctor or the environment loads. The warm pool forks a loaded zygote "
            "instead: row 2wc, budget <= 10 ms."
        )
    pool = p.get("sections", {}).get("warmpool") or {}
    pool_extra = ""
    if "first_fork_ms" in pool:
        firsts = ", ".join(f"{x:.1f}" for x in pool["first_fork_ms"]) or "none"
        pool_extra = (
            f" This run: discarded first fork(s) -> Endpoint {firsts} ms; the exit (zygote "
            f"stop) {pool['zygote_stop_ms']:.0f} ms; the parent process's own CPU "
            f"{pool['parent_cpu_ms']:.2f} ms per rollout."
        )
    paragraphs = [
        "ratio is proctor/HUD: below 1x is better for times, above 1x for rollouts/s.",
        "Every section runs in a fresh interpreter. CPU is time.process_time() of that process "
        "(client, server and engine share it); 2b adds RUSAGE_CHILDREN of the reaped env "
        "children.",
        "2-2d: both frameworks spawn a fresh interpreter per rollout; row 2 is the cold "
        "reference, and DESIGN's >= 100 isolated rollouts/s on 2 cores is the warm pool's "
        "budget (row 2w). 2c/2d: spawns run one at a time with nothing else in flight."
        + warmed
        + why_cold,
        f"2w-2wz: one SubprocessRuntime(warm=True), entered once for the whole section "
        "(`async with runtime:`); 2wz times that enter (spawn "
        f"the zygote, import proctor, load the source, READY). Then {wp['discard']} + "
        f"{wp['seq']} rollout substrates one at a time (the first {wp['discard']} discarded), "
        "each timed from entering runtime(task) to the Endpoint (2wc) and to the answered "
        "hello (2wd), and stopped before the next; then the 2w batch. Each rollout still gets "
        "its own forked process and port."
        + (f" p99 of {wp['seq']} samples is the slowest one." if wp["seq"] <= 100 else "")
        + " HUD has no warm pool: 2w's ratio is "
        "against its cold rollouts/s (row 2). 2wb is the busy CPU of the whole machine over "
        "the batch (/proc/stat, 10 ms ticks; anything else running counts too), because the "
        "forked children are reaped by the kernel (the zygote ignores SIGCHLD) and their "
        "rusage reaches no RUSAGE_CHILDREN, so 2b's method cannot see them." + pool_extra,
        "3/4: client and server share one process and event loop; perf_counter per iteration "
        "after warmup. Row 3 is the process's first TCP connection, its '2nd connection' row a "
        "later one: asyncio's own 256 KiB recv makes a process's first connection slower until "
        "glibc's mmap threshold rises (bench/_common.py); a framework that reads into a buffer "
        "it keeps (proctor since its channel/_reads.py) shows no gap. "
        "HUD's venv has no uvloop, so its uvloop rows are n/a.",
        "HUD runs with HUD_TELEMETRY_ENABLED=false, so it writes spans to a private temp dir "
        f"({spans} span files this run); its private HOME ends with {home_left or 'nothing'}."
        if "sections" in h
        else "",
        "HUD's LocalRuntime serializes rollouts of one Environment (start, bind, serve, stop per "
        "rollout); proctor's shares one in-memory server among overlapping rollouts.",
    ]
    patched = next((s["patched"] for s in p.get("sections", {}).values() if s.get("patched")), None)
    if any(r.mark for r in rows) and patched:
        paragraphs.append(f"* {patched}.")
    for side, res in (("proctor", p), ("HUD", h)):
        if "sections" not in res and not res.get("absent"):
            paragraphs.append(f"{side} side failed: {res.get('error')}")
        for name, sec in res.get("sections", {}).items():
            if "error" in sec or sec.get("complete") is False:
                detail = sec.get("error") or (
                    f"{sec.get('errors')} failed runs, first: {sec.get('first_error')}"
                )
                paragraphs.append(f"{side} {name}: {detail}")
        bare, imp = res.get("imports", {}).get("bare"), res.get("imports", {}).get("import")
        if bare and imp and "error" not in bare and "error" not in imp:
            paragraphs.append(
                f"{side}: the import probe importing nothing takes {bare['wall_ms']:.0f} ms wall "
                f"and {bare['rss_mib']:.1f} MiB RSS (it loads json and time; `python -c pass` "
                f"alone is the header's baseline); `import` leaves {imp['modules']} modules."
            )
    if pyc_note:
        paragraphs.append(pyc_note)
    lines = ["notes:"]
    for text in filter(None, paragraphs):
        lines += textwrap.wrap(text, 96, initial_indent="- ", subsequent_indent="  ")
    return lines


if __name__ == "__main__":
    sys.exit(main())
