"""The `proctor` command: serve environments, poke at tasks, run tasksets.

```
proctor serve SOURCE[:ENV] [--host H] [--port P] [--token-env VAR]
proctor task list (--source SOURCE | --url tcp://H:P) [--json]
proctor task start ID --url tcp://H:P [--args JSON] [--json]
proctor task grade --url tcp://H:P (--answer TEXT | --answer-file F|-) [--json]
proctor run SOURCE [--agent SPEC] [--group N] [--runtime local|subprocess|tcp://H:P] ...
```

Only `argparse` loads up front so `proctor --help` stays fast; each command imports
what it needs. User mistakes end with one `error: ...` line on stderr and exit code 1
(argparse usage errors exit 2); set `PROCTOR_DEBUG=1` to see the traceback instead.
"""

from ._main import main

__all__ = ["main"]
