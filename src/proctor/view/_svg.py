"""The reward histogram as an inline SVG, drawn on the server (no chart library)."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

__all__ = ["histogram"]

_W, _H, _PAD = 320, 120, 18


def histogram(counts: Sequence[int], lo: float, hi: float) -> Markup:
    """`<svg id="reward-hist">` with one bar per bin, its count and range as a title."""
    n = max(len(counts), 1)
    top = max(counts, default=0) or 1
    bar_w = (_W - 2 * _PAD) / n
    step = (hi - lo) / n
    parts = [
        f'<svg id="reward-hist" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" '
        f'width="{_W}" height="{_H}" role="img" aria-label="reward histogram">'
    ]
    for i, count in enumerate(counts):
        h = (_H - 2 * _PAD) * count / top
        x, y = _PAD + i * bar_w, _H - _PAD - h
        a, b = lo + i * step, lo + (i + 1) * step
        parts.append(
            f'<rect class="bar" data-bin="{i}" data-count="{count}" x="{x:.1f}" y="{y:.1f}" '
            f'width="{bar_w - 2:.1f}" height="{h:.1f}">'
            f"<title>{escape(f'{a:.2f}..{b:.2f}: {count}')}</title></rect>"
        )
    parts.append(
        f'<text x="{_PAD}" y="{_H - 4}" class="axis">{escape(f"{lo:g}")}</text>'
        f'<text x="{_W - _PAD}" y="{_H - 4}" class="axis" text-anchor="end">'
        f"{escape(f'{hi:g}')}</text></svg>"
    )
    return Markup("".join(parts))
