"""Running the two sides of `bench/rollouts.py`: each section of a side in a fresh
interpreter, the environments they get, and the import-time probe."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

_PROBE = """\
import time
t0 = time.perf_counter()
{stmt}
t1 = time.perf_counter()
import json, sys
rss = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:"))
print(json.dumps({{"import_ms": (t1 - t0) * 1e3, "rss_kb": rss, "modules": len(sys.modules)}}))
"""


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# -- running the sides ---------------------------------------------------------------

SECTIONS = ("inproc", "subproc", "warm:asyncio", "warm:uvloop", "newconn:asyncio", "newconn:uvloop")
# proctor's warm pool (SubprocessRuntime(warm=True)) has no HUD twin
PROCTOR_SECTIONS = ("inproc", "subproc", "warmpool", *SECTIONS[2:])


def child_environ() -> tuple[dict[str, str], str | None]:
    """The environment every measured interpreter gets, and a note on bytecode caching.

    With PYTHONDONTWRITEBYTECODE set (this sandbox sets it), nothing without a
    `__pycache__` of its own, such as proctor's editable `src/`, is ever cached, so each
    fresh interpreter would recompile it: import time and cold spawns would measure the
    compiler, not what an installed wheel costs. Then the children write and read their
    bytecode under a private PYTHONPYCACHEPREFIX instead (nothing lands in the repo).
    """
    env = dict(os.environ)
    if not env.get("PYTHONDONTWRITEBYTECODE") or env.get("PYTHONPYCACHEPREFIX"):
        return env, None
    del env["PYTHONDONTWRITEBYTECODE"]
    prefix = Path(tempfile.gettempdir()) / "proctor-bench-pycache"
    env["PYTHONPYCACHEPREFIX"] = str(prefix)
    note = (
        f"PYTHONDONTWRITEBYTECODE is set here, so measured interpreters cache bytecode under "
        f"PYTHONPYCACHEPREFIX={prefix} instead (else proctor's editable src recompiles on "
        "every start); the first run ever fills it."
    )
    return env, note


def hud_environ(base: dict[str, str], tmp: Path) -> dict[str, str]:
    """`base` minus every HUD_* variable, plus the network-safe settings."""
    env = {k: v for k, v in base.items() if not k.startswith("HUD_")}
    home, spans = tmp / "home", tmp / "spans"
    home.mkdir(exist_ok=True)
    spans.mkdir(exist_ok=True)
    env.update(
        HOME=str(home),
        HUD_TELEMETRY_ENABLED="false",
        HUD_CLI_ANALYTICS_ENABLED="false",
        HUD_SKIP_VERSION_CHECK="1",
        HUD_TELEMETRY_LOCAL_DIR=str(spans),
        PROCTOR_BENCH_SCRUBBED="1",
    )
    for name in ("TELEMETRY", "API", "WEB", "GATEWAY", "RUNTIME", "RL"):
        env[f"HUD_{name}_URL"] = "http://127.0.0.1:9"
    return env


def run_side(
    python: str,
    script: str,
    params: dict[str, dict[str, Any]],
    tmp: Path,
    env: dict[str, str],
    timeout: float,
    sections: tuple[str, ...] = SECTIONS,
) -> dict[str, Any]:
    """Run every section of one side, each in a fresh interpreter; collect the results."""
    results: dict[str, Any] = {"sections": {}}
    for section in sections:
        out, err = tmp / f"{script}.{section}.json", tmp / f"{script}.{section}.stderr"
        argv = [python, str(BENCH / script), "--section", section, "--out", str(out)]
        argv += ["--params", json.dumps(params[section.partition(":")[0]])]
        t0 = time.perf_counter()
        try:
            with open(err, "wb") as stderr:
                # stdout too: HUD's subprocess runtime forwards its children's output
                proc = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=stderr,
                    stderr=stderr,
                    env=env,
                    cwd=tmp,
                    timeout=timeout,
                )
            rc: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            rc = f"timed out after {timeout:g}s"
        except OSError as exc:
            return {"error": f"cannot run {python}: {exc}"}
        got = json.loads(out.read_text()) if out.exists() else {}
        sec = got.get("section") or {"error": f"exited {rc} without results"}
        results["framework"] = got.get("framework") or results.get("framework")
        results["sections"][section] = sec
        failed = "error" in sec or sec.get("complete") is False
        log(
            f"  {script} {section}: {time.perf_counter() - t0:.1f} s"
            + (" FAILED" if failed else "")
        )
        if failed or rc != 0:
            tail = err.read_bytes().decode(errors="replace").strip().splitlines()[-15:]
            for line in tail:
                print(f"    {line}", file=sys.stderr)
    return results


def measure_imports(
    python: str, stmt: str, runs: int, warmup: int, env: dict[str, str], cwd: Path
) -> dict[str, Any]:
    """Median in-process import time, process wall and RSS over fresh interpreters."""
    imports, walls, rss, modules = [], [], [], 0
    for i in range(warmup + runs):
        t0 = time.perf_counter()
        proc = subprocess.run(
            [python, "-c", _PROBE.format(stmt=stmt)],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=120,
        )
        wall = (time.perf_counter() - t0) * 1e3
        if proc.returncode != 0:
            return {"error": proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]}
        if i < warmup:
            continue
        walls.append(wall)
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        imports.append(row["import_ms"])
        rss.append(row["rss_kb"])
        modules = row["modules"]
    return {
        "runs": runs,
        "import_ms": statistics.median(imports),
        "import_ms_all": imports,
        "wall_ms": statistics.median(walls),
        "rss_mib": statistics.median(rss) / 1024,
        "modules": modules,
    }


def peers_usable(python: str | None) -> tuple[bool, str]:
    if not python:
        return False, "no --peers-python given"
    if not Path(python).exists():
        return False, f"{python} does not exist (run `make peers`)"
    return True, python
