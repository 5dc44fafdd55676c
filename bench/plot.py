"""Plots for the benches, drawn with Pillow (matplotlib is not a dependency)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path


def quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank quantile of `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def draw_cdf(out: Path, series: dict[str, list[float]], title: str) -> None:
    """A plain PNG of each series' empirical CDF, drawn with Pillow (matplotlib is not a dependency)."""
    from PIL import Image, ImageDraw

    width, height, left, right, top, bottom = 720, 440, 50, 20, 40, 50
    colors = ("#1f77b4", "#d62728", "#2ca02c")
    top_ms = max(max(v) for v in series.values())
    step = next(s * 10**e for e in range(7) for s in (1, 2, 5) if s * 10**e * 6 >= top_ms)  # at most 6 ticks
    x_max = step * math.ceil(top_ms / step)
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)

    def xy(ms: float, frac: float) -> tuple[float, float]:
        return left + ms / x_max * (width - left - right), height - bottom - frac * (height - top - bottom)

    draw.text((left, 12), title, fill="black")
    draw.text((width // 2 - 30, height - 22), "TTFT (ms)", fill="black")
    for i in range(6):
        draw.line([xy(0, i / 5), xy(x_max, i / 5)], fill="#dddddd")
        draw.text((12, xy(0, i / 5)[1] - 6), f"{i / 5:.1f}", fill="black")
    for i in range(round(x_max / step) + 1):
        draw.line([xy(i * step, 0), xy(i * step, 1)], fill="#dddddd")
        draw.text((xy(i * step, 0)[0] - 10, height - bottom + 6), f"{i * step}", fill="black")
    draw.rectangle([xy(0, 1), xy(x_max, 0)], outline="black")
    for n, (name, values) in enumerate(series.items()):
        ordered, color = sorted(values), colors[n % len(colors)]
        points = [xy(0, 0)]
        for k, ms in enumerate(ordered):
            points += [xy(ms, k / len(ordered)), xy(ms, (k + 1) / len(ordered))]
        draw.line(points, fill=color, width=2)
        label = f"{name}: p50 {quantile(ordered, 0.5):.0f} ms, p99 {quantile(ordered, 0.99):.0f} ms (n={len(values)})"
        draw.text((width - right - 300, height - bottom - 60 + 16 * n), label, fill=color)
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out)
