"""Interception proxy overhead: direct to the fake upstream vs through the proxy.

    .venv/bin/python bench/proxy.py [--turns 10] [--concurrency 1,200] [--loop uvloop]

Three processes on this machine: the fake model server (`python -m
proctor.testing.fake_model`), the proxy (`bench/_proxy_server.py`, one session per
rollout, recording every turn) and this load generator (proctor's own lean HTTP client,
keep-alive). Each rollout makes `--turns` sequential chat completions with a growing
history (the reply and a new user message appended each turn). Both modes run in the
same invocation, direct first, so their figures are comparable on a noisy machine.

Budgets (issue 3): added p50 latency <= 0.5 ms at C=1; >= 1,000 req/s through the
proxy at C=200.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson

from proctor._http import HttpClient

BENCH = Path(__file__).resolve().parent
FILLER = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 5


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def spawn(argv: list[str]) -> tuple[subprocess.Popen[bytes], dict[str, object]]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--concurrency", default="1,200")
    parser.add_argument("--rollouts-c1", type=int, default=60, help="rollouts at C=1")
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="uvloop")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    py = sys.executable
    upstream, up = spawn([py, "-m", "proctor.testing.fake_model"])
    procs = [upstream]
    factory = None
    if args.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    rows = []
    try:
        proxy_argv = [py, str(BENCH / "_proxy_server.py"), "--upstream", str(up["url"])]
        proxy_argv += ["--sessions", str(max(levels))]
        proxy_argv += ["--uvloop"] if args.loop == "uvloop" else []
        proxy, px = spawn(proxy_argv)
        procs.append(proxy)
        secrets = [str(s) for s in px["secrets"]]  # type: ignore[union-attr]
        with asyncio.Runner(loop_factory=factory) as runner:
            for c in levels:
                rollouts = args.rollouts_c1 if c == 1 else c * 2
                direct = runner.run(load(str(up["url"]), ["x"], c, rollouts, args.turns))
                cpu0 = cpu_seconds(proxy.pid)
                via = runner.run(load(str(px["url"]), secrets, c, rollouts, args.turns))
                cpu = cpu_seconds(proxy.pid) - cpu0
                via["proxy_cpu_us"] = cpu / via["requests"] * 1e6
                rows.append((c, direct, via))
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    print(f"\nproxy bench: {args.turns} turns/rollout, growing history, loop={args.loop}\n")
    head = f"{'C':>4} {'mode':<7} {'requests':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}"
    print(head + f" {'proxy CPU/req':>14}")
    for c, direct, via in rows:
        for mode, r in (("direct", direct), ("proxy", via)):
            cpu = f"{r['proxy_cpu_us']:>11.0f} us" if "proxy_cpu_us" in r else ""
            print(
                f"{c:>4} {mode:<7} {r['requests']:>8.0f} {r['rps']:>8.0f} "
                f"{r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} {cpu:>14}"
            )
    print()
    for c, direct, via in rows:
        added = via["p50_ms"] - direct["p50_ms"]
        if c == 1:
            ok = "ok" if added <= 0.5 else "MISSED"
            print(f"C=1   added p50 latency {added:.3f} ms (budget <= 0.5 ms): {ok}")
        else:
            ok = "ok" if via["rps"] >= 1000 else "MISSED"
            print(f"C={c} through the proxy {via['rps']:.0f} req/s (budget >= 1,000): {ok}")


if __name__ == "__main__":
    main()
