"""Images of a Compose file's `build` entries: built once per runtime, never pulled."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from pathlib import Path

from .._errors import RuntimeLaunchError
from ._compose_file import Service
from ._container import _cli

__all__ = ["ImageBuilder"]

REPOSITORY = "localhost/proctor-compose"


class ImageBuilder:
    """Builds each `build` entry once (the engine's layer cache makes a rebuild of an
    unchanged context quick), tagged `localhost/proctor-compose:<hash of its paths>`."""

    def __init__(self, exe: Sequence[str], oci_runtime: str | None, timeout: float) -> None:
        self._exe = list(exe)
        self._oci = oci_runtime
        self._timeout = timeout
        self._built: dict[tuple[str, str | None], asyncio.Task[str]] = {}

    async def image(self, service: Service) -> str:
        """The image `service` runs: its `image`, or its `build` built on first use.

        Raises:
            RuntimeLaunchError: the build failed or ran past its deadline.
        """
        if service.build_context is None:
            assert service.image is not None  # the parser requires one of the two
            return service.image
        key = (service.build_context, service.dockerfile)
        if key not in self._built or (
            self._built[key].done() and self._built[key].exception() is not None
        ):
            self._built[key] = asyncio.ensure_future(self._build(*key))
        return await asyncio.shield(self._built[key])

    async def _build(self, context: str, dockerfile: str | None) -> str:
        digest = hashlib.sha256(f"{context}\0{dockerfile}".encode(), usedforsecurity=False)
        ref = f"{REPOSITORY}:{digest.hexdigest()[:16]}"
        argv = [*self._exe, "build", "-q", "-t", ref]
        if Path(self._exe[0]).name == "podman":
            argv.append("--pull=never")  # no registry: FROM names a local image
        argv += ["-f", dockerfile] if dockerfile else []
        argv += ["--runtime", self._oci] if self._oci else []
        try:
            code, _, err = await _cli([*argv, context], self._timeout)
        except TimeoutError:
            raise RuntimeLaunchError(f"building {context} ran past {self._timeout:g}s") from None
        if code != 0:
            raise RuntimeLaunchError(f"building {context}: {err.strip()[-2000:]}")
        return ref
