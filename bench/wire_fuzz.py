"""Fuzz the control channel server in a child process and report what it held.

    .venv/bin/python bench/wire_fuzz.py [--frames 20000] [--seed 8] [--concurrency 32]
                                        [--idle 300] [--slow 40] [--big 2]

The server (`--child`: proctor's `EnvServer` with its default limits, except a 1 s
handshake timeout so idle connections end within the run, serving a small environment
with a tunnel capability on a Unix socket) is driven over loopback by connections that
send random frames (bytes, JSON values, deep nesting, request-shaped objects with any
field wrong) and structured mutations of valid frames (bytes flipped, cut, repeated,
values swapped for long digit runs, big strings or other types), some preceded by a
`hello` so they reach the authenticated session; plus oversized frames (a first frame
past 64 KiB, a frame past 16 MiB after hello), unterminated ones, idle connections that
never speak and slow ones that trickle a hello. Every line the server writes back is
checked: a JSON-RPC 2.0 response with an id we sent (or null) and a known error code;
idle, oversized and control exchanges are checked to the byte. Between batches a fresh
client starts and grades a task, which must work. The table gives frames tried,
connections opened, replies checked, the server's RSS before and after (and its peak),
and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

CODES = {-32700, -32600, -32601, -32602, -32000}
FIRST_FRAME = 64 * 1024
MAX_FRAME = 16 * 1024 * 1024
HANDSHAKE = 1.0
METHODS = ["hello", "tasks.list", "tasks.start", "tasks.start", "tasks.grade", "tasks.grade",
           "tasks.cancel", "tunnel.open", "bye", "tasks.nope", "", "HELLO"]  # fmt: skip
TASKS = ["greet", "count", "slow", "broken", "nope", ""]
KEYS = ["id", "args", "answer", "session_id", "resume_token", "token", "capability", "n"]


# -- the server side -----------------------------------------------------------------------------


def child(handshake: float) -> None:
    """Serve the fuzz environment; print `{port, pid}`; stop when stdin closes."""
    from proctor import Capability, Environment
    from proctor.channel import EnvServer

    env = Environment("fuzz", "1")
    folder = tempfile.mkdtemp(prefix="proctor-fuzz-")
    sock_path = os.path.join(folder, "echo.sock")
    daemons: list[asyncio.Server] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    @env.initialize
    async def _echo() -> None:
        daemons.append(await asyncio.start_unix_server(echo, sock_path))
        env.add_capability(Capability("echo", "tcp", f"unix://{sock_path}"))

    @env.shutdown
    async def _stop_echo() -> None:
        for daemon in daemons:
            daemon.close()

    @env.template
    async def greet(name: str = "world") -> AsyncGenerator[Any, Any]:
        answer = yield f"hello {name}"
        yield 1.0 if answer == name else 0.0

    @env.template
    async def count(n: int, scale: float = 1.0) -> AsyncGenerator[Any, Any]:
        yield f"{n * scale}"
        yield 1.0

    @env.template
    async def slow(seconds: float = 0.05) -> AsyncGenerator[Any, Any]:
        yield "slow"
        await asyncio.sleep(min(abs(seconds), 0.2))
        yield 0.5

    @env.template
    async def broken() -> AsyncGenerator[Any, Any]:
        raise RuntimeError("broken on purpose")
        yield "never"

    async def main() -> None:
        await env.start()
        server = EnvServer(env, handshake_timeout=handshake)
        try:
            _, port = await server.listen("127.0.0.1", 0)
            print(json.dumps({"port": port, "pid": os.getpid()}), flush=True)
            await asyncio.to_thread(sys.stdin.read)
        finally:
            await server.aclose()
            await env.stop()
            os.unlink(sock_path)
            os.rmdir(folder)

    asyncio.run(main())


# -- frames ----------------------------------------------------------------------------------------


def line(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(11 if depth < 4 else 7)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 2**53, 2**64, -(10**40), int("9" * 300), rng.randrange(-99, 99)])
    if kind == 2:
        return rng.choice([0.5, -0.0, 1e300, -1e-300, rng.uniform(-1e6, 1e6)])
    if kind in (3, 4):
        return rng.choice(["", "world", "3", "ünï☃", "x" * 3000, "\u0000\u001f", "sess-0"])
    if kind == 5:
        return rng.choice(TASKS)
    if kind == 6:
        return rng.choice(["echo", "ghost", 5])
    if kind in (7, 8):
        return [value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice([*KEYS, "x", ""]): value(rng, depth + 1) for _ in range(rng.randrange(4))}


def valid(rng: random.Random, rid: int) -> dict[str, Any]:
    """A well-formed request of the protocol."""
    method = rng.choice(["hello", "tasks.list", "tasks.start", "tasks.start", "tasks.grade",
                         "tasks.cancel", "tasks.start"])  # fmt: skip
    params: dict[str, Any] = {}
    if method == "tasks.start":
        task = rng.choice(["greet", "count", "slow", "broken"])
        args = {"greet": {"name": "ada"}, "count": {"n": 3}, "slow": {}, "broken": {}}[task]
        params = {"id": task, "args": args}
    elif method == "tasks.grade":
        params = {"answer": rng.choice(["ada", "x", 3, None])}
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def request(rng: random.Random) -> dict[str, Any]:
    """Request-shaped, with any field possibly wrong."""
    msg: dict[str, Any] = {}
    if rng.random() < 0.95:
        msg["jsonrpc"] = "2.0" if rng.random() < 0.9 else value(rng)
    if rng.random() < 0.85:
        msg["id"] = rng.randrange(10**6) if rng.random() < 0.7 else value(rng)
    if rng.random() < 0.97:
        msg["method"] = rng.choice(METHODS) if rng.random() < 0.9 else value(rng)
        if msg["method"] == "bye" and rng.random() < 0.9:
            msg["method"] = "tasks.list"  # rare, or sessions end too soon
    if rng.random() < 0.9:
        params = value(rng) if rng.random() < 0.1 else {}
        if isinstance(params, dict):
            for _ in range(rng.randrange(4)):
                params[rng.choice(KEYS)] = value(rng)
            if rng.random() < 0.6:
                params["id"] = rng.choice(TASKS)
        msg["params"] = params
    return msg


def random_frame(rng: random.Random) -> bytes:
    kind = rng.randrange(8)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 200)) + b"\n"
    if kind == 1:
        return line(value(rng))
    if kind == 2:
        depth = rng.choice([10, 1000, 1030, 20_000])
        return b"[" * depth + (b"]" * depth if rng.random() < 0.5 else b"") + b"\n"
    if kind == 3:
        deep: Any = "x"
        for _ in range(rng.choice([100, 900])):
            deep = {"a": deep}
        return line({"jsonrpc": "2.0", "id": 1, "method": "tasks.grade", "params": deep})
    return line(request(rng))


def mutate(rng: random.Random, frame: bytes) -> bytes:
    """A structured mutation of a valid frame (its newline kept, or not)."""
    body = bytearray(frame.rstrip(b"\n"))
    for _ in range(rng.randrange(1, 4)):
        kind = rng.randrange(8)
        at = rng.randrange(len(body) + 1)
        if kind == 0 and body:  # flip a byte
            body[at % len(body)] = rng.randrange(256)
        elif kind == 1:  # cut a span
            del body[at : at + rng.randrange(1, 12)]
        elif kind == 2:  # repeat a span
            body[at:at] = body[at : at + rng.randrange(1, 20)] * rng.randrange(2, 6)
        elif kind == 3:  # a long digit run where a value was
            digits = b"7" * rng.choice([19, 300, 309, 5000, 200_000])
            if rng.random() < 0.5:
                body = bytearray(body.replace(b":{", b":" + digits + b",{", 1))
            else:
                body = bytearray(body.replace(b'"id":', b'"id":' + digits + b',"x":', 1))
        elif kind == 4:  # a big string
            body[at:at] = b'"' + b"s" * rng.choice([100, 60_000]) + b'"'
        elif kind == 5:  # another type for a value
            body = bytearray(body.replace(b'"2.0"', line(value(rng)).rstrip(b"\n"), 1))
        elif kind == 6:  # junk bytes
            body[at:at] = rng.randbytes(rng.randrange(1, 16))
        else:  # a newline in the middle: two frames
            body[at:at] = b"\n"
    return bytes(body) + (b"\n" if rng.random() < 0.97 else b"")


# -- the client side -------------------------------------------------------------------------


@dataclass
class Tally:
    frames: Counter[str] = field(default_factory=Counter)
    connections: Counter[str] = field(default_factory=Counter)
    replies: int = 0
    control: int = 0
    control_worst: float = 0.0
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(text)


def sent_ids(payload: bytes) -> list[Any]:
    ids: list[Any] = []
    for part in payload.split(b"\n"):
        with contextlib.suppress(ValueError, RecursionError):
            msg = json.loads(part)
            if isinstance(msg, dict) and "id" in msg:
                ids.append(msg["id"])
    return ids


def check(reply: bytes, ids: list[Any], tally: Tally, where: str) -> None:
    tally.replies += 1
    try:
        msg = json.loads(reply)
        assert reply.endswith(b"\n"), "no newline"
        assert isinstance(msg, dict) and msg.get("jsonrpc") == "2.0", "not JSON-RPC 2.0"
        assert set(msg) in ({"jsonrpc", "id", "result"}, {"jsonrpc", "id", "error"}), "keys"
        assert msg["id"] is None or any(msg["id"] == i for i in ids), f"id {msg['id']!r:.40}"
        if "error" in msg:
            err = msg["error"]
            assert set(err) in ({"code", "message"}, {"code", "message", "data"}), f"error {err}"
            assert err["code"] in CODES, f"error {err}"
            assert isinstance(err["message"], str), "message"
    except (AssertionError, ValueError) as exc:
        tally.problem(f"{where}: {exc}: {reply[:160]!r}")


async def exchange(
    addr: tuple[str, int], payload: bytes, tally: Tally, kind: str, *, eof: bool = True
) -> list[bytes]:
    """Send `payload` (then EOF), read every line until the server closes; check each."""
    tally.connections[kind] += 1
    reader, writer = await asyncio.open_connection(*addr, limit=2**25)
    lines: list[bytes] = []
    try:
        with contextlib.suppress(ConnectionError):
            writer.write(payload)
            if eof:
                writer.write_eof()
            await writer.drain()
        async with asyncio.timeout(HANDSHAKE + 20):
            with contextlib.suppress(ConnectionError):
                while reply := await reader.readline():
                    lines.append(reply)
    except TimeoutError:
        tally.problem(f"{kind}: the server never closed the connection")
    finally:
        writer.close()
    ids = sent_ids(payload)
    for reply in lines:
        check(reply, ids, tally, kind)
    return lines


async def fuzz_connection(rng: random.Random, addr: tuple[str, int], tally: Tally) -> None:
    """One connection of random or mutated frames, perhaps after a hello."""
    kind = "mutated" if rng.random() < 0.55 else "random"
    frames: list[bytes] = []
    if rng.random() < 0.7:
        frames.append(line({"jsonrpc": "2.0", "id": 0, "method": "hello", "params": {}}))
    for rid in range(1, rng.randrange(2, 30)):
        frames.append(
            mutate(rng, line(valid(rng, rid))) if kind == "mutated" else random_frame(rng)
        )
    frames.append(line({"jsonrpc": "2.0", "id": "end", "method": "tasks.cancel"}))
    tally.frames[kind] += len(frames)
    await exchange(addr, b"".join(frames), tally, kind)


async def oversized(addr: tuple[str, int], tally: Tally, big: bytes) -> None:
    """A first frame past 64 KiB, or `big` (past 16 MiB) after hello: one exact error."""
    hello = line({"jsonrpc": "2.0", "id": 0, "method": "hello"})
    if big:
        payload, limit = hello + big, MAX_FRAME
    else:
        payload, limit = b'{"method":"hello","params":{"p":"' + b"x" * 200_000, FIRST_FRAME
    tally.frames["oversized"] += 1
    lines = await exchange(addr, payload, tally, "oversized")
    error = {"code": -32600, "message": f"frame exceeds {limit} bytes"}
    refusal = line({"jsonrpc": "2.0", "id": None, "error": error})
    if not lines or lines[-1] != refusal:
        tally.problem(f"oversized: expected the refusal, got {[x[:80] for x in lines]}")


async def unterminated(rng: random.Random, addr: tuple[str, int], tally: Tally) -> None:
    """Part of a frame, then EOF: nothing is answered, the connection just closes."""
    whole = line(valid(rng, 1))
    tally.frames["unterminated"] += 1
    lines = await exchange(addr, whole[: rng.randrange(1, len(whole) - 1)], tally, "unterminated")
    if lines:
        tally.problem(f"unterminated: got {lines[0][:80]!r}")


async def idle(addr: tuple[str, int], tally: Tally) -> None:
    """Say nothing: the handshake deadline closes us with one exact error frame."""
    lines = await exchange(addr, b"", tally, "idle", eof=False)
    expected = line({"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": f"no first frame within {HANDSHAKE:g}s"}})  # fmt: skip
    if lines != [expected]:
        tally.problem(f"idle: got {lines}")


async def slow(rng: random.Random, addr: tuple[str, int], tally: Tally) -> None:
    """Trickle a hello a byte at a time: served if it ends in time, else refused."""
    tally.connections["slow"] += 1
    tally.frames["slow"] += 1
    frame = line({"method": "hello", "id": 1}) if rng.random() < 0.5 else line(valid(rng, 1))
    reader, writer = await asyncio.open_connection(*addr)
    # Read while trickling: a refusal arrives mid-frame, and a write after the server's
    # linger ends resets the connection, dropping a reply read only afterwards.
    reading = asyncio.ensure_future(reader.readline())
    try:
        with contextlib.suppress(ConnectionError):
            for byte in frame:
                if reading.done():
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.02)
        async with asyncio.timeout(HANDSHAKE + 10):
            reply = await reading
    except (TimeoutError, ConnectionError) as exc:
        tally.problem(f"slow: {type(exc).__name__}")
        return
    finally:
        reading.cancel()
        writer.close()
    check(reply, [1, None], tally, "slow")


async def control(addr: tuple[str, int], tally: Tally) -> None:
    """A well-behaved client must always be served, exactly."""
    from proctor.channel import connect

    began = time.monotonic()
    try:
        async with connect(f"tcp://{addr[0]}:{addr[1]}", ready_timeout=20) as client:
            prompt = await client.start_task("greet", {"name": "ada"})
            graded = await client.grade("ada")
    except Exception as exc:
        tally.problem(f"control: {type(exc).__name__}: {exc}")
        return
    tally.control += 1
    tally.replies += 3
    tally.control_worst = max(tally.control_worst, time.monotonic() - began)
    if prompt != {"prompt": "hello ada"} or graded != {"score": 1.0}:
        tally.problem(f"control: {prompt} {graded}")


def rss_kib(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status") as status:
        fields = dict(row.split(":", 1) for row in status if ":" in row)
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM")}


async def drive(
    addr: tuple[str, int], pid: int, args: argparse.Namespace, say: Callable[[str], None]
) -> dict[str, Any]:
    rng = random.Random(args.seed)
    tally = Tally()
    await control(addr, tally)  # warm: the figures below are what fuzzing added
    before = rss_kib(pid)
    began = time.monotonic()
    big = b"y" * (MAX_FRAME + 1) if args.big else b""
    idlers = [asyncio.create_task(idle(addr, tally)) for _ in range(args.idle)]
    tricklers = [asyncio.create_task(slow(rng, addr, tally)) for _ in range(args.slow)]
    bigs = args.big
    while sum(tally.frames.values()) < args.frames:
        jobs = []
        for _ in range(args.concurrency):
            pick = rng.random()
            if pick < 0.03:
                jobs.append(unterminated(rng, addr, tally))
            elif pick < 0.05:
                use_big = bigs > 0 and rng.random() < 0.5
                bigs -= use_big
                jobs.append(oversized(addr, tally, big if use_big else b""))
            else:
                jobs.append(fuzz_connection(rng, addr, tally))
        await asyncio.gather(*jobs)
        await control(addr, tally)
        say(f"\r  {sum(tally.frames.values()):,} frames ...")
    await asyncio.gather(*idlers, *tricklers)
    elapsed = time.monotonic() - began
    await asyncio.sleep(1.0)  # parked tasks and closed connections settle
    await control(addr, tally)
    after = rss_kib(pid)
    return {
        "frames": dict(tally.frames),
        "connections": dict(tally.connections),
        "frames_total": sum(tally.frames.values()),
        "connections_total": sum(tally.connections.values()),
        "replies_checked": tally.replies,
        "control_round_trips": tally.control,
        "control_worst_s": tally.control_worst,
        "rss_before_mib": before["VmRSS"] / 1024,
        "rss_after_mib": after["VmRSS"] / 1024,
        "rss_peak_mib": after["VmHWM"] / 1024,
        "seconds": elapsed,
        "loadavg": os.getloadavg(),
        "problems": tally.problems,
    }


def run(args: argparse.Namespace, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Start the child server, fuzz it, stop it; the figures (and any problems found)."""
    argv = [sys.executable, os.path.abspath(__file__), "--child", "--handshake", f"{HANDSHAKE}"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        hello = json.loads(proc.stdout.readline())
        figures = asyncio.run(drive(("127.0.0.1", hello["port"]), hello["pid"], args, say))
        proc.stdin.close()
        figures["exit_code"] = proc.wait(30)
        return figures
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def table(f: dict[str, Any], args: argparse.Namespace) -> str:
    kinds = ["random", "mutated", "oversized", "unterminated", "idle", "slow"]
    rows = [f"{'kind':<14}{'frames':>10}{'connections':>14}"]
    for kind in kinds:
        rows.append(
            f"{kind:<14}{f['frames'].get(kind, 0):>10,}{f['connections'].get(kind, 0):>14,}"
        )
    rows.append(f"{'total':<14}{f['frames_total']:>10,}{f['connections_total']:>14,}")
    load = " ".join(f"{x:.2f}" for x in f["loadavg"])
    rows += [
        "",
        f"replies checked      {f['replies_checked']:,} (control round trips "
        f"{f['control_round_trips']}, slowest {f['control_worst_s'] * 1e3:.0f} ms)",
        f"problems             {len(f['problems'])}",
        f"server RSS           {f['rss_before_mib']:.1f} MiB before, "
        f"{f['rss_after_mib']:.1f} MiB after ({f['rss_after_mib'] - f['rss_before_mib']:+.1f}), "
        f"peak {f['rss_peak_mib']:.1f}",
        f"time                 {f['seconds']:.1f} s (seed {args.seed}, {args.concurrency} at a "
        f"time, handshake timeout {HANDSHAKE:g} s)",
        f"load average         {load} ({os.cpu_count()} CPUs)",
        f"server exit code     {f['exit_code']}",
    ]
    return "\n".join(rows + [f"  ! {p}" for p in f["problems"]])


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=20_000, help="frames to try (about)")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=32, help="connections at a time")
    parser.add_argument("--idle", type=int, default=300, help="idle connections held")
    parser.add_argument("--slow", type=int, default=40, help="trickling connections")
    parser.add_argument("--big", type=int, default=2, help="frames past 16 MiB after hello")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--handshake", type=float, default=HANDSHAKE, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    args = parse()
    if args.child:
        child(args.handshake)
        return 0
    figures = run(args, say=lambda text: print(text, end="", file=sys.stderr, flush=True))
    print("\r" + " " * 40 + "\r", end="", file=sys.stderr, flush=True)
    print(table(figures, args))
    return 1 if figures["problems"] or figures["exit_code"] else 0


if __name__ == "__main__":
    sys.exit(main())
