"""Charts as inline SVG drawn on the server (no chart library): reward histograms and
the cumulative cost line. Only numbers go into the markup; titles are escaped."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from markupsafe import Markup, escape

__all__ = ["cost_line", "histogram"]

_W, _H, _PAD = 320, 120, 18


def _open(attrs: str, w: int, h: int, label: str) -> str:
    return (
        f'<svg {attrs} xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" '
        f'width="{w}" height="{h}" role="img" aria-label="{escape(label)}">'
    )


def histogram(counts: Sequence[int], lo: float, hi: float, *, small: bool = False) -> Markup:
    """One bar per bin, its count and range as a title: `<svg id="reward-hist">`, or a
    `<svg class="mini-hist">` (half size, no id) when `small`."""
    w, h = (_W // 2, _H // 2) if small else (_W, _H)
    n = max(len(counts), 1)
    top = max(counts, default=0) or 1
    bar_w = (w - 2 * _PAD) / n
    step = (hi - lo) / n
    attrs = 'class="mini-hist"' if small else 'id="reward-hist"'
    parts = [_open(attrs, w, h, "reward histogram")]
    for i, count in enumerate(counts):
        bar_h = (h - 2 * _PAD) * count / top
        x, y = _PAD + i * bar_w, h - _PAD - bar_h
        a, b = lo + i * step, lo + (i + 1) * step
        parts.append(
            f'<rect class="bar" data-bin="{i}" data-count="{count}" x="{x:.1f}" y="{y:.1f}" '
            f'width="{max(bar_w - 2, 1):.1f}" height="{bar_h:.1f}">'
            f"<title>{escape(f'{a:.2f}..{b:.2f}: {count}')}</title></rect>"
        )
    parts.append(
        f'<text x="{_PAD}" y="{h - 4}" class="axis">{escape(f"{lo:g}")}</text>'
        f'<text x="{w - _PAD}" y="{h - 4}" class="axis" text-anchor="end">'
        f"{escape(f'{hi:g}')}</text></svg>"
    )
    return Markup("".join(parts))


def cost_line(points: Sequence[tuple[float, float]]) -> Markup:
    """`<svg id="cost-curve">`: cumulative cost (y) by end time (x), one polyline."""
    parts = [_open('id="cost-curve"', _W, _H, "cumulative cost over time")]
    if points:
        t0, t1 = points[0][0], points[-1][0]
        top = max(c for _, c in points) or 1.0
        span = (t1 - t0) or 1.0
        plot_w, plot_h = _W - 2 * _PAD, _H - 2 * _PAD
        xy = [(_PAD + plot_w * (t - t0) / span, _H - _PAD - plot_h * c / top) for t, c in points]
        if len(xy) == 1:
            xy.append((_W - _PAD, xy[0][1]))
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
        parts.append(
            f'<polyline class="line" data-points="{len(points)}" points="{coords}"/>'
            f'<text x="{_PAD}" y="{_PAD - 4}" class="axis">{escape(f"${top:.4f}")}</text>'
            f'<text x="{_PAD}" y="{_H - 4}" class="axis">{escape(_clock(t0))}</text>'
            f'<text x="{_W - _PAD}" y="{_H - 4}" class="axis" text-anchor="end">'
            f"{escape(_clock(t1))}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def _clock(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%H:%M:%S")
