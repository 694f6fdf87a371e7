"""Benchmark proctor._http: HttpClient against HttpServer on loopback, keep-alive.

    .venv/bin/python bench/http_roundtrip.py [--duration 5] [--concurrency 1,200] [--body 512]

The server runs in its own process (one core), the client in this one; each row runs
for `--duration` seconds after a short warm-up. A request is a POST with a JSON body of
`--body` bytes echoed back, like a small model call. Printed per row: requests/s,
client-seen latency (p50, p99) and the CPU seconds each side spent per 1,000 requests.
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
from typing import Any

from proctor._http import HttpClient, HttpServer, Request, Response


def loop_factory(name: str) -> Any:
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


async def echo(request: Request) -> Response:
    return Response(200, [("content-type", "application/json")], request.body)


async def serve() -> None:
    """Child process: serve `echo`, print the port, stop when stdin closes."""
    async with HttpServer(echo) as server:
        print(json.dumps({"port": server.port}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def run(url: str, concurrency: int, duration: float, body: bytes) -> dict[str, Any]:
    """Drive `concurrency` request loops for `duration` seconds after a warm-up."""
    latencies: list[float] = []
    async with HttpClient(max_connections=concurrency) as client:

        async def worker(until: float, record: bool) -> None:
            clock = time.perf_counter
            while (start := clock()) < until:
                resp = await client.request("POST", url, headers=HEADERS, body=body)
                await resp.read()
                if record:
                    latencies.append(clock() - start)

        warm = time.perf_counter() + min(1.0, duration / 5)
        await asyncio.gather(*(worker(warm, False) for _ in range(concurrency)))
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(t0 + duration, True) for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    return {
        "n": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50_ms": pct(latencies, 0.5) * 1e3,
        "p99_ms": pct(latencies, 0.99) * 1e3,
        "client_cpu": cpu,
    }


HEADERS = [("content-type", "application/json"), ("authorization", "Bearer sk-bench")]


def server_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_loop(loop: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--loop", loop],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdin is not None
    port = json.loads(child.stdout.readline())["port"]
    body = json.dumps({"pad": "x" * max(0, args.body - 11)}).encode()
    rows = []
    try:
        for c in args.concurrency:
            before = server_cpu(child.pid)
            with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
                row = runner.run(run(f"http://127.0.0.1:{port}/v1/x", c, args.duration, body))
            row.update(loop=loop, c=c, server_cpu=server_cpu(child.pid) - before)
            rows.append(row)
    finally:
        child.stdin.close()
        child.wait(10)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--loop", default="asyncio", help=argparse.SUPPRESS)
    parser.add_argument("--loops", default="asyncio,uvloop")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--concurrency", default="1,200")
    parser.add_argument("--body", type=int, default=512)
    args = parser.parse_args()
    if args.serve:
        with asyncio.Runner(loop_factory=loop_factory(args.loop)) as runner:
            runner.run(serve())
        return
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, body {args.body} B")
    print(
        f"{'loop':8} {'C':>4} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'cli ms/kreq':>12}"
        f" {'srv ms/kreq':>12}"
    )
    for loop in args.loops.split(","):
        for r in bench_loop(loop, args):
            k = r["n"] / 1000
            print(
                f"{r['loop']:8} {r['c']:>4} {r['rps']:>8.0f} {r['p50_ms']:>7.3f} "
                f"{r['p99_ms']:>7.3f} {r['client_cpu'] / k * 1e3:>12.1f}"
                f" {r['server_cpu'] / k * 1e3:>12.1f}"
            )


if __name__ == "__main__":
    main()
