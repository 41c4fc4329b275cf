"""Small inline SVG pictures for the self-contained report. Every text passes through escape()."""

from __future__ import annotations

from html import escape as _escape

from conformance.outputs.safe_text import xml_safe


def escape(text: str, quote: bool = True) -> str:
    return _escape(xml_safe(text), quote=quote)


def _open(width: int, height: int, title: str, font_px: int, title_x: int) -> list[str]:
    """The opening of a picture: its size, its accessible name and its title line."""
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
        f"aria-label='{escape(title, quote=True)}' style='font:{font_px}px sans-serif;background:#fff'>"
    ]
    if title:
        parts.append(f"<text x='{title_x}' y='12' font-weight='bold'>{escape(title)}</text>")
    return parts


def histogram(
    values_ms: list[float], marks: dict[str, float], *, width: int = 560, height: int = 170, bins: int = 40, title: str = ""
) -> str:
    """A latency histogram (count per bin) with vertical lines at the named marks (P50, P99...)."""
    if not values_ms:
        return ""
    lo, hi = min(values_ms), max(values_ms)
    span = (hi - lo) or max(hi, 1e-3) * 0.1
    lo, hi = lo - span * 0.02, hi + span * 0.02
    counts = [0] * bins
    for v in values_ms:
        counts[min(bins - 1, int((v - lo) / (hi - lo) * bins))] += 1
    left, bottom, top = 40, 28, 18
    plot_w, plot_h = width - left - 10, height - bottom - top
    peak = max(counts)
    bw = plot_w / bins

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * plot_w

    parts = _open(width, height, title, 10, left)
    for i, c in enumerate(counts):
        if c:
            h = c / peak * plot_h
            parts.append(
                f"<rect x='{left + i * bw:.1f}' y='{top + plot_h - h:.1f}' width='{max(bw - 1, 1):.1f}' "
                f"height='{h:.1f}' fill='#5c6bc0'><title>{c} requests</title></rect>"
            )
    parts.append(f"<line x1='{left}' y1='{top + plot_h}' x2='{left + plot_w}' y2='{top + plot_h}' stroke='#333'/>")
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        parts.append(f"<text x='{x(v):.1f}' y='{height - 12}' text-anchor='middle'>{v:.1f}</text>")
    parts.append(f"<text x='{left + plot_w}' y='{height - 1}' text-anchor='end'>latency, ms</text>")
    parts.append(f"<text x='2' y='{top + 8}'>{peak}</text>")
    colours = ["#222222", "#00695c", "#4e342e", "#455a64"]  # neutral: the outcome colours mean outcomes only
    for n, (label, v) in enumerate(marks.items()):
        colour = colours[n % len(colours)]
        right = x(v) > left + plot_w * 0.75  # keep the label inside the picture
        tx, anchor = (x(v) - 3, "end") if right else (x(v) + 3, "start")
        parts.append(
            f"<line x1='{x(v):.1f}' y1='{top}' x2='{x(v):.1f}' y2='{top + plot_h}' stroke='{colour}' stroke-dasharray='4 2'/>"
            f"<text x='{tx:.1f}' y='{top + 10 + 11 * n}' fill='{colour}' text-anchor='{anchor}'>{escape(label)} {v:.1f}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def heatmap(
    rows: list[str], cols: list[str], values: list[list[float | None]], marked: list[int | None], *, title: str = ""
) -> str:
    """A matrix of numbers as coloured cells (darker = higher), the cell in `marked[row]` outlined.
    Used for H2D GB/s: rows GPUs, columns NUMA nodes, the GPU's local node outlined."""
    if not rows or not cols:
        return ""
    cell_w, cell_h, left, top = 86, 24, 70, 34
    width, height = left + cell_w * len(cols) + 10, top + cell_h * len(rows) + 22
    present = [v for row in values for v in row if v is not None]
    hi = max(present, default=1.0) or 1.0
    parts = _open(width, height, title, 11, 4)
    for j, c in enumerate(cols):
        parts.append(f"<text x='{left + j * cell_w + cell_w / 2}' y='{top - 6}' text-anchor='middle'>{escape(c)}</text>")
    for i, r in enumerate(rows):
        y = top + i * cell_h
        parts.append(f"<text x='{left - 6}' y='{y + 16}' text-anchor='end'>{escape(r)}</text>")
        for j, v in enumerate(values[i]):
            x = left + j * cell_w
            if v is None:
                fill, label = "#eeeeee", "-"
            else:
                shade = int(235 - 170 * (v / hi))
                fill, label = f"rgb({shade},{shade + 10 if shade < 245 else 255},255)", f"{v:.1f}"
            stroke = "stroke='#c62828' stroke-width='2'" if marked[i] is not None and j == marked[i] else "stroke='#fff'"
            colour = "#fff" if v is not None and v / hi > 0.6 else "#222"
            parts.append(
                f"<rect x='{x}' y='{y}' width='{cell_w - 2}' height='{cell_h - 2}' fill='{fill}' {stroke}>"
                f"<title>{escape(r)} from {escape(cols[j])}: {escape(label)} GB/s</title></rect>"
                f"<text x='{x + cell_w / 2 - 1}' y='{y + 16}' text-anchor='middle' fill='{colour}'>{escape(label)}</text>"
            )
    parts.append(f"<text x='4' y='{height - 6}'>GB/s host-to-device; outlined: the GPU's local NUMA node</text>")
    parts.append("</svg>")
    return "".join(parts)
