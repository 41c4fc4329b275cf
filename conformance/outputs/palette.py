"""The report's colours: one meaning per colour across the page (matrix, verdict badges, results table, charts).

Each is dark enough for white text at 4.5:1 or more (WCAG 2.x AA), and the pass/fail pair is blue against red,
which deuteranopia and protanopia keep apart (green against red they do not); every coloured mark also carries
a symbol or a word, so the meaning survives greyscale printing."""

from __future__ import annotations

PASSED = "#1565c0"  # blue: 5.75:1 with white
FAILED = "#b71c1c"  # red: 6.57:1
ERROR = "#8a4b08"  # brown-orange: 6.8:1
SKIPPED = "#595959"  # grey: 7.0:1
WAIVED = "#6a1b9a"  # purple: 9.4:1
NONE = "#eeeeee"  # no result: no text on it
TEXT = "#222222"
MUTED = "#595959"

OUTCOME_COLOURS = {"passed": PASSED, "failed": FAILED, "error": ERROR, "skipped": SKIPPED, "waived": WAIVED, "none": NONE}
VERDICT_COLOURS = {"accepted": PASSED, "rejected": FAILED, "unreachable": ERROR, "incomplete": SKIPPED}


def relative_luminance(colour: str) -> float:
    def channel(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: str, b: str) -> float:
    """WCAG 2.x contrast ratio of two #rrggbb colours."""
    hi, lo = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)
