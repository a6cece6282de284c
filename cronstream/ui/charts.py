"""Charts drawn on the server as inline SVG (no script, no CDN): pure functions of
their data."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT, PAD = 640, 160, 28
COLOURS = {"SUCCEEDED": "#2e7d32", "FAILED": "#c62828", "TIMED_OUT": "#ef6c00",
           "DEAD_LETTERED": "#6a1b9a", "CANCELLED": "#546e7a"}  # fmt: skip


def duration_chart(points: Sequence[tuple[str, float, str]]) -> str:
    """Bars of run durations, oldest left: ``(label, seconds, status)`` per run, each bar
    coloured by its status and titled with its label and duration."""
    if not points:
        return '<p class="muted">no finished runs in the window</p>'
    top = max(seconds for _, seconds, _ in points) or 1.0
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    step = inner_w / len(points)
    bar = max(1.0, step * 0.8)
    parts = [
        f'<svg class="chart" role="img" aria-label="run durations" viewBox="0 0 {WIDTH} '
        f'{HEIGHT}" width="{WIDTH}" height="{HEIGHT}">',
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        'stroke="#999"/>',
        f'<text x="2" y="{PAD - 8}" font-size="11">{_seconds(top)}</text>',
        f'<text x="2" y="{HEIGHT - PAD + 4}" font-size="11">0</text>',
    ]
    for i, (label, seconds, status) in enumerate(points):
        h = inner_h * seconds / top
        x, y = PAD + i * step, HEIGHT - PAD - h
        colour = COLOURS.get(status, "#1565c0")
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" '
            f'fill="{colour}"><title>{escape(label)}: {_seconds(seconds)} '
            f"({escape(status)})</title></rect>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
