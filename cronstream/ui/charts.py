"""Charts drawn on the server as inline SVG (no script, no CDN): pure functions of
their data (bars of run durations; lines of a metric over time)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

WIDTH, HEIGHT, PAD = 640, 160, 28
COLOURS = {
    "SUCCEEDED": "#2e7d32",
    "FAILED": "#c62828",
    "TIMED_OUT": "#ef6c00",
    "DEAD_LETTERED": "#6a1b9a",
    "CANCELED": "#546e7a",
}


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


LINE_W, LINE_H = 460, 150
PALETTE = ("#1565c0", "#2e7d32", "#c62828", "#ef6c00", "#6a1b9a", "#00838f", "#546e7a")
Series = Sequence[tuple[float, float]]  # (unix seconds, value), oldest first


def line_chart(
    series: Mapping[str, Series], *, title: str, unit: str, start: float, end: float
) -> str:
    """Lines of values over [start, end] (unix seconds), one per named series (a status
    name takes its status colour), the y axis from 0 to the largest value; "no data"
    when no series has a point."""
    drawn = {name: points for name, points in series.items() if points}
    if not drawn or end <= start:
        return f'<p class="muted nodata">no data ({escape(title)})</p>'
    top = max(v for points in drawn.values() for _, v in points) or 1.0
    inner_w, inner_h = LINE_W - 2 * PAD, LINE_H - 2 * PAD
    parts = [
        f'<svg class="chart line" role="img" aria-label="{escape(title)}" viewBox="0 0 '
        f'{LINE_W} {LINE_H}" width="{LINE_W}" height="{LINE_H}">',
        f'<line x1="{PAD}" y1="{LINE_H - PAD}" x2="{LINE_W - PAD}" y2="{LINE_H - PAD}" '
        'stroke="#999"/>',
        f'<text x="2" y="{PAD - 8}" font-size="11">{escape(_amount(top, unit))}</text>',
        f'<text x="{PAD}" y="{LINE_H - 8}" font-size="11">-{(end - start) / 60:.0f} min</text>',
        f'<text x="{LINE_W - PAD - 22}" y="{LINE_H - 8}" font-size="11">now</text>',
    ]
    keys = []
    for i, (name, points) in enumerate(sorted(drawn.items())):
        colour = COLOURS.get(name, PALETTE[i % len(PALETTE)])
        xy = " ".join(
            f"{PAD + inner_w * (t - start) / (end - start):.1f},"
            f"{LINE_H - PAD - inner_h * v / top:.1f}"
            for t, v in points
        )
        last = points[-1][1]
        parts.append(
            f'<polyline class="series" data-series="{escape(name)}" points="{xy}" fill="none" '
            f'stroke="{colour}" stroke-width="1.5"><title>{escape(name)}: '
            f"{escape(_amount(last, unit))} now</title></polyline>"
        )
        keys.append((name, colour))
    parts.append("</svg>")
    if len(keys) > 1:
        parts.append(legend(keys))
    return "".join(parts)


def legend(keys: Sequence[tuple[str, str]]) -> str:
    """A line of colour swatches (small SVG squares: the pages' CSP allows no inline
    style) each followed by its name."""
    return (
        '<p class="legend">'
        + " ".join(
            f'<svg class="swatch" width="10" height="10" aria-hidden="true"><rect width="10" '
            f'height="10" fill="{colour}"/></svg> {escape(name.lower())}'
            for name, colour in keys
        )
        + "</p>"
    )


def _amount(value: float, unit: str) -> str:
    if unit == "s":
        return _seconds(value)
    return f"{value:.2f} {unit}" if value < 10 else f"{value:,.0f} {unit}"
