"""SVG through Graphviz's `dot` program, when it is installed, within a time bound.

Graphviz is a system program, not a Python package, so it may be missing: drawing an SVG then
fails with the one thing to do (install it, or drop `svg` from `formats:`), while DOT and the
HTML viewer, which need nothing, are still available.
"""

from __future__ import annotations

import shutil
import subprocess

from trtflow.errors import BackendUnavailable, StepError

INSTALL_GRAPHVIZ = (
    "install Graphviz (`apt-get install graphviz` on Debian/Ubuntu, `dnf install graphviz`, "
    "`brew install graphviz`, or `conda install -c conda-forge graphviz`)"
)


class GraphvizTimeout(StepError):
    """Graphviz did not lay the graph out within the time bound."""


def graphviz_installed() -> bool:
    return shutil.which("dot") is not None


def graphviz_version() -> str | None:
    """`dot -V`'s answer, or None when Graphviz is not installed."""
    executable = shutil.which("dot")
    if executable is None:
        return None
    try:
        done = subprocess.run([executable, "-V"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stderr or done.stdout).strip() or "unknown"


def render_svg(dot_text: str, *, timeout_s: float, node_count: int) -> str:
    executable = shutil.which("dot")
    if executable is None:
        raise BackendUnavailable(
            f"Graphviz's `dot` program is not installed, so the SVG cannot be drawn: "
            f"{INSTALL_GRAPHVIZ}, or leave `svg` out of `formats:` — the HTML viewer and the "
            "DOT file need nothing extra"
        )
    try:
        done = subprocess.run(
            [executable, "-Tsvg"], input=dot_text, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as error:
        raise GraphvizTimeout(
            f"Graphviz did not lay out {node_count} nodes within {timeout_s:g} s: use "
            "`mode: simplified`, draw a part with `focus: {nodes: REGEX, radius: 3}`, raise "
            "`svg_timeout_s`, or leave `svg` out of `formats:` (the HTML viewer draws any size)"
        ) from error
    if done.returncode != 0:
        raise StepError(f"Graphviz failed to draw the graph: {done.stderr.strip()[-800:]}")
    return done.stdout
