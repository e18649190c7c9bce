"""The history chart, drawn as SVG on the server: rules passing per finished run, oldest on the left.

A step line of passing rules over a dashed line of all rules; one marker per run, coloured by its
verdict, linking to the run and titled with its commit. Only presentation attributes are used (no
``style``), so the page's content security policy holds, and every text is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import escape, quoteattr

from markupsafe import Markup

from gradguard.web.queries import Point

__all__ = ["history_svg", "STATUS_COLORS"]

STATUS_COLORS = {"passed": "#2e7d32", "failed": "#c62828", "error": "#e65100"}
WIDTH, HEIGHT = 760, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 16, 16, 34


def _ticks(top: int) -> list[int]:
    if top <= 5:
        return list(range(0, top + 1))
    step = max(1, round(top / 4))
    ticks = list(range(0, top + 1, step))
    if ticks[-1] != top:
        ticks.append(top)
    return ticks


def history_svg(points: Sequence[Point], *, branch: str, run_href: str = "/runs/{id}") -> Markup:
    """An accessible SVG of ``points``; an empty-state message when there are none."""
    title = f"Rules passing over the last {len(points)} finished runs on {branch}"
    if not points:
        return Markup(f'<p class="empty">No finished runs on {escape(branch)} yet.</p>')
    first, last = points[0], points[-1]
    desc = (f"From {first.passed} of {first.rules} rules passing (run {first.run_id}) "
            f"to {last.passed} of {last.rules} (run {last.run_id}).")
    top = max(1, max(p.rules for p in points))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    n = len(points)

    def x(i: int) -> float:
        return LEFT + (plot_w / 2 if n == 1 else plot_w * i / (n - 1))

    def y(v: float) -> float:
        return TOP + plot_h * (1 - v / top)

    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-labelledby="chart-title chart-desc" preserveAspectRatio="xMidYMid meet">',
        f'<title id="chart-title">{escape(title)}</title><desc id="chart-desc">{escape(desc)}</desc>',
    ]
    for tick in _ticks(top):
        ty = y(tick)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{ty:.1f}" y2="{ty:.1f}" stroke="#d0d7de" stroke-width="1"/>'
                     f'<text x="{LEFT - 8}" y="{ty + 4:.1f}" text-anchor="end" font-size="12" fill="#444">{tick}</text>')
    parts.append(f'<text x="{LEFT}" y="{HEIGHT - 8}" font-size="12" fill="#444">run {first.run_id}</text>')
    if n > 1:
        parts.append(f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 8}" text-anchor="end" font-size="12" fill="#444">'
                     f'run {last.run_id}</text>')
    total = " ".join(f"{x(i):.1f},{y(p.rules):.1f}" for i, p in enumerate(points))
    parts.append(f'<polyline points="{total}" fill="none" stroke="#57606a" stroke-width="1.5" stroke-dasharray="5 4"/>')
    steps: list[str] = []
    for i, p in enumerate(points):
        if i:
            steps.append(f"{x(i):.1f},{y(points[i - 1].passed):.1f}")
        steps.append(f"{x(i):.1f},{y(p.passed):.1f}")
    parts.append(f'<polyline points="{" ".join(steps)}" fill="none" stroke="#0b5cad" stroke-width="2.5"/>')
    radius = 4 if n <= 60 else 3
    for i, p in enumerate(points):
        label = (f"run {p.run_id}" + (f" at {p.commit[:10]}" if p.commit else "")
                 + f": {p.passed}/{p.rules} rules pass ({p.status})")
        href = quoteattr(run_href.format(id=p.run_id))
        parts.append(f'<a href={href} aria-label={quoteattr(label)}><title>{escape(label)}</title>'
                     f'<circle cx="{x(i):.1f}" cy="{y(p.passed):.1f}" r="{radius}" '
                     f'fill="{STATUS_COLORS.get(p.status, "#6e6e6e")}" stroke="#fff" stroke-width="1"/></a>')
    parts.append("</svg>")
    return Markup("".join(parts))
