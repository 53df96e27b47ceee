"""How much memory this machine can give, and byte counts as people read them.

Arrays a recipe asks for are sized before they are allocated, so a shape that needs terabytes is a
message naming the input, not a `MemoryError` from deep inside numpy.
"""

from __future__ import annotations

import os
from pathlib import Path

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
