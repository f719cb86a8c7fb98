"""The peer profile's flame graphs: an SVG per role, of the stacks' CPU seconds.

:func:`flame_svg` draws the root at the bottom and colours each frame by the part
its own file would decide under ``bench.profile_stacks.RULES`` (grey: none).
"""

from __future__ import annotations

import html
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from bench.profile_stacks import (
    BLOCKS,
    JOBGEN,
    OTHER,
    PRODUCE,
    READ,
    RECEIVER,
    RULES,
    SPARK,
    TRACKER,
    USER,
)

_PART_COLOURS = {
    RECEIVER: "#e6550d", BLOCKS: "#fd8d3c", PRODUCE: "#d62728", TRACKER: "#9467bd",
    JOBGEN: "#8c6d31", READ: "#2ca02c", USER: "#1f77b4", SPARK: "#bcbd22",
    OTHER: "#c7c7c7",
}


@dataclass
class _Node:
    value: float = 0.0
    children: dict[str, _Node] = field(default_factory=dict)


def _frame_colour(name: str, side: str) -> str:
    func, _, rest = name.rpartition(" (")
    if not rest:
        return "#dddddd"
    path = rest.rstrip(")")
    for rule in RULES:
        if rule.matches(func, path, side):
            return _PART_COLOURS.get(rule.part, "#c7c7c7")
    shade = zlib.crc32(name.encode()) % 40
    return f"rgb({215 + shade},{180 + shade},{150 + shade // 2})"


def flame_svg(stacks: Mapping[tuple[str, ...], float], title: str, side: str,
              width: int = 1200) -> str:
    """A flame graph (root at the bottom) of ``stacks`` (frames root first -> CPU s);
    each frame coloured by the part its own file would decide (grey: none)."""
    root = _Node()
    for frames, value in stacks.items():
        node = root
        node.value += value
        for f in frames:
            node = node.children.setdefault(f, _Node())
            node.value += value
    total = root.value or 1.0

    def depth(n: _Node) -> int:
        return 1 + max((depth(c) for c in n.children.values()), default=0)

    row, top, pad = 16, 48, 10
    # The legend: one entry per part, wrapped to the width.
    entries: list[tuple[int, int, str, str]] = []  # (x, legend row, part, colour)
    lx, lrow = pad, 0
    for part, colour in _PART_COLOURS.items():
        need = 14 + 6 * len(part) + 12
        if lx + need > width - pad and lx > pad:
            lx, lrow = pad, lrow + 1
        entries.append((lx, lrow, part, colour))
        lx += need
    legend_h = 16 * (lrow + 1)
    height = top + depth(root) * row + 24 + legend_h
    scale = (width - 2 * pad) / total
    rects: list[str] = []

    def draw(name: str, n: _Node, x: float, level: int) -> None:
        w = n.value * scale
        if w < 0.3:
            return
        y = height - 14 - legend_h - (level + 1) * row
        colour = "#eeeeee" if level == 0 else _frame_colour(name, side)
        tip = html.escape(f"{name}: {n.value:.2f} CPU s ({100 * n.value / total:.1f}%)")
        label = name if level else f"all ({total:.1f} CPU s)"
        chars = int(w / 7)
        text = ""
        if chars >= 3:
            shown = label if len(label) <= chars else label[:chars - 2] + ".."
            text = (f'<text x="{x + 3:.1f}" y="{y + 12}" font-size="11" '
                    f'font-family="monospace">{html.escape(shown)}</text>')
        rects.append(f'<g><title>{tip}</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" '
                     f'height="{row - 1}" fill="{colour}" rx="1"/>{text}</g>')
        cx = x
        for cname, child in sorted(n.children.items()):
            draw(cname, child, cx, level + 1)
            cx += child.value * scale

    draw("all", root, pad, 0)
    legend = []
    for x, lrow, part, colour in entries:
        y = height - legend_h + 16 * lrow
        legend.append(f'<rect x="{x}" y="{y}" width="10" height="10" '
                      f'fill="{colour}"/><text x="{x + 13}" y="{y + 9}" '
                      f'font-size="10" font-family="sans-serif">{html.escape(part)}</text>')
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{pad}" y="20" font-size="15" font-family="sans-serif">'
        f"{html.escape(title)}</text>",
        f'<text x="{pad}" y="38" font-size="11" font-family="sans-serif">Width: CPU '
        "seconds (each thread's /proc CPU spread over its sampled stacks); hover for "
        "figures. Colour: the part a frame's file belongs to.</text>",
        *rects, *legend, "</svg>"])
