"""The `proctor` command: serve environments, poke at tasks, run tasksets.

```
proctor serve SOURCE[:ENV] [--host H] [--port P] [--token-env VAR]
proctor task list (--source SOURCE | --url tcp://H:P) [--json]
proctor task start ID --url tcp://H:P [--args JSON] [--json]
proctor task grade --url tcp://H:P (--answer TEXT | --answer-file F|-) [--json]
proctor run SOURCE [--agent SPEC] [--group N] [--runtime local|subprocess|tcp://H:P] ...
```

Only `argparse` loads up front so `proctor --help` stays fast; each command imports
what it needs. `--json` output goes to stdout; progress and errors go to stderr.

Exit codes: 0 done (for `run`, also with failed rollouts unless `--strict`); 1 a user
mistake, reported as one `error: ...` line (`PROCTOR_DEBUG=1` shows the traceback);
2 bad usage (argparse); 130 Ctrl-C and 143 SIGTERM, after every rollout was cancelled
and its substrate stopped. `run` uses uvloop when installed (`PROCTOR_NO_UVLOOP=1`
turns it off): 1.7x rollouts/s over tcp, neutral in process and per subprocess.
"""

from ._main import main

__all__ = ["main"]
