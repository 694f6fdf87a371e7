"""`python -m proctor.cli`: the same as the `proctor` console script."""

import sys

from . import main

sys.exit(main())
