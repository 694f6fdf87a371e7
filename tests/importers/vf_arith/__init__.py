"""A tiny verifiers (0.4.0, v1) environment package: three sums, two weighted rewards."""

from vf_arith.taskset import ArithTaskset

__all__ = ["ArithTaskset"]
