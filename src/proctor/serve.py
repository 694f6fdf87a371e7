"""`python -m proctor.serve SOURCE`: the command runtimes, HUD clients and users run.

The server lives in `proctor.channel._serve`; this module keeps the command's name.
"""

from .channel._serve import main, run_server, serve

__all__ = ["main", "run_server", "serve"]

if __name__ == "__main__":
    raise SystemExit(main())
