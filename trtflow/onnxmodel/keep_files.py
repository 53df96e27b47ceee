"""Keep files: the node names a precision plan holds in high precision, as a file.

`bisect-precision` writes one (`{"nodes": [{"name", "op", "reason"}]}`); `build-engine`, the
emulated runner and graph overlays read it, and a user may hand-write a plain JSON list of names.
Reading it needs neither precision plans nor onnx, so it sits with the other model facts and each
reader imports it from here instead of from its neighbour.
"""

from __future__ import annotations

import json
from pathlib import Path

from trtflow.errors import InputError


def read_keep_file(path: Path) -> frozenset[str]:
    """The node names in a keep file: bisect-precision's `keep` (`{"nodes": [{"name", "op", "reason"}]}`),
    or a plain JSON list of names. Raises InputError saying what a keep file looks like."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        entries = document["nodes"] if isinstance(document, dict) else document
        if not isinstance(entries, list):
            raise TypeError("`nodes` is not a list")
        return frozenset(
            entry["name"] if isinstance(entry, dict) else str(entry) for entry in entries
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(
            f'{path}: not a keep file ({{"nodes": [{{"name": ...}}]}} or a list of names): {error}'
        ) from None
