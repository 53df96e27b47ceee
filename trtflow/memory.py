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
CGROUP = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")  # which cgroup this process is in


def human_size(size: float) -> str:
    """`1536` -> `1.5 KiB`; up to TiB, where a mistyped shape lands."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.2f} TiB"


def available_memory() -> int | None:
    """Bytes a new allocation can get: the least of Linux's MemAvailable (free memory plus the page
    cache it can drop), what this process's cgroup has left (a container's MemAvailable is the
    host's) and what its address-space limit (`ulimit -v`, `prlimit --as`) has left; the physical
    memory where none says; None when the system does not say at all."""
    limits = [
        limit
        for limit in (_meminfo_available(), _cgroup_left(), _address_space_left())
        if limit is not None
    ]
    if limits:
        return min(limits)
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _meminfo_available() -> int | None:
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_left() -> int | None:
    """Limit minus usage (less the file cache it can drop) of this process's memory cgroup, v2 or
    v1; None without a limit."""
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            files = ("memory.max", "memory.current", "inactive_file")
            roots = [CGROUP / path.lstrip("/"), CGROUP]
        elif "memory" in controllers.split(","):
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
            roots = [CGROUP / "memory" / path.lstrip("/"), CGROUP / "memory"]
        else:
            continue
        for root in roots:
            try:
                limit = (root / files[0]).read_text().strip()
                usage = int((root / files[1]).read_text())
                stat = dict(row.split() for row in (root / "memory.stat").read_text().splitlines())
            except (OSError, ValueError):
                continue
            if limit == "max" or int(limit) >= 1 << 60:
                return None
            return max(0, int(limit) - usage + int(stat.get(files[2], 0)))
    return None


def _address_space_left() -> int | None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        status = Path("/proc/self/status").read_text().splitlines()
        size = next(int(row.split()[1]) * 1024 for row in status if row.startswith("VmSize:"))
    except (OSError, ValueError, StopIteration):
        return None
    return max(0, soft - size)


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
