# /// script
# requires-python = ">=3.10"
# dependencies = ["math-verify==0.9.0"]
# ///
"""Print 1.0 when ANSWER equals EXPECTED by math-verify, else 0.0.

Usage: `uv run --script verify.py EXPECTED ANSWER`, where EXPECTED is LaTeX without
delimiters (`\\frac{5}{6}`) and ANSWER is free text (the last `\\boxed{}` or `$...$`
in it counts). The `math` environment runs it inside its substrate through
`graders.run_uv_script`: math-verify and sympy land in uv's cache, never in the
environment's own interpreter.
"""

import sys

from math_verify import parse, verify

expected, answer = sys.argv[1], sys.argv[2]
print(1.0 if verify(parse(f"${expected}$"), parse(answer)) else 0.0)
