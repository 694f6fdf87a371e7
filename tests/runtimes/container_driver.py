"""A driver that starts containers and waits to be killed (for the reconcile test).

`python container_driver.py IMAGE BATCH COUNT [--engine E] [--oci-runtime R]` enters
COUNT rollouts' containers of the conformance environment, prints `up`, and blocks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from proctor.runtimes._container import ContainerRuntime
from proctor.testing import conformance_env


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("image")
    parser.add_argument("batch")
    parser.add_argument("count", type=int)
    parser.add_argument("--engine", default=None)
    parser.add_argument("--oci-runtime", default=None)
    args = parser.parse_args()
    runtime = ContainerRuntime(
        args.image,
        conformance_env.SOURCE,
        engine=args.engine,
        batch=args.batch,
        oci_runtime=args.oci_runtime,
    )
    async with contextlib.AsyncExitStack() as stack:
        for i in range(args.count):
            await stack.enter_async_context(runtime(conformance_env.echo(text=str(i))))
        print("up", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
