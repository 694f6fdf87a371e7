"""Plan check 5: can the substrates of one wave (`min(enabled, max_concurrent)`) start?

Read-only: it looks up executables, asks the container engine whether images exist,
and asks a Ray cluster (from a child process, so this one never joins it) what it
has free. On this machine it compares one wave's estimated memory with what is
available, and the cores containers reserve with the cores this process may use.

Memory one rollout adds on this machine, by where its environment runs (rough
resident sizes on CPython 3.11): local 1 MiB (a session in this process),
subprocess or sandbox 40 MiB cold and 12 MiB forked warm (an interpreter that
imported proctor), container 64 MiB or its `resources.memory`, ray and url nothing
(the environment lives elsewhere); plus its agent: 1 MiB for an agent loop in this
process, 32 MiB for a harness command's process.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from ._config import (
    BatchConfig,
    CommandAgentEntry,
    ContainerRuntimeConfig,
    RayExecutorConfig,
    RayRuntimeConfig,
    SandboxRuntimeConfig,
    SubprocessRuntimeConfig,
)
from ._lease import lease_of

__all__ = ["check_substrate", "rollout_memory"]

MiB = 1024 * 1024
RAY_TIMEOUT = 60.0
REACH_TIMEOUT = 5.0
ENGINE_TIMEOUT = 30.0
# compose: two services, and a `podman wait` client watching each (about 34 MB apiece)
_ENV_MEMORY = {"local": 1 * MiB, "container": 64 * MiB, "compose": 200 * MiB, "ray": 0, "url": 0}
_COLD, _WARM = 40 * MiB, 12 * MiB
_HARNESS, _LOOP = 32 * MiB, 1 * MiB

_RAY_PROBE = """
import json, sys
try:
    import ray
except ImportError:
    print(json.dumps({"error": "Ray is not installed; pip install 'proctor[ray]'"}))
    sys.exit(0)
try:
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
except Exception as exc:
    print(json.dumps({"error": f"cannot connect to Ray at {sys.argv[1]}: {exc}"}))
    sys.exit(0)
nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
print(json.dumps({"available": ray.available_resources(), "nodes": nodes}))
ray.shutdown()
"""

Problems = list[str]


async def check_substrate(
    config: BatchConfig, rows: list[dict[str, Any]], enabled: int
) -> tuple[list[str], dict[str, Any]]:
    """Every problem found for a wave of these rows, and what was measured."""
    wave = min(enabled, config.max_concurrent)
    problems: Problems = []
    details: dict[str, Any] = {"runtime": config.runtime.kind, "wave": wave}
    details["host"] = _host(config, rows, wave, problems)
    grace, why = lease_of(config)
    details["lease"] = {"seconds": grace, "why": why}
    rt = config.runtime
    if isinstance(rt, SandboxRuntimeConfig) and shutil.which(rt.bwrap) is None:
        problems.append(
            f"{rt.bwrap} not found on PATH: install bubblewrap (apt-get install bubblewrap)"
        )
    if isinstance(rt, SandboxRuntimeConfig):
        _sandbox_can_read(config, problems)
    python = getattr(rt, "python", None)
    if python and shutil.which(python) is None:
        problems.append(f"python {python!r}: not found")
    if isinstance(rt, ContainerRuntimeConfig):
        details["images"] = await _images(rt, rows, problems)
    if isinstance(rt, RayRuntimeConfig) or isinstance(config.executor, RayExecutorConfig):
        details["ray"] = await _ray(config, rows, wave, problems)
    return problems, details


def _sandbox_can_read(config: BatchConfig, problems: Problems) -> None:
    """As root, a sandbox runs as a uid of its own: the environment source must be open
    to others (the runtime's own rule, checked here before anything launches)."""
    from .._errors import RuntimeLaunchError
    from ..runtimes._sandbox_host import _readable_by_others

    source = config.env_source()
    if os.geteuid() != 0 or source is None or not os.path.exists(source):
        return
    try:
        _readable_by_others(Path(source))
    except RuntimeLaunchError as exc:
        problems.append(f"sandbox: {exc}, or choose runtime 'subprocess'")


# -- this machine -----------------------------------------------------------------------


def rollout_memory(config: BatchConfig, rows: Iterable[dict[str, Any]]) -> int:
    """Estimated bytes one rollout adds on this machine (see the module doc)."""
    rt = config.runtime
    if isinstance(rt, SubprocessRuntimeConfig | SandboxRuntimeConfig):
        env = _WARM if rt.warm else _COLD
    elif isinstance(rt, ContainerRuntimeConfig):
        sizes = [_resources(rt, row).get("memory") for row in rows]
        env = max((_bytes(s) for s in sizes if s is not None), default=_ENV_MEMORY["container"])
    else:
        env = _ENV_MEMORY[rt.kind]
    harness = any(isinstance(a, CommandAgentEntry) and a.enabled for a in config.agents)
    return env + (_HARNESS if harness else _LOOP)


def _host(config: BatchConfig, rows: list[dict[str, Any]], wave: int, problems: Problems) -> Any:
    per = rollout_memory(config, rows)
    need = wave * per
    available = _available_memory()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpus = 0.0
    if isinstance(config.runtime, ContainerRuntimeConfig):
        cpus = max((float(_resources(config.runtime, r).get("cpus", 0)) for r in rows), default=0)
    reserved = wave * cpus
    if available is not None and need > available:
        problems.append(
            f"a wave of {wave} rollouts needs about {need // MiB} MiB here, "
            f"{available // MiB} MiB is available"
        )
    if cores is not None and reserved > cores:
        problems.append(f"a wave of {wave} containers reserves {reserved:g} CPUs, {cores} here")
    return {
        "memory_per_rollout": per,
        "memory_needed": need,
        "memory_available": available,
        "cores": cores,
        "cpus_reserved": reserved,
    }


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", "rb") as file:
            for line in file:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _resources(rt: ContainerRuntimeConfig | RayRuntimeConfig, row: dict[str, Any]) -> Any:
    own = (row.get("runtime_config") or {}).get("resources") or {}
    return {**rt.resources, **own}


def _bytes(size: Any) -> int:
    from ..runtimes._ray import placement

    return int(placement({"memory": size})["memory"])


# -- containers -------------------------------------------------------------------------


async def _images(
    rt: ContainerRuntimeConfig, rows: list[dict[str, Any]], problems: Problems
) -> dict[str, bool]:
    engine = shutil.which(rt.engine) if rt.engine else None
    if rt.engine is None:
        engine = shutil.which("podman") or shutil.which("docker")
    if engine is None:
        problems.append(f"no container engine: {rt.engine or 'podman or docker'} not on PATH")
        return {}
    images: dict[str, bool] = {}
    for row in rows:
        image = rt.image or (row.get("runtime_config") or {}).get("image")
        if not image:
            problems.append(f"task {row['slug']!r} names no image and runtime.image is unset")
        elif image not in images:
            images[image] = await _image_exists(engine, image)
            if not images[image]:
                problems.append(
                    f"image {image!r} not found by {os.path.basename(engine)} "
                    "(it is never pulled: build or load it first)"
                )
    return images


async def _image_exists(engine: str, image: str) -> bool:
    verb = ["image", "exists"] if os.path.basename(engine) == "podman" else ["image", "inspect"]
    proc = await asyncio.create_subprocess_exec(
        engine,
        *verb,
        image,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(ENGINE_TIMEOUT):
            return await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# -- Ray --------------------------------------------------------------------------------


async def _ray(
    config: BatchConfig, rows: list[dict[str, Any]], wave: int, problems: Problems
) -> dict[str, Any]:
    address = _ray_address(config)
    answer = await _reach(address) or await _ask_ray(address)
    if "error" in answer:
        problems.append(str(answer["error"]))
        return {"address": address}
    need = _ray_need(config, rows, wave, answer.get("nodes", 1))
    available: dict[str, float] = answer.get("available", {})
    for key, amount in need.items():
        if amount > available.get(key, 0.0):
            have = available.get(key, 0.0)
            problems.append(f"Ray has {have:g} {key} free, a wave of {wave} needs {amount:g}")
    return {"address": address, "nodes": answer.get("nodes"), "needed": need, "free": available}


def _ray_address(config: BatchConfig) -> str:
    rt, ex = config.runtime, config.executor
    given = rt.address if isinstance(rt, RayRuntimeConfig) else None
    if given is None and isinstance(ex, RayExecutorConfig):
        given = ex.address
    # "auto" joins a running cluster and never starts one, as a bare ray.init() would.
    return given or os.environ.get("RAY_ADDRESS") or "auto"


def _ray_need(
    config: BatchConfig, rows: list[dict[str, Any]], wave: int, nodes: int
) -> dict[str, float]:
    need: dict[str, float] = {}
    rt, ex = config.runtime, config.executor
    if isinstance(rt, RayRuntimeConfig):
        per: dict[str, float] = {}
        for row in rows:
            for key, amount in _ray_units(_resources(rt, row)).items():
                per[key] = max(per.get(key, 0.0), amount)
        need = {key: amount * wave for key, amount in per.items()}
    if isinstance(ex, RayExecutorConfig) and ex.resources:
        shards = ex.shards or nodes
        for key, amount in _ray_units(ex.resources).items():
            need[key] = need.get(key, 0.0) + amount * shards
    return {key: amount for key, amount in need.items() if amount > 0}


def _ray_units(resources: dict[str, Any]) -> dict[str, float]:
    from ..runtimes._ray import placement

    options = placement(resources)
    units = {"CPU": options.get("num_cpus", 0.0), "GPU": options.get("num_gpus", 0.0)}
    units["memory"] = float(options.get("memory", 0))
    units.update(options.get("resources", {}))
    return units


async def _reach(address: str) -> dict[str, Any] | None:
    """An error when nothing listens at `address`: Ray itself retries it for a minute."""
    where = urlsplit(address if "://" in address else f"ray://{address}")
    try:
        host, port = where.hostname, where.port
    except ValueError:
        return {"error": f"not a Ray address: {address!r}"}
    if host is None or port is None:
        return None  # "auto", or a form Ray resolves itself
    try:
        async with asyncio.timeout(REACH_TIMEOUT):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError) as exc:
        return {"error": f"cannot connect to Ray at {address}: {exc.strerror or 'timed out'}"}
    writer.close()
    await writer.wait_closed()
    return None


async def _ask_ray(address: str) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _RAY_PROBE,
        address,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(RAY_TIMEOUT):
            out, _ = await proc.communicate()
    except TimeoutError:
        return {"error": f"Ray at {address} did not answer within {RAY_TIMEOUT:g}s"}
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    lines = out.splitlines()
    if not lines:
        return {"error": f"the Ray probe exited with {proc.returncode} and said nothing"}
    answer: dict[str, Any] = orjson.loads(lines[-1])
    return answer
