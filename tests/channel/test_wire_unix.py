"""The control channel over a Unix socket: `EnvServer.listen_unix`, `unix:///path` URLs."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from wire_helpers import TIMEOUT, Probe, build_env

from proctor import ConnectError, ConnectTimeout
from proctor._urls import http_unix_url, unix_path, with_unix_path
from proctor.channel import EnvServer, connect
from proctor.channel._client import dialer_for
from proctor.env import Capability
from proctor.testing import conformance_env


async def test_a_rollout_and_a_tunnel_over_a_unix_socket(
    server: EnvServer, tmp_path: Path, probe: Probe
) -> None:
    path = str(tmp_path / "ctl.sock")
    assert await server.listen_unix(path) == path
    async with connect(f"unix://{path}", ready_timeout=TIMEOUT) as client:
        assert client.url == f"unix://{path}"
        assert await client.start_task("greet", {"name": "sock"}) == {"prompt": "hello sock"}
        assert await client.grade("sock") == {"score": 1.0}
        # A capability is reached through the control connection, so over the socket too.
        host, port = client.binding("echo").url.removeprefix("tcp://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"through the unix socket")
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), TIMEOUT) == b"through the unix socket"
        writer.close()
    assert probe.answers == ["sock"]


async def test_aclose_removes_the_socket_file_and_a_stale_one_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "ctl.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))  # a socket file left behind by a server that died
    stale.close()
    server = EnvServer(build_env(Probe(), []))
    await server.listen_unix(str(path))
    async with connect(f"unix://{path}", ready_timeout=TIMEOUT) as client:
        assert client.manifest is not None and client.manifest.env_name == "wire-test"
    await server.aclose()
    assert not path.exists()
    with pytest.raises(ConnectTimeout):
        async with connect(f"unix://{path}", ready_timeout=0.05):
            pass


async def test_an_adopted_listening_socket_serves_and_is_not_unlinked(tmp_path: Path) -> None:
    path = tmp_path / "pre.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.listen()
    server = EnvServer(build_env(Probe(), []))
    assert await server.listen_unix(sock=sock) == str(path)
    async with connect(f"unix://{path}", ready_timeout=TIMEOUT) as client:
        assert await client.start_task("greet") == {"prompt": "hello world"}
    await server.aclose()
    assert stat.S_ISSOCK(path.stat().st_mode)  # its owner, not the server, removes it


async def test_listen_unix_takes_a_path_or_a_socket() -> None:
    server = EnvServer(build_env(Probe(), []))
    with pytest.raises(ValueError, match="a path or a listening socket"):
        await server.listen_unix()


@pytest.mark.parametrize(
    "url", ["unix://host/x.sock", "unix://relative.sock", "unix:///x.sock?mode=1"]
)
def test_a_unix_url_must_be_an_absolute_path(url: str) -> None:
    with pytest.raises(ConnectError, match=r"unix:///absolute/path"):
        dialer_for(url)


def test_the_scheme_error_names_both_schemes() -> None:
    with pytest.raises(ConnectError, match=r"tcp://host:port or unix:///path"):
        dialer_for("http://example.com:80")


def test_a_unix_socket_works_on_uvloop(tmp_path: Path) -> None:
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        server = EnvServer(build_env(Probe(), [Capability("none", "tcp", "tcp://127.0.0.1:9")]))
        path = await server.listen_unix(str(tmp_path / "uv.sock"))
        try:
            async with connect(f"unix://{path}", ready_timeout=TIMEOUT) as client:
                assert await client.start_task("greet", {"name": "uv"}) == {"prompt": "hello uv"}
                assert await client.grade("uv") == {"score": 1.0}
        finally:
            await server.aclose()

    uvloop.run(main())


async def test_proctor_serve_unix_announces_the_path_and_removes_it_on_sigterm(
    tmp_path: Path,
) -> None:
    path = tmp_path / "served.sock"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proctor.serve",
        conformance_env.SOURCE,
        "--unix",
        str(path),
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.decode().strip() == f"PROCTOR_SERVE_UNIX={path}"
        async with connect(f"unix://{path}", ready_timeout=TIMEOUT) as client:
            assert client.manifest is not None and client.manifest.env_name == "conformance"
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert not path.exists()


def test_run_server_json_names_the_unix_url(tmp_path: Path) -> None:
    path = tmp_path / "json.sock"
    code = (
        "import sys; from proctor.serve import run_server; "
        f"sys.exit(run_server({conformance_env.SOURCE!r}, None, '127.0.0.1', 0, None, "
        f"json_out=True, unix={str(path)!r}))"
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().decode().strip() == f"PROCTOR_SERVE_UNIX={path}"
            info = json.loads(proc.stdout.readline())
        finally:
            proc.terminate()
    assert info == {"url": f"unix://{path}", "path": str(path), "env": "conformance",
                    "version": conformance_env.env.version}  # fmt: skip


def test_serve_names_a_unix_path_it_cannot_bind(tmp_path: Path) -> None:
    path = tmp_path / "missing-dir" / "x.sock"
    done = subprocess.run(
        [sys.executable, "-m", "proctor.serve", conformance_env.SOURCE, "--unix", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert f"cannot listen on unix://{path}" in done.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("url", "socket_path"),
    [
        ("unix:///run/a b/shell.sock", "/run/a b/shell.sock"),
        (http_unix_url("/tmp/d/mcp.sock", "/mcp?x=1"), "/tmp/d/mcp.sock"),
        ("https+unix://%2Fs.sock", "/s.sock"),
        ("tcp://127.0.0.1:9", None),
        ("http://127.0.0.1:9/mcp", None),
    ],
)
def test_capability_urls_name_their_unix_socket(url: str, socket_path: str | None) -> None:
    assert unix_path(url) == socket_path
    if socket_path is not None:
        moved = with_unix_path(url, "/p/1.sock")
        assert unix_path(moved) == "/p/1.sock"
        assert moved.split("://")[0] == url.split("://")[0]  # the scheme stays
        assert moved.partition("%2F1.sock")[2] == url.partition(".sock")[2]  # so does the path


def test_unix_urls_need_an_absolute_path() -> None:
    with pytest.raises(ValueError, match="absolute"):
        unix_path("unix://relative.sock")
    with pytest.raises(ValueError, match="not a Unix socket URL"):
        with_unix_path("tcp://127.0.0.1:9", "/p.sock")
