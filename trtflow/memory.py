"""How much memory this machine can give, and byte counts as people read them.

Arrays a recipe asks for are sized before they are allocated, so a shape that needs terabytes is a
message naming the input, not a `MemoryError` from deep inside numpy. Searches that hold a model
several times over (`refuse_past_memory`) say so before they start, with the way out, rather than
being killed by the kernel an hour in.
"""

from __future__ import annotations

import os
from pathlib import Path

from trtflow.errors import StepError

MEMINFO = Path("/proc/meminfo")


def human_size(size: float) -> str:
    """`1536` -> `1.5 KiB`; up to TiB, where a mistyped shape lands."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.2f} TiB"


def available_memory() -> int | None:
    """Bytes a new allocation can get without swapping: Linux's MemAvailable (free memory plus the
    page cache it can drop), else the physical memory, else None when the system does not say."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def refuse_past_memory(needed: int, what: str, way_out: str) -> None:
    """A StepError before `what` starts when it needs more than the memory available here (an
    estimate: refusing a search that would fit costs a message; one that does not fit is killed
    by the kernel with nothing said, its journal the only trace)."""
    available = available_memory()
    if available is not None and needed > available:
        raise StepError(
            f"{what} needs about {human_size(needed)} of memory, and {human_size(available)} is "
            f"available here: {way_out}"
        )
