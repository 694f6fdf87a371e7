"""Build the base image of the `stock-task` Harbor example: this machine's Python and
bash (Harbor runs `tests/test.sh` with bash), no registry needed.

    python examples/compose/base.py        # prints the image, tagged BASE

`stock-task/environment/` starts `FROM` it, and its `db` service runs it.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Literal

from proctor.runtimes import python_image

BASE = "localhost/proctor-compose-example:base"


def build_base(engine: Literal["podman", "docker"] = "podman") -> str:
    """Build (or find) the image and tag it `BASE`; return `BASE`."""
    bash = shutil.which("bash")
    if bash is None:
        raise SystemExit("bash is not installed here")
    out = subprocess.run(["ldd", bash], capture_output=True, text=True, check=True).stdout
    libraries = [part for line in out.splitlines() for part in line.split() if part[:1] == "/"]
    repository = BASE.partition(":")[0]
    image = python_image(
        engine=engine, distributions=(), paths=[bash, *libraries], repository=repository
    )
    subprocess.run([engine, "tag", image, BASE], check=True)
    return BASE


if __name__ == "__main__":
    print(build_base())
