"""The server survives every bad frame (DESIGN 3): thousands of them, then real work.

Every frame the server writes back is checked to be a well-formed JSON-RPC response,
and the autouse fixture in conftest checks that nothing was logged at ERROR level.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from typing import Any

from wire_helpers import TIMEOUT, Raw, frame

from proctor import ChannelError
from proctor.channel import MAX_FIRST_FRAME, EnvServer, connect

SEED = 20240611
METHODS = ["hello", "tasks.list", "tasks.start", "tasks.start", "tasks.start", "tasks.grade",
           "tasks.grade", "tasks.cancel", "tunnel.open", "tasks.nope", "", "HELLO"]  # fmt: skip
TASKS = ["greet", "count", "chat", "episode", "misbound", "scored", "typed",
         "guarded", "slow_start", "slow_grade", "slow_teardown", "broken_start",
         "broken_teardown", "nope", ""]  # fmt: skip
PARAM_KEYS = ["id", "args", "answer", "session_id", "token", "capability", "n", "kind"]
CODES = {-32700, -32600, -32601, -32602, -32000}


def value(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value, biased towards the awkward ones."""
    kind = rng.randrange(12 if depth < 4 else 8)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 2**53, 2**63, -(2**64), 10**40, rng.randrange(-999, 999)])
    if kind == 3:
        return rng.choice([0.5, -0.0, 1e300, -1e-300, rng.uniform(-1e6, 1e6)])
    if kind in (4, 5):
        return rng.choice(["", "world", "3", "ünï☃", "x" * 5000, "\u0000\u001f", "sess-0"])
    if kind == 6:
        return rng.choice(TASKS)
    if kind == 7:
        return rng.choice(["float", "bool", "eval", "dict", "nan", "inf", "text", "raise", "huge"])
    if kind in (8, 9):
        return [value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = [*PARAM_KEYS, "name", "x", ""]
    return {rng.choice(keys): value(rng, depth + 1) for _ in range(rng.randrange(4))}


def request(rng: random.Random) -> dict[str, Any]:
    """Something that looks like a request, with any field possibly wrong."""
    msg: dict[str, Any] = {}
    if rng.random() < 0.95:
        msg["jsonrpc"] = "2.0" if rng.random() < 0.9 else value(rng)
    if rng.random() < 0.85:
        msg["id"] = rng.randrange(10**6) if rng.random() < 0.7 else value(rng)
    if rng.random() < 0.97:
        msg["method"] = rng.choice(METHODS) if rng.random() < 0.9 else value(rng)
        if rng.random() < 0.005:
            msg["method"] = "bye"  # rare, or sessions would be too short to get anywhere
    if rng.random() < 0.9:
        params = value(rng) if rng.random() < 0.1 else {}
        if isinstance(params, dict):
            for _ in range(rng.randrange(4)):
                params[rng.choice(PARAM_KEYS)] = value(rng)
            if rng.random() < 0.6:
                params["id"] = rng.choice(TASKS)
                params["args"] = value(rng) if rng.random() < 0.3 else {}
        msg["params"] = params
    return msg


def junk(rng: random.Random) -> bytes:
    """One line (or a few, when random bytes contain newlines) of trouble."""
    kind = rng.randrange(10)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 200)) + b"\n"
    if kind == 1:
        return frame(value(rng))
    if kind == 2:
        depth = rng.choice([10, 1000, 1030, 50_000])
        return b"[" * depth + (b"]" * depth if rng.random() < 0.5 else b"") + b"\n"
    if kind == 3:
        deep: Any = "x"
        for _ in range(rng.choice([100, 900])):
            deep = {"a": deep}
        return frame({"jsonrpc": "2.0", "id": 1, "method": "tasks.grade", "params": deep})
    if kind == 4:
        line = frame(request(rng))
        return line[: rng.randrange(1, len(line))] + b"\n"  # truncated
    return frame(request(rng))


def check_reply(line: bytes, sent_ids: list[Any]) -> None:
    msg = json.loads(line)
    assert msg["jsonrpc"] == "2.0"
    assert set(msg) in ({"jsonrpc", "id", "result"}, {"jsonrpc", "id", "error"}), msg
    assert msg["id"] is None or msg["id"] in sent_ids or msg["id"] == "end", msg
    if "error" in msg:
        err = msg["error"]
        assert set(err) in ({"code", "message"}, {"code", "message", "data"}), msg
        assert err["code"] in CODES, msg
        assert isinstance(err["message"], str)


def ids_of(frames: list[bytes]) -> list[Any]:
    ids = []
    for line in frames:
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(msg, dict) and "id" in msg:
            ids.append(msg["id"])
    return ids


async def blast(addr: tuple[str, int], frames: list[bytes]) -> int:
    """Send every frame, reconnecting when the server closes (bye); check every reply."""
    sent_ids = ids_of(frames)
    replies = 0
    i = 0
    while i < len(frames):
        conn = Raw(*await asyncio.open_connection(*addr))
        await conn.send(b'{"jsonrpc":"2.0","id":"init","method":"hello"}\n')
        sent_ids.append("init")

        async def read_all(conn: Raw = conn) -> int:
            count = 0
            with contextlib.suppress(ConnectionError):  # a bye with our data unread: RST
                while (line := await conn.reader.readline()) and json.loads(line)["id"] != "end":
                    check_reply(line, sent_ids)
                    count += 1
            return count

        reading = asyncio.create_task(read_all())
        with contextlib.suppress(ConnectionError):
            while i < len(frames) and not reading.done():
                conn.writer.write(frames[i])
                i += 1
                if i % 64 == 0:
                    await conn.writer.drain()
            if not reading.done():
                await conn.send(b'{"jsonrpc":"2.0","id":"end","method":"tasks.cancel"}\n')
        replies += await asyncio.wait_for(reading, TIMEOUT * 4)
        conn.close()
    return replies


async def test_thousands_of_bad_frames_then_real_work(server, addr, probe) -> None:
    rng = random.Random(SEED)
    one = [junk(rng) for _ in range(3000)]
    several = [[junk(rng) for _ in range(1500)] for _ in range(4)]
    replies = await blast(addr, one)
    replies += sum(await asyncio.gather(*(blast(addr, frames) for frames in several)))
    assert replies > 3000  # most frames are answered; notifications and bye'd ones not

    # the same frames through the in-memory transport, fed synchronously
    out: list[bytes] = []

    class Catch(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            out.append(data)

    transport = server.connect_memory(Catch())
    for line in one:
        if transport.is_closing():
            transport = server.connect_memory(Catch())
        transport.write(line)
    transport.close()
    sent_ids = ids_of(one)
    for line in b"".join(out).splitlines():
        check_reply(line, sent_ids)

    probe.gate.set()  # let anything still waiting in the slow templates finish
    for target in (f"tcp://{addr[0]}:{addr[1]}", server):
        async with connect(target) as client:
            assert await client.start_task("greet", {"name": "ada"}) == {"prompt": "hello ada"}
            assert await client.grade("ada") == {"score": 1.0}
            assert await client.start_task("count", {"n": "7"}) == {"prompt": "int:7 float:1.0"}
            assert await client.cancel() is True


async def test_random_first_frames_on_many_connections(server, addr) -> None:
    rng = random.Random(SEED + 1)

    async def one(first: bytes, after: bytes) -> None:
        conn = Raw(*await asyncio.open_connection(*addr))
        try:
            conn.writer.write(first + after)
            conn.writer.write_eof()
            await asyncio.wait_for(conn.reader.read(), TIMEOUT)  # everything ends in a close
        except ConnectionError:
            pass
        finally:
            conn.close()

    prefaces: list[bytes] = []
    for _ in range(400):
        first = junk(rng)
        if rng.random() < 0.3:
            params = {"capability": rng.choice(["echo", "ghost", "nope", 5, None])}
            first = frame({"jsonrpc": "2.0", "id": rng.choice([1, None]), "method": "tunnel.open",
                           "params": params})  # fmt: skip
        prefaces.append(first)
    for batch in range(0, len(prefaces), 50):
        await asyncio.gather(
            *(one(first, junk(rng) + rng.randbytes(50)) for first in prefaces[batch : batch + 50])
        )
    async with connect(f"tcp://{addr[0]}:{addr[1]}") as client:
        await client.start_task("greet")
        assert await client.grade("world") == {"score": 1.0}


async def test_a_token_server_survives_the_same(env) -> None:
    server = EnvServer(env, token="t")
    addr = await server.listen("127.0.0.1", 0)
    rng = random.Random(SEED + 2)
    try:
        for _ in range(200):
            conn = Raw(*await asyncio.open_connection(*addr))
            conn.writer.write(junk(rng) + junk(rng))
            reply = await conn.recv()
            assert reply["error"]["message"] in (
                "unauthorized: a valid token is required",
                f"frame exceeds {MAX_FIRST_FRAME} bytes",  # junk of 50,000 brackets
            )
            assert await conn.closed()
            conn.close()
        async with connect(f"tcp://{addr[0]}:{addr[1]}", token="t") as client:
            assert await client.cancel() is False
    finally:
        await server.aclose()


async def test_the_client_survives_a_server_talking_nonsense(fake) -> None:
    """Whatever comes back, a call ends in a result or a ChannelError, never anything else."""
    rng = random.Random(SEED + 3)
    hello = (
        b'{"jsonrpc":"2.0","id":1,"result":{"session_id":"s","env":{"name":"f","version":"0"},'
        b'"bindings":[]}}\n'
    )
    answers = [junk(rng) for _ in range(200)]
    for _ in range(400):
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": rng.choice([2, 2, 2, None, "2", 7])}
        for key in rng.sample(["result", "error", "method", "params"], rng.randrange(1, 3)):
            reply[key] = value(rng)
        if "error" in reply and rng.random() < 0.5:
            code = rng.choice([-32000, -32600, 7, 1.5, "x", True, None])
            reply["error"] = {"code": code, "message": value(rng), "data": value(rng)}
        answers.append(frame(reply))
    pending = iter(answers)
    url = await fake(lambda line: hello if b'"hello"' in line else next(pending))
    outcomes: set[str] = set()
    for _ in answers:
        async with connect(url) as client:
            call = rng.choice([client.list_tasks, lambda: client.start_task("t"), client.grade])
            try:
                await asyncio.wait_for(call(), 0.5)
                outcomes.add("result")
            except ChannelError as exc:
                outcomes.add(type(exc).__name__)
            except TimeoutError:
                outcomes.add("no reply")  # a blank line, a request-shaped answer
    assert {"result", "ProtocolError", "RemoteError"} <= outcomes
