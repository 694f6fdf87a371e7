"""The client: connect and retry, reply checking, serialized calls, forwarders (DESIGN 3)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from wire_helpers import TIMEOUT, Probe, build_env, frame, until

from _support.daemons import echo_back
from proctor import (
    ChannelClosed,
    ConnectError,
    ConnectionLost,
    ConnectTimeout,
    ProtocolError,
    RemoteError,
    TaskCancelled,
)
from proctor._urls import http_unix_url, unix_path
from proctor.channel import EnvServer, connect
from proctor.channel._client import EnvClient
from proctor.env import Capability


@pytest.fixture(params=["tcp", "memory"])
async def target(request, server: EnvServer) -> str | EnvServer:
    """The same server reached over loopback TCP and over the in-memory transport."""
    if request.param == "memory":
        return server
    host, port = await server.tcp_address()
    return f"tcp://{host}:{port}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def echo_through(url: str, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(*urlsplit(url).netloc.rsplit(":", 1))
    writer.write(payload)
    writer.write_eof()
    try:
        return await asyncio.wait_for(reader.read(), TIMEOUT)
    finally:
        writer.close()


# --- a full rollout over both transports -------------------------------------------------------


async def test_hello_start_grade(target, echo) -> None:
    async with connect(target, ready_timeout=2) as client:
        manifest = client.manifest
        assert manifest is not None and manifest.session_id.startswith("sess-")
        assert (manifest.env_name, manifest.env_version) == ("wire-test", "1.2.3")
        assert [b.name for b in manifest.bindings] == ["echo"]
        assert manifest.bindings[0].url == f"tcp://{echo[0]}:{echo[1]}"
        assert {t["id"] for t in await client.list_tasks()} >= {"greet", "count"}
        assert await client.start_task("greet", {"name": "ada"}) == {"prompt": "hello ada"}
        assert await client.grade("ada") == {"score": 1.0}


async def test_remote_errors_carry_code_and_message(target) -> None:
    async with connect(target) as client:
        with pytest.raises(RemoteError) as info:
            await client.start_task("nope")
        assert (info.value.code, info.value.message) == (-32602, "tasks.start: unknown task 'nope'")
        with pytest.raises(RemoteError) as info:
            await client.call("no.such", {})
        assert info.value.code == -32601
        assert await client.cancel() is False  # still usable


async def test_calls_are_serialized(target, probe) -> None:
    async with connect(target) as client:
        start = asyncio.create_task(client.start_task("slow_start"))
        await asyncio.wait_for(probe.entered.wait(), TIMEOUT)
        listing = asyncio.create_task(client.list_tasks())  # waits its turn, never "busy"
        await asyncio.sleep(0.01)
        assert not listing.done()
        probe.gate.set()
        assert await start == {"prompt": "finally started"}
        assert len(await listing) > 3


async def test_cancel_overtakes_a_running_start(target, probe) -> None:
    async with connect(target) as client:
        start = asyncio.create_task(client.start_task("slow_start"))
        await asyncio.wait_for(probe.entered.wait(), TIMEOUT)
        assert await client.cancel() is True
        with pytest.raises(TaskCancelled, match=r"tasks\.cancel interrupted the task"):
            await start
        assert probe.finals == ["slow"]
        assert await client.start_task("greet") == {"prompt": "hello world"}


async def test_a_call_abandoned_by_its_caller_does_not_break_the_client(target, probe) -> None:
    async with connect(target) as client:
        start = asyncio.create_task(client.start_task("slow_start"))
        await asyncio.wait_for(probe.entered.wait(), TIMEOUT)
        start.cancel()
        with pytest.raises(asyncio.CancelledError):
            await start
        assert await client.cancel() is True  # its late reply is dropped quietly
        assert await client.cancel() is False


async def test_bye_closes_the_session(target, probe) -> None:
    async with connect(target) as client:
        await client.start_task("guarded", {"tag": "bye"})
        await client.bye()
        assert probe.finals == ["bye"]
        with pytest.raises(ConnectionLost):
            for _ in range(100):  # the close arrives right after the reply
                await client.list_tasks()
                await asyncio.sleep(0.01)


async def test_a_closed_client_refuses_calls(target) -> None:
    async with connect(target) as client:
        pass
    with pytest.raises(ChannelClosed):
        await client.list_tasks()
    await client.aclose()  # idempotent


async def test_connect_resumes_a_parked_session(target, server, probe) -> None:
    async with connect(target) as client:
        assert client.manifest is not None
        sid, secret = client.manifest.session_id, client.manifest.resume_token
        await client.start_task("guarded", {"tag": "resumed"})
    await until(lambda: sid in server._parked)
    async with connect(target, session_id=sid, resume_token=secret) as client:
        assert client.manifest is not None and client.manifest.session_id == sid
        assert await client.grade(None) == {"score": 1.0}
    assert probe.finals == ["resumed"]


async def test_connect_to_an_unknown_session_is_a_remote_error(target) -> None:
    with pytest.raises(RemoteError, match="unknown session sess-0"):
        async with connect(target, session_id="sess-0"):
            pass


# --- connecting ----------------------------------------------------------------------------------


async def test_connect_retries_until_the_server_appears(env) -> None:
    port = free_port()
    server = EnvServer(env)

    async def late_listen() -> None:
        await asyncio.sleep(0.2)
        await server.listen("127.0.0.1", port)

    later = asyncio.create_task(late_listen())
    try:
        async with connect(f"tcp://127.0.0.1:{port}", ready_timeout=5) as client:
            assert await client.cancel() is False
    finally:
        await later
        await server.aclose()


async def test_connect_times_out_when_nothing_listens() -> None:
    began = time.monotonic()
    with pytest.raises(ConnectTimeout, match=r"not ready after 0\.2s"):
        async with connect(f"tcp://127.0.0.1:{free_port()}", ready_timeout=0.2):
            pass
    assert time.monotonic() - began < 1.0


HELLO = (
    b'{"jsonrpc":"2.0","id":1,"result":{"session_id":"sess-1",'
    b'"env":{"name":"f","version":"0"},"bindings":[]}}\n'
)


async def test_connect_times_out_when_the_server_never_answers(fake) -> None:
    url = await fake(lambda line: None)
    began = time.monotonic()
    async with asyncio.timeout(TIMEOUT):  # a hang is the failure to catch here
        with pytest.raises(ConnectTimeout):
            async with connect(url, ready_timeout=0.3):
                pass
    assert time.monotonic() - began < 2.0


@pytest.mark.parametrize("rid", [b"true", b'"2"', b"[2]", b"{}", b"2.5"])
async def test_a_reply_id_of_another_type_is_a_protocol_error(fake, rid: bytes) -> None:
    url = await fake(lambda line: HELLO if b'"hello"' in line else HELLO.replace(b"1", rid, 1))
    async with connect(url) as client:
        with pytest.raises(ProtocolError, match="matches no request"):
            await client.list_tasks()


async def test_a_reply_with_the_wrong_id_is_a_protocol_error(fake) -> None:
    url = await fake(
        lambda line: HELLO if b'"hello"' in line else HELLO.replace(b'"id":1', b'"id":99')
    )
    async with connect(url) as client:
        with pytest.raises(ProtocolError, match="reply id 99 matches no request"):
            await client.list_tasks()
        with pytest.raises(ConnectionLost):  # the client closed the connection
            await client.list_tasks()


@pytest.mark.parametrize(
    "bad",
    [
        b"not json\n",
        b"[1]\n",
        b'{"jsonrpc":"2.0","id":2}\n',
        b'{"jsonrpc":"2.0","id":2,"error":5}\n',
    ],
)
async def test_malformed_replies_are_protocol_errors(fake, bad: bytes) -> None:
    url = await fake(lambda line: HELLO if b'"hello"' in line else bad)
    async with connect(url) as client:
        with pytest.raises(ProtocolError):
            await client.list_tasks()


async def test_a_server_dropping_mid_call_is_connection_lost(target, server, probe) -> None:
    async with connect(target) as client:
        start = asyncio.create_task(client.start_task("slow_start"))
        await asyncio.wait_for(probe.entered.wait(), TIMEOUT)
        await server.aclose()
        with pytest.raises(ConnectionLost):
            await start


async def test_unusable_urls() -> None:
    with pytest.raises(ConnectError, match="unsupported scheme"):
        async with connect("http://127.0.0.1:1"):
            pass
    with pytest.raises(ConnectError, match="names no host:port"):
        async with connect("tcp://127.0.0.1"):
            pass


async def test_token_is_sent_on_the_first_frame(env) -> None:
    server = EnvServer(env, token="tok")
    host, port = await server.listen("127.0.0.1", 0)
    try:
        async with connect(f"tcp://{host}:{port}", token="tok") as client:
            assert await client.cancel() is False
        async with connect(server, token="tok") as client:
            assert await client.cancel() is False
        with pytest.raises(RemoteError, match="unauthorized"):
            async with connect(f"tcp://{host}:{port}", token="bad"):
                pass
    finally:
        await server.aclose()


# --- capability forwarders ------------------------------------------------------------------------


async def test_binding_opens_a_forwarder_lazily(target) -> None:
    async with connect(target) as client:
        assert client._forwarders == {}
        routed = client.binding("echo")
        assert routed.name == "echo" and routed.params == {"x": 1}
        parts = urlsplit(routed.url)
        assert (parts.scheme, parts.hostname) == ("tcp", "127.0.0.1")
        assert client.binding("echo") is routed
        assert await echo_through(routed.url, b"through the tunnel") == b"through the tunnel"
        payload = bytes(range(256)) * 4096
        assert await echo_through(routed.url, payload) == payload


def listening_ports() -> set[int]:
    """Loopback ports this process listens on (Linux /proc), whoever else runs."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:["):
                mine.add(link[8:-1])
    ports = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in mine:  # LISTEN, and ours
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")
async def test_no_listener_before_first_use(target) -> None:
    before = listening_ports()
    async with connect(target) as client:
        assert listening_ports() == before  # connect and hello open no forwarder
        routed = client.binding("echo")
        port = urlsplit(routed.url).port
        assert listening_ports() == before | {port}
        client.binding("echo")
        assert listening_ports() == before | {port}  # one forwarder per binding
        assert await echo_through(routed.url, b"x") == b"x"
    assert listening_ports() == before  # closed with the client


async def test_unknown_bindings(target) -> None:
    async with connect(target) as client:
        with pytest.raises(KeyError, match="no binding 'nope' \\(have: echo\\)"):
            client.binding("nope")
    bare = EnvClient(lambda factory: asyncio.sleep(0), "memory://x")  # type: ignore[arg-type,return-value]
    with pytest.raises(KeyError, match="call hello"):
        bare.binding("echo")


async def test_aclose_closes_open_tunnels(target, server) -> None:
    async with connect(target) as client:
        routed = client.binding("echo")
        reader, writer = await asyncio.open_connection(*urlsplit(routed.url).netloc.rsplit(":", 1))
        writer.write(b"ping")
        assert await asyncio.wait_for(reader.readexactly(4), TIMEOUT) == b"ping"
    assert await asyncio.wait_for(reader.read(), TIMEOUT) == b""  # closed with the client
    writer.close()


async def test_a_refused_tunnel_closes_the_local_connection(target, server) -> None:
    async with connect(target) as client:
        routed = client.route(Capability("ghost", "tcp", "tcp://127.0.0.1:9"))
        assert await echo_through(routed.url, b"x") == b""


@pytest.mark.parametrize("reply", [b"5\n", b"not json\n", b'"result"\n', b'{"error":{}}\n'])
async def test_a_garbled_tunnel_reply_closes_the_local_connection(fake, reply: bytes) -> None:
    hello = HELLO.replace(
        b'"bindings":[]', b'"bindings":[{"name":"b","protocol":"tcp","url":"tcp://10.0.0.1:22"}]'
    )
    url = await fake(lambda line: hello if b'"hello"' in line else reply)
    async with connect(url) as client:
        routed = client.binding("b")
        assert await echo_through(routed.url, b"x") == b""


async def test_no_forwarder_after_close(target) -> None:
    async with connect(target) as client:
        client.binding("echo")
    with pytest.raises(ChannelClosed):
        client.binding("echo")
    with pytest.raises(ChannelClosed):
        client.route(Capability("other", "tcp", "tcp://127.0.0.1:9"))


async def test_route_accepts_a_url_without_scheme(target) -> None:
    async with connect(target) as client:
        routed = client.route(Capability("echo", "tcp", "localhost:2222"))
        parts = urlsplit(routed.url)
        assert (parts.scheme, parts.hostname, parts.path) == ("tcp", "127.0.0.1", "")
        assert await echo_through(routed.url, b"bare") == b"bare"


@pytest.mark.parametrize(
    ("method", "result"),
    [
        ("hello", b"5"),
        ("hello", b"{}"),
        ("hello", b'{"session_id":"s","bindings":[{"name":"no-url"}]}'),
        ("hello", b'{"session_id":"s","env":[]}'),
        ("tasks.list", b'{"tasks":5}'),
        ("tasks.list", b"[]"),
        ("tasks.start", b'"prompt"'),
        ("tasks.grade", b"0.5"),
    ],
)
async def test_malformed_results_are_protocol_errors(fake, method: str, result: bytes) -> None:
    def reply(line: bytes) -> bytes:
        rid = json.loads(line)["id"]
        if f'"{method}"'.encode() in line:
            return b'{"jsonrpc":"2.0","id":%d,"result":%s}\n' % (rid, result)
        return HELLO.replace(b'"id":1', b'"id":%d' % rid)

    url = await fake(reply)
    with pytest.raises(ProtocolError):
        async with connect(url) as client:
            await client.call("tasks.cancel", {})  # the fake's hello answer does for this
            await {"tasks.list": client.list_tasks, "tasks.start": lambda: client.start_task("t"),
                   "tasks.grade": client.grade, "hello": client.list_tasks}[method]()  # fmt: skip


@pytest.mark.parametrize(
    "message", ["tasks.cancel interrupted the task", "bye interrupted the task"]
)
async def test_interruptions_are_task_cancelled_whoever_says_them(fake, message: str) -> None:
    def reply(line: bytes) -> bytes:
        rid = json.loads(line)["id"]
        if b'"hello"' in line:
            return HELLO
        return frame({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": message}})

    async with connect(await fake(reply)) as client:
        with pytest.raises(TaskCancelled):
            await client.start_task("t")


async def test_a_unix_capability_is_forwarded_on_a_private_unix_socket(tmp_path) -> None:
    path = str(tmp_path / "echo.sock")
    daemon = await asyncio.start_unix_server(echo_back, path)
    caps = [
        Capability("raw", "echo/1", f"unix://{path}"),
        Capability("web", "http", http_unix_url(path, "/mcp?x=1")),
    ]
    server = EnvServer(build_env(Probe(), caps))
    try:
        async with connect(server) as client:
            raw, web = client.binding("raw"), client.binding("web")
            assert raw.url.startswith("unix:///") and web.url.startswith("http+unix://%2F")
            assert web.url.endswith("/mcp?x=1")
            sockets = [Path(str(unix_path(raw.url))), Path(str(unix_path(web.url)))]
            assert Path(path) not in sockets
            directory = sockets[0].parent
            assert sockets[1].parent == directory
            assert directory.stat().st_mode & 0o777 == 0o700
            for sock in sockets:
                reader, writer = await asyncio.open_unix_connection(sock)
                writer.write(b"through a unix tunnel")
                writer.write_eof()
                assert await asyncio.wait_for(reader.read(), TIMEOUT) == b"through a unix tunnel"
                writer.close()
        assert not directory.exists()  # removed with the client
    finally:
        await server.aclose()
        daemon.close()
        await daemon.wait_closed()
