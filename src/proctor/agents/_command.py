"""`CommandAgent`: a harness in any language, run per rollout in a bubblewrap jail."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from .._errors import RolloutError
from ._jail import HOME, Jail, Routes, private_folder
from ._placement import Placed, run_placed
from ._placement_needs import Needs

if TYPE_CHECKING:
    from ..agents._run import Run

__all__ = ["CommandAgent"]

# What a harness gets of the driver's environment, by name; nothing else passes.
_PASSED = frozenset({"PATH", "LANG", "LANGUAGE", "TERM", "TZ"})
_PASSED_PREFIX = "LC_"
_URL_VARS = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")
_TAIL = 4000
Placement = Literal["jail", "substrate"]


class CommandAgent:
    """Run `argv` once per rollout and take its standard output as the answer.

    The harness gets the prompt on stdin (text as is, anything else as JSON). Its
    environment is built from an allowlist, never from the driver's whole environment:

    - of the driver's variables only `PATH`, `LANG`, `LANGUAGE`, `LC_*`, `TERM`, `TZ`,
      and the names in `pass_env`;
    - `HOME` and `TMPDIR`: private folders, empty at each start;
    - `OPENAI_BASE_URL`, `OPENAI_API_KEY`, `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`:
      the run's interception-proxy session (`rollout(..., proxy=)`), so every model
      call it makes is recorded and budgeted; the key is a per-rollout secret (the
      driver's own keys never pass, whatever their name);
    - `PROCTOR_TASK_ID`, `PROCTOR_TRACE_ID`, and `PROCTOR_CAPABILITIES`: a JSON map of
      the environment's capabilities, each routed to a local URL through the run's
      connection;
    - `env`, applied last.

    A harness that exits non-zero because the proxy refused it a turn for a budget
    (`max_turns`, ...; mini-swe-agent does) has not crashed: what it printed is still
    its answer (None for `answer="json"` without JSON) and the run is graded.

    By default (`jail=True`) the harness runs in a bubblewrap jail where it cannot see
    the driver: its own pid, mount, network, IPC and UTS namespaces, as a fresh uid of
    its own when the driver is root (no account, no other process: `proctor._uids`;
    else an unprivileged user namespace: the driver's uid on the host), no
    capabilities, the system folders, its working directory, its program and `binds`
    read-only, `writable` read-write, a private tmpfs `HOME`
    (`/home/harness`) and `/tmp`. Its only network is its own loopback, where the
    proxy session's and the capabilities' ports are forwarded to the driver (their URLs
    unchanged; a Unix-socket capability is rewritten to a socket under `/run/proctor`).
    Anything readable by the jail user in the working directory is visible to it, so
    keep secrets (a `.env` file) out of it. Needs `bwrap` (`apt-get install
    bubblewrap`); without it every run fails saying so.

    Args:
        argv: the command (a list, or a string split on whitespace).
        cwd: its working directory (default: the driver's), bound read-only in the
            jail; not the driver's home folder or above it.
        env: extra variables, applied last.
        pass_env: names of more driver variables to pass through (when present).
        answer: `stdout` (stripped text) or `json` (stdout parsed as JSON).
        kill_grace: seconds between SIGTERM and SIGKILL when the rollout stops it.
        jail: run it in the jail; `False` runs it as a plain child process of the
            driver, which is unsafe: it can read the driver's environment and keys
            (`/proc/<driver>/environ`) and every file the driver can.
        binds: more host paths shown read-only in the jail, at the same path.
        writable: host folders shown read-write in the jail (the jail user, a fresh uid
            when the driver is root, must be allowed to write there: others-writable).
        tmpfs_size: bytes each of the jail's `HOME`, `/tmp` and `/dev/shm` may hold
            (they live in memory); None for no cap.
        placement: `jail` (the default: beside the substrate, as above) or `substrate`:
            inside the rollout's sandbox or container (`SandboxRuntime`,
            `ContainerRuntime`, `HarborRuntime`, `ComposeRuntime`'s `main`), as the
            environment server's user, in the task's working folder (or `cwd`, a path
            there), seeing its files and tools as they are. Its environment is then
            the substrate's `PATH`, `HOME`, `LANG`, `TERM`, `TZ`, the proxy session's
            variables (the URLs name a loopback port inside whose connections reach
            the proxy through the driver: docs/placement.md), the `PROCTOR_*` ones
            (capability URLs as served inside), `PROCTOR_HARNESS` (the folder
            `ship`ped files are in) and `env`; `binds`, `writable`, `tmpfs_size` and
            `jail` do not apply.
        ship: files of this machine copied into the substrate for each rollout (into
            `PROCTOR_HARNESS`); an `argv` item naming one (as given) is rewritten to
            its copy. Only with `placement="substrate"`, where an `argv` item
            `{python}` is the substrate's Python (the environment server's).
        needs: what the harness needs (`Needs`, or its fields as a mapping), checked by
            the batch plan against the task set and the runtime before launch.
    """

    def __init__(
        self,
        argv: Sequence[str] | str,
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        pass_env: Iterable[str] = (),
        answer: Literal["stdout", "json"] = "stdout",
        kill_grace: float = 2.0,
        jail: bool = True,
        binds: Iterable[str | os.PathLike[str]] = (),
        writable: Iterable[str | os.PathLike[str]] = (),
        tmpfs_size: int | None = 1 << 30,
        placement: Placement = "jail",
        ship: Iterable[str | os.PathLike[str]] = (),
        needs: Needs | Mapping[str, Any] | None = None,
    ) -> None:
        self.argv = argv.split() if isinstance(argv, str) else list(argv)
        if not self.argv:
            raise ValueError("CommandAgent needs a command")
        self.cwd = None if cwd is None else os.path.abspath(cwd)
        self.env = dict(env or {})
        self.pass_env = frozenset(pass_env)
        self.answer = answer
        self.kill_grace = kill_grace
        self.jail = jail
        self.binds = [Path(p).absolute() for p in binds]
        self.writable = [Path(p).absolute() for p in writable]
        self.tmpfs_size = tmpfs_size
        if placement not in ("jail", "substrate"):
            raise ValueError(f"placement must be 'jail' or 'substrate', not {placement!r}")
        self.placement: Placement = placement
        self.ship = [Path(p).absolute() for p in ship]
        if self.ship and placement != "substrate":
            raise ValueError(
                "ship= copies files into the substrate: only with placement='substrate'"
            )
        for path in self.ship:
            if not path.is_file():
                raise ValueError(f"ship: {path} is not a file")
        if len({p.name for p in self.ship}) != len(self.ship):
            raise ValueError("ship: two files of the same name")
        self.needs = needs if isinstance(needs, Needs) else Needs(**(needs or {}))
        shipped = {str(p): p for p in self.ship}
        self._placed_argv: list[str | Path] = [
            shipped.get(os.path.abspath(arg), arg) for arg in self.argv
        ]

    def __repr__(self) -> str:
        where = ", placement='substrate'" if self.placement == "substrate" else ""
        return f"CommandAgent({self.argv!r}{where})"

    def environ(self, run: Run) -> dict[str, str]:
        """The harness's environment for `run` (unjailed, `HOME` and `TMPDIR` are added
        at start)."""
        return self._environ(run)[0]

    def _environ(self, run: Run) -> tuple[dict[str, str], Routes]:
        routes = Routes()
        url = routes.url if self.jail else str
        env = {
            k: v
            for k, v in os.environ.items()
            if k in _PASSED or k.startswith(_PASSED_PREFIX) or k in self.pass_env
        }
        if self.jail:
            env.update(HOME=HOME, TMPDIR="/tmp")
        for key, value in run.model_env.items():
            env[key] = url(value) if key in _URL_VARS else value
        env["PROCTOR_TASK_ID"] = run.task.id
        env["PROCTOR_TRACE_ID"] = run.trace_id
        caps = {}
        if run.client is not None and run.client.manifest is not None:
            for cap in run.client.manifest.bindings:
                routed = run.binding(cap.name)
                caps[cap.name] = {
                    "protocol": routed.protocol,
                    "url": url(routed.url),
                    "params": routed.params,
                }
        env["PROCTOR_CAPABILITIES"] = orjson.dumps(caps).decode()
        env.update(self.env)
        return env, routes

    async def __call__(self, run: Run) -> None:
        prompt = run.prompt
        stdin = prompt.encode() if isinstance(prompt, str) else orjson.dumps(prompt)
        self._check_needs(run)
        t0 = time.time()
        if self.placement == "substrate":
            code, out, err = await self._placed(run, stdin)
            self._finish(run, t0, code, out, err)
            return
        env, routes = self._environ(run)
        if self.jail:
            code, out, err = await self._jailed(env, routes, stdin)
        else:
            code, out, err = await self._unjailed(env, stdin)
        self._finish(run, t0, code, out, err)

    def _finish(self, run: Run, t0: float, code: int | None, out: bytes, err: bytes) -> None:
        stderr = err.decode("utf-8", "replace")[-_TAIL:]
        refused = None if run.proxy_session is None else run.proxy_session.stop_reason
        if code != 0 and refused is not None:  # stopped by a budget: graded on its output
            value = self._parse(out, strict=False)
            run.trace.content = value
            run.trace.add(
                "assistant", value, start=t0, exit_code=code, stderr=stderr, stop_reason=refused
            )
            return
        if code != 0:
            run.trace.add("assistant", None, start=t0, exit_code=code, stderr=stderr)
            if stderr.startswith("bwrap:"):
                raise RolloutError(
                    f"the harness's jail could not start: {stderr.strip()} (CommandAgent(..., "
                    "jail=False) runs it unjailed, unsafely)"
                )
            raise RolloutError(f"{self.argv[0]} exited with {code}: {stderr.strip()}")
        value = self._parse(out, strict=True)
        run.trace.content = value
        run.trace.add("assistant", value, start=t0, exit_code=0, stderr=stderr)

    def _check_needs(self, run: Run) -> None:
        """The capabilities the harness needs, against those the environment declared.

        Raises:
            RolloutError: one is missing (named, with those there are).
        """
        if not self.needs.capabilities or run.client is None or run.client.manifest is None:
            return
        declared = sorted(cap.name for cap in run.client.manifest.bindings)
        missing = sorted(set(self.needs.capabilities) - set(declared))
        if missing:
            raise RolloutError(
                f"the harness needs capabilities {', '.join(missing)}; the environment "
                f"declares {', '.join(declared) or 'none'}"
            )

    async def _placed(self, run: Run, stdin: bytes) -> tuple[int | None, bytes, bytes]:
        entry = run.substrate
        if entry is None:
            raise RolloutError(
                "CommandAgent(placement='substrate'): this runtime cannot host a harness "
                "(SandboxRuntime without warm, ContainerRuntime, HarborRuntime and "
                "ComposeRuntime can); "
                "use placement='jail'"
            )
        model = run.model_env
        urls = {k: v for k, v in model.items() if k in _URL_VARS}
        env = {k: v for k, v in os.environ.items() if k in self.pass_env}
        env.update({k: v for k, v in model.items() if k not in _URL_VARS})
        env["PROCTOR_TASK_ID"] = run.task.id
        env["PROCTOR_TRACE_ID"] = run.trace_id
        caps = {}
        if run.client is not None and run.client.manifest is not None:
            for cap in run.client.manifest.bindings:  # as served inside the substrate
                params = run.binding(cap.name).params
                caps[cap.name] = {"protocol": cap.protocol, "url": cap.url, "params": params}
        env["PROCTOR_CAPABILITIES"] = orjson.dumps(caps).decode()
        env.update(self.env)
        placed = Placed(
            self._placed_argv, env, urls, cwd=self.cwd, stdin=stdin, grace=self.kill_grace
        )
        code, out, err = await run_placed(entry, placed)
        if code is None:  # the entry command failed, or the init was killed
            said = err.decode("utf-8", "replace").strip()[-_TAIL:] or "no output"
            raise RolloutError(f"the harness in the {entry.kind} gave no exit status: {said}")
        return code, out, err

    def _parse(self, out: bytes, *, strict: bool) -> object:
        """The answer in `out`: its stripped text, or its JSON (None for no JSON when not
        `strict`: a harness stopped by a budget may have printed nothing)."""
        if self.answer != "json":
            return out.decode("utf-8", "replace").strip()
        try:
            return orjson.loads(out)
        except orjson.JSONDecodeError as exc:
            if not strict:
                return None
            raise RolloutError(f"{self.argv[0]} printed no JSON answer: {exc}") from None

    async def _jailed(
        self, env: dict[str, str], routes: Routes, stdin: bytes
    ) -> tuple[int | None, bytes, bytes]:
        jail = Jail(
            self.argv,
            env,
            cwd=self.cwd or os.getcwd(),
            binds=self.binds,
            writable=self.writable,
            routes=routes,
            tmpfs_size=self.tmpfs_size,
        )
        async with jail:
            proc = await asyncio.create_subprocess_exec(
                *jail.command(),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={},
                pass_fds=jail.fds,
                start_new_session=True,
            )
            jail.started()
            try:
                out, err = await proc.communicate(stdin)
            except BaseException:
                await self._stop(proc, jail)
                raise
        return proc.returncode, out, err  # the jail's pid namespace ended with it

    async def _unjailed(self, env: dict[str, str], stdin: bytes) -> tuple[int | None, bytes, bytes]:
        home = private_folder("harness")
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self.cwd,
                env={"HOME": home, "TMPDIR": home, **env},
                start_new_session=True,
            )
            try:
                out, err = await proc.communicate(stdin)
            except BaseException:
                await self._kill(proc)
                raise
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever it left running
        finally:
            shutil.rmtree(home, ignore_errors=True)
        return proc.returncode, out, err

    async def _stop(self, proc: asyncio.subprocess.Process, jail: Jail) -> None:
        """SIGTERM to the harness (its lifeline closes), SIGKILL to the jail after the grace."""
        jail.hang_up()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), self.kill_grace)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()  # bwrap: --die-with-parent takes the whole jail with it
        await proc.wait()

    async def _kill(self, proc: asyncio.subprocess.Process) -> None:
        """Stop the harness and everything it started (its own process group)."""
        for sig, wait in ((signal.SIGTERM, self.kill_grace), (signal.SIGKILL, None)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), wait)
                return
            except TimeoutError:
                continue
