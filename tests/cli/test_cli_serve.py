"""`proctor serve`, `proctor --help` and what the bare command costs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from cli_helpers import LETTERS, REPO, assert_user_error, proctor, serve, write

from proctor.channel import connect


async def test_serve_prints_the_port_answers_a_client_and_exits_on_sigterm() -> None:
    server = serve(LETTERS / "env.py")
    try:
        assert server.first_line == f"PROCTOR_SERVE_PORT={server.port}\n"
        async with connect(server.url, ready_timeout=5) as client:
            assert client.manifest is not None and client.manifest.env_name == "letters"
            ids = [t["id"] for t in await client.list_tasks()]
            assert ids == ["count", "reverse", "sum"]
            started = await client.start_task("reverse", {"word": "abc"})
            assert "'abc'" in started["prompt"]
            assert (await client.grade("cba"))["score"] == 1.0
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert err == ""


def test_serve_json_describes_the_server_after_the_port_line() -> None:
    server = serve(LETTERS / "env.py", "--json")
    try:
        assert server.proc.stdout is not None
        info = json.loads(server.proc.stdout.readline())
    finally:
        code, err = server.stop()
    assert code == 0, err
    assert info == {"url": f"tcp://127.0.0.1:{server.port}", "host": "127.0.0.1",
                    "port": server.port, "env": "letters", "version": "0.1.0"}  # fmt: skip


def test_serve_accepts_path_colon_env() -> None:
    server = serve(f"{LETTERS / 'tasks.py'}:letters")
    code, err = server.stop()
    assert code == 0, err
    result = proctor("serve", f"{LETTERS / 'tasks.py'}:nope")
    assert_user_error(result, "no environment named 'nope'")


def test_serve_reports_a_port_in_use() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = proctor("serve", LETTERS / "env.py", "--port", str(port))
    assert_user_error(result, f"127.0.0.1:{port}", "address already in use")
    assert result.stdout == ""


def test_serve_reports_a_missing_file_and_a_bad_template(tmp_path: Path) -> None:
    assert_user_error(proctor("serve", tmp_path / "nope.py"), "nope.py: no such file")
    bad = write(
        tmp_path / "bad.py",
        """
        from proctor import Environment

        env = Environment("bad")

        @env.template
        def oops(x: int):
            return "not a generator"
        """,
    )
    assert_user_error(proctor("serve", bad), "bad.py:5", "TemplateError", "async generator")


def test_serve_refuses_a_public_address_without_a_token() -> None:
    assert_user_error(proctor("serve", LETTERS / "env.py", "--host", "0.0.0.0"), "token")
    result = proctor("serve", LETTERS / "env.py", "--token-env", "PROCTOR_TEST_UNSET_VAR")
    assert_user_error(result, "PROCTOR_TEST_UNSET_VAR")


def test_usage_errors_exit_2() -> None:
    result = proctor("serve", LETTERS / "env.py", "--port", "70000")
    assert result.returncode == 2
    assert "--port" in result.stderr and "Traceback" not in result.stderr
    assert proctor().returncode == 2


def test_help_is_cheap() -> None:
    result = proctor("--help")
    assert result.returncode == 0
    for command in ("serve", "task", "run"):
        assert command in result.stdout
    # The parser alone must not pull in the event loop, pydantic or the wire.
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, proctor.cli._main as m; m.build_parser(); "
            "print(sorted(n for n in ('asyncio', 'pydantic', 'proctor.channel', "
            "'proctor.engine') if n in sys.modules))",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert probe.stdout.strip() == "[]"


def test_console_script_and_version() -> None:
    from proctor import __version__

    script = Path(sys.executable).with_name("proctor")
    assert script.exists(), "the editable install should provide the proctor script"
    result = subprocess.run([script, "--version"], capture_output=True, text=True, check=True)
    assert result.stdout == f"proctor {__version__}\n"


def test_a_tokenless_server_with_capabilities_warns_and_a_tokened_one_does_not() -> None:
    # Review of issue 8: any local user could reach a tokenless loopback server's shell.
    source = REPO / "examples" / "shellfix" / "env.py"
    server = serve(source)
    code, err = server.stop()
    assert code == 0, err
    assert "warning: serving without a token" in err and "shell" in err
    assert "--token-env" in err
    proc = subprocess.Popen(
        [sys.executable, "-m", "proctor.cli", "serve", str(source), "--token-env", "SERVE_TOKEN"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "SERVE_TOKEN": "t0ken-for-this-test"},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("PROCTOR_SERVE_PORT=")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert "warning" not in err and "t0ken-for-this-test" not in err
