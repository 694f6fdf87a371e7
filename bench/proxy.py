"""Interception proxy overhead: direct to the fake upstream, through proctor's proxy, and
through verifiers' (a peer), all in one run.

    .venv/bin/python bench/proxy.py [--turns 10] [--concurrency 1,200] [--loop uvloop]
        [--verifiers-python .venv-verifiers/bin/python] [--before DIR] [--budgets]
        [--repeat 1]

Processes on this machine: the fake model server (`python -m
proctor.testing.fake_model`), each proxy in its own process (`bench/_proxy_server.py`;
`bench/_verifiers_proxy.py` under `--verifiers-python`, a venv with verifiers==0.4.0 that
`make bench` makes; skipped with a note when absent), one session per rollout recording
every turn, and this load generator (proctor's own lean HTTP client, keep-alive). Each
rollout makes `--turns` sequential chat completions with a growing history (the reply and
a new user message appended each turn). Each run through one of proctor's proxies
starts with fresh sessions (the last run's closed, their traces dropped, as a batch
hands them on), so later runs do not pay for a heap holding every earlier turn. A direct
row's CPU is the client's and the upstream's: at C=200, where every process competes for
the cores, a proxy row reaches about direct CPU / (direct CPU + proxy CPU) of its rate,
which a verdict line prints. At each
concurrency every mode runs back to back, direct first, so their figures are comparable
on a noisy machine: each proxy's row gives its req/s and p50 as ratios to the direct
row of the same run, with the load average and a bare-process baseline
(`_common.baseline`) printed beside the table.

The `relay` row is the floor: `bench/_proxy_relay.py` forwards bodies and answers on the
same HTTP server and client, and does nothing else.

`--before DIR` adds a `before` row: the same proxy script run on another checkout's
`src/` (say `git worktree add /tmp/proxy-old HEAD~1`), to measure what a change costs in
the same run; `--budgets` gives every session token and cost budgets too large to
reach, so each turn is metered; `--repeat N` runs every mode N times, interleaved, and
the verdicts use the median of each.

Budgets (issue 3): added p50 latency <= 0.5 ms at C=1; >= 1,000 req/s through the
proxy at C=200.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from _common import baseline, baseline_line

from proctor._http import HttpClient

BENCH = Path(__file__).resolve().parent
FILLER = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 5


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def spawn(
    argv: list[str], env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], dict[str, object]]:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"{argv[1]} did not start")
    return proc, json.loads(line)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_rollout(
    http: HttpClient, url: str, key: str, turns: int, lat: list[float], rollout: int
) -> None:
    headers = [("authorization", f"Bearer {key}"), ("content-type", "application/json")]
    messages: list[dict[str, str]] = [
        {"role": "system", "content": "You are a benchmark."},
        {"role": "user", "content": f"rollout {rollout}: {FILLER}"},
    ]
    for turn in range(turns):
        body = orjson.dumps({"model": "gpt-4.1-mini", "messages": messages})
        t0 = time.perf_counter()
        async with await http.request("POST", url, headers=headers, body=body) as resp:
            data = await resp.read()
        lat.append(time.perf_counter() - t0)
        if resp.status != 200:
            raise SystemExit(f"HTTP {resp.status}: {data[:200]!r}")
        reply = orjson.loads(data)["choices"][0]["message"]["content"]
        messages.append({"role": "assistant", "content": reply})
        messages.append({"role": "user", "content": f"turn {turn}: {FILLER}"})


async def load(
    base: str, keys: list[str], concurrency: int, rollouts: int, turns: int
) -> dict[str, float]:
    url = base + "/chat/completions"
    lat: list[float] = []
    async with HttpClient(max_connections=concurrency + 8) as http:
        # warm the pool and both servers
        await asyncio.gather(
            *(one_rollout(http, url, keys[i % len(keys)], 2, [], i) for i in range(concurrency))
        )
        queue = iter(range(rollouts))

        async def worker() -> None:
            for i in queue:
                await one_rollout(http, url, keys[i % len(keys)], turns, lat, i)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return {
        "requests": len(lat),
        "rps": len(lat) / wall,
        "p50_ms": pct(lat, 0.5) * 1e3,
        "p99_ms": pct(lat, 0.99) * 1e3,
    }


def verifiers_python(given: str | None) -> tuple[str | None, str]:
    """The verifiers peer's python, or None and why it is absent."""
    python = given or os.environ.get("PROCTOR_VERIFIERS_PYTHON")
    python = python or str(BENCH.parent / ".venv-verifiers" / "bin" / "python")
    if not Path(python).exists():
        return None, f"{python} does not exist (`make bench` installs verifiers there)"
    probe = subprocess.run([python, "-c", "import verifiers.v1.interception.server"],
                           capture_output=True, text=True)  # fmt: skip
    if probe.returncode != 0:
        return None, f"{python} cannot import verifiers: {probe.stderr.strip()[-200:]}"
    return python, ""


def proxies(
    args: argparse.Namespace, upstream: str, sessions: int
) -> list[tuple[str, list[str], dict[str, str] | None]]:
    """(mode, argv, env) of each proxy to measure: proctor's, the bare relay (the floor),
    the `--before` checkout's, then verifiers' when present."""
    tail = ["--upstream", upstream, "--sessions", str(sessions)]
    ours = [*tail, *(["--uvloop"] if args.loop == "uvloop" else [])]
    ours += ["--budgets"] if args.budgets else []
    server = [sys.executable, str(BENCH / "_proxy_server.py"), *ours]
    found: list[tuple[str, list[str], dict[str, str] | None]] = [("proctor", server, None)]
    relay = [sys.executable, str(BENCH / "_proxy_relay.py"), "--upstream", upstream]
    found.append(("relay", relay + (["--uvloop"] if args.loop == "uvloop" else []), None))
    if args.before is not None:
        env = {**os.environ, "PYTHONPATH": str(Path(args.before, "src").resolve())}
        found.append(("before", server, env))
    if args.peer is not None:  # on asyncio, as it ships: verifiers 0.4.0 never uses uvloop
        found.append(("verifiers", [args.peer, str(BENCH / "_verifiers_proxy.py"), *tail], None))
    return found


def revision(folder: str) -> str:
    """The commit a checkout is at (short), for the report."""
    done = subprocess.run(["git", "-C", folder, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip() or folder


def measure(args: argparse.Namespace, levels: list[int]) -> tuple[list[Any], dict[str, str]]:
    """Every mode at every level: [(c, {mode: figures})], and each proxy's version."""
    upstream, up = spawn([sys.executable, "-m", "proctor.testing.fake_model"])
    procs, peers, versions = [upstream], [], {"proctor": "this checkout"}
    if args.before is not None:
        versions["before"] = f"{args.before} at {revision(args.before)}"
    factory = None
    if args.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    rows = []
    try:
        for name, argv, env in proxies(args, str(up["url"]), max(levels)):
            proc, info = spawn(argv, env)
            procs.append(proc)
            versions[name] = str(info.get("version", versions.get(name)))
            secrets = [str(x) for x in info["secrets"]]  # type: ignore[attr-defined]
            peers.append([name, proc, str(info["url"]), secrets])
        with asyncio.Runner(loop_factory=factory) as runner:
            for c in levels:
                for i in range(args.repeat):  # each proxy first in turn: no order bias
                    order = peers[i % len(peers) :] + peers[: i % len(peers)]
                    got = run_level(runner, args, (str(up["url"]), upstream.pid), order, c)
                    rows.append((c, got))
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    return rows, versions


def run_level(
    runner: asyncio.Runner,
    args: argparse.Namespace,
    direct: tuple[str, int],
    peers: list[Any],
    c: int,
) -> dict[str, dict[str, float]]:
    """Every mode once at concurrency `c`, back to back, direct first (the proxies in the
    order given; the table lists them in their usual order). `direct` is the upstream's
    URL and pid: the direct row's CPU is this client's and the upstream's."""
    rollouts = args.rollouts_c1 if c == 1 else c * 2
    url, pid = direct
    cpu0 = cpu_seconds(pid) + time.process_time()
    got = {"direct": runner.run(load(url, ["x"], c, rollouts, args.turns))}
    spent = cpu_seconds(pid) + time.process_time() - cpu0
    got["direct"]["proxy_cpu_us"] = spent / got["direct"]["requests"] * 1e6
    for peer in peers:
        name, proc, url, secrets = peer
        cpu0 = cpu_seconds(proc.pid)
        via = runner.run(load(url, secrets, c, rollouts, args.turns))
        via["proxy_cpu_us"] = (cpu_seconds(proc.pid) - cpu0) / via["requests"] * 1e6
        got[name] = via
        if name in ("proctor", "before"):  # the next run starts with fresh sessions
            peer[3] = next_sessions(proc)
    return {"direct": got["direct"], **{name: got[name] for name in MODES if name in got}}


MODES = ("proctor", "relay", "before", "verifiers")


def next_sessions(proc: subprocess.Popen[bytes]) -> list[str]:
    """End a proxy server's sessions (their traces dropped) and take the new ones'
    secrets (see `_proxy_server.py`)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"next\n")
    proc.stdin.flush()
    return [str(x) for x in json.loads(proc.stdout.readline())["secrets"]]


def medians(rows: list[Any]) -> list[Any]:
    """One row per level: each mode's figures, the median over the repeats (the added
    p50 of a proxy taken against the direct row of its own repeat)."""
    levels: dict[int, list[dict[str, dict[str, float]]]] = {}
    for c, got in rows:
        levels.setdefault(c, []).append(got)
    out = []
    for c, runs in levels.items():
        merged: dict[str, dict[str, float]] = {}
        for mode in runs[0]:
            keys = runs[0][mode].keys()
            merged[mode] = {k: statistics.median(r[mode][k] for r in runs) for k in keys}
            added = [r[mode]["p50_ms"] - r["direct"]["p50_ms"] for r in runs]
            merged[mode]["added_p50_ms"] = statistics.median(added)
        out.append((c, merged))
    return out


def table(rows: list[Any]) -> list[str]:
    head = (
        f"{'C':>4} {'mode':<10} {'requests':>8} {'req/s':>8} {'x direct':>8} {'p50 ms':>8} "
        f"{'+p50 ms':>8} {'p99 ms':>8} {'proxy CPU/req':>14}"
    )
    lines = [head]
    for c, got in rows:
        direct = got["direct"]
        for mode, r in got.items():
            via = mode != "direct"
            times = f"{r['rps'] / direct['rps']:>7.2f}x" if via else f"{'-':>8}"
            added = f"{r['p50_ms'] - direct['p50_ms']:>8.3f}" if via else f"{'-':>8}"
            cpu = f"{r['proxy_cpu_us']:>11.0f} us" if via else f"({r['proxy_cpu_us']:.0f} us)"
            lines.append(
                f"{c:>4} {mode:<10} {r['requests']:>8.0f} {r['rps']:>8.0f} {times} "
                f"{r['p50_ms']:>8.3f} {added} {r['p99_ms']:>8.3f} {cpu:>14}"
            )
    return lines


def verdicts(rows: list[Any]) -> list[str]:
    lines = []
    for c, got in medians(rows):
        added = {m: r["added_p50_ms"] for m, r in got.items()}
        if c == 1:
            ok = "ok" if added["proctor"] <= 0.5 else "MISSED"
            line = f"C=1   added p50 latency {added['proctor']:.3f} ms (budget <= 0.5 ms): {ok}"
            if "verifiers" in got:
                line += f"; verifiers adds {added['verifiers']:.3f} ms"
        else:
            rps = got["proctor"]["rps"]
            ok = "ok" if rps >= 1000 else "MISSED"
            line = f"C={c} through the proxy {rps:.0f} req/s (budget >= 1,000): {ok}"
            if "verifiers" in got:
                line += (
                    f"; verifiers {got['verifiers']['rps']:.0f} req/s, adding "
                    f"{added['verifiers']:.3f} ms p50"
                )
        lines.append(line)
        path, spent = got["direct"]["proxy_cpu_us"], got["proctor"]["proxy_cpu_us"]
        if c > 1:  # CPU-bound: the proxy's CPU is taken from the client's and upstream's
            lines.append(
                f"C={c} the proxy spends {spent / path:.2f}x the CPU per request of the direct "
                f"path (client + upstream, {path:.0f} us): with every process on "
                f"{os.cpu_count()} busy cores, the proxy row can reach about "
                f"{path / (path + spent):.2f}x direct"
            )
        relay = got["relay"]
        lines.append(
            f"C={c} the bare relay on the same HTTP layer (no parsing, budgets or recording) "
            f"reaches {relay['rps'] / got['direct']['rps']:.2f}x direct at "
            f"{relay['proxy_cpu_us']:.0f} us/req: the floor of any proxy on it"
        )
        if "before" in got:
            now, then = got["proctor"], got["before"]
            lines.append(
                f"C={c} this checkout against --before: {now['rps']:.0f} vs {then['rps']:.0f} "
                f"req/s ({now['rps'] / then['rps']:.3f}x), added p50 {added['proctor']:.3f} vs "
                f"{added['before']:.3f} ms ({added['proctor'] - added['before']:+.3f} ms), "
                f"proxy CPU {now['proxy_cpu_us']:.0f} vs {then['proxy_cpu_us']:.0f} us/req"
            )
            runs = [r for level, r in rows if level == c]
            if len(runs) > 1:
                lines.append(f"C={c} paired, run by run: " + paired(runs))
    return lines


def paired(runs: list[dict[str, dict[str, float]]]) -> str:
    """This checkout over --before within each interleaved run: the median ratio and its
    range, which the load's drift between runs cannot bias as the column medians can."""
    parts = []
    for key, label in (("rps", "req/s"), ("proxy_cpu_us", "CPU/req")):
        ratios = sorted(r["proctor"][key] / r["before"][key] for r in runs)
        parts.append(
            f"{label} {statistics.median(ratios):.3f}x (from {ratios[0]:.2f} to {ratios[-1]:.2f})"
        )
    return ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--concurrency", default="1,200")
    parser.add_argument("--rollouts-c1", type=int, default=60, help="rollouts at C=1")
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="uvloop")
    parser.add_argument(
        "--verifiers-python",
        help="python of a venv with verifiers==0.4.0 (default: $PROCTOR_VERIFIERS_PYTHON, "
        "else .venv-verifiers/bin/python)",
    )
    parser.add_argument("--before", metavar="DIR", help="a checkout to compare with (its src/)")
    parser.add_argument("--budgets", action="store_true", help="meter every turn")
    parser.add_argument("--repeat", type=int, default=1, help="runs of every mode per level")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    args.peer, why = verifiers_python(args.verifiers_python)
    base = baseline()
    rows, versions = measure(args, levels)
    load = os.getloadavg()[0]
    print(f"\nproxy bench: {shlex.join(getattr(sys, 'orig_argv', sys.argv))}")
    print(f"{args.turns} turns/rollout, growing history, client loop={args.loop}, "
          f"{os.cpu_count()} cores")  # fmt: skip
    print(baseline_line(base) + f"; load average at the end {load:.2f}")
    peer = f"verifiers {versions['verifiers']}" if "verifiers" in versions else f"skipped: {why}"
    if "before" in versions:
        print(f"before: {versions['before']} (the same proxy script on its src/)")
    print(f"sessions {'with' if args.budgets else 'without'} budgets")
    print(f"proxies: proctor ({versions['proctor']}, loop={args.loop}); verifiers: {peer}"
          + (" (loop=asyncio, as it ships)" if "verifiers" in versions else "") + "\n")  # fmt: skip
    print("\n".join(table(rows)))
    print()
    if args.repeat > 1:
        print(f"verdicts: medians of {args.repeat} interleaved runs")
    print("\n".join(verdicts(rows)))
    print(
        "\nx direct: req/s over the direct row of the same level; +p50: p50 minus direct's; "
        "CPU/req in brackets on a direct row: this client's and the upstream's. "
        "Each proxy runs in a process of its own, with the same sessions and load."
    )


if __name__ == "__main__":
    main()
