"""The runtimes' process toolkit: child output, stop, and the warm request on the wire."""

from __future__ import annotations

import json
import logging
import socket
import sys

import pytest

from proctor import RuntimeLaunchError
from proctor.runtimes._process import MAX_LINE, TAIL_LINE, TAIL_LINES, Child, parse_report
from proctor.runtimes._warm import request

log = logging.getLogger("proctor.tests.process")
HUGE = MAX_LINE * 8  # more than one read from the pipe, with no newline


class Recorder(Child):
    """A child whose lines are recorded instead of logged."""

    def __init__(self) -> None:
        super().__init__("recorder", log, None)
        self.lines: list[tuple[int, bytes]] = []

    def line(self, fd: int, line: bytes) -> None:
        self.lines.append((fd, line))
        super().line(fd, line)


async def test_output_comes_in_lines_and_a_huge_line_in_pieces() -> None:
    child = Recorder()
    code = (
        "import sys; sys.stdout.write('a\\nb'); sys.stdout.flush();"
        f" sys.stdout.write('c\\n' + 'x' * {HUGE}); sys.stderr.write('tail')"
    )
    await child.spawn([sys.executable, "-c", code])
    await child.exited.wait()
    await child.stop(1)
    out = [line for fd, line in child.lines if fd == 1]
    assert out[:2] == [b"a", b"bc"]
    assert b"".join(out[2:]) == b"x" * HUGE and len(out) > 3  # in pieces, none lost
    assert (2, b"tail") in child.lines  # the unterminated last line, at EOF


async def test_the_tail_keeps_the_last_lines_cut_short() -> None:
    child = Recorder()
    code = f"import sys; [print(str(i) * {TAIL_LINE + 10}, file=sys.stderr) for i in range(30)]"
    await child.spawn([sys.executable, "-c", code])
    await child.exited.wait()
    error = await child.died()
    await child.stop(1)
    kept = list(child.tail.lines)
    assert len(kept) == TAIL_LINES and kept[-1] == (b"29" * TAIL_LINE)[:TAIL_LINE]
    assert str(error).startswith("recorder: exited with code 0 before it was ready")


async def test_a_failed_shutdown_report_is_heard_on_stderr() -> None:
    child = Recorder()
    code = "import sys; print('PROCTOR_TEARDOWN_ERROR=42 ValueError: boom', file=sys.stderr)"
    await child.spawn([sys.executable, "-c", code])
    await child.exited.wait()
    await child.stop(1)
    assert child.teardown_error == "ValueError: boom"
    assert parse_report(b"PROCTOR_TEARDOWN_ERROR=x why") == (-1, "why")


async def test_a_missing_program_is_a_launch_error() -> None:
    with pytest.raises(RuntimeLaunchError, match="recorder: cannot start /no/such/program"):
        await Recorder().spawn(["/no/such/program"])


async def test_a_warm_request_carries_the_channel_but_not_the_token() -> None:
    ours, zygotes = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, zygotes:
        child = request(ours, {"name": "r1"}, str, logger=log)
        data, fds, _, _ = socket.recv_fds(zygotes, 65536, 1)
        [fd] = fds
        with socket.socket(fileno=fd) as channel:
            assert json.loads(data) == {"name": "r1"}
            assert child.token not in data.decode()
            assert json.loads(channel.recv(4096)) == {"token": child.token}
            channel.close()
        with pytest.raises(RuntimeLaunchError, match="the zygote exited before it forked"):
            await child.ready(5)  # the channel closed with no pid: nothing was forked
        await child.stop(1)
