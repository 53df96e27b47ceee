"""The memo of a memoized step: measurements kept across runs that differ only in judgement params.

`compare` spends its time measuring (errors, quantiles, histograms, similarity metrics of every
tensor); its tolerances only judge those measurements. A memo lets `--set atol=0.05` re-judge in
well under a second instead of measuring again. It is a store entry of its own, keyed by
`keys.memo_key` (the step's material minus `Params.judgement`), so it is content-addressed,
committed atomically, checked by `cache verify` and pushed nowhere: a lost memo only costs the
measuring again. The step sees a folder, never the store (`steps.base.Memo`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtflow.executor.store import Store
from trtflow.steps.base import folder

MEMO = "memo"  # the entry's one output: the folder the step wrote
OUTPUTS = {MEMO: folder("What a memoized step measured, for runs that only judge differently.")}


class StoreMemo:
    """`steps.base.Memo` over the workspace's store."""

    def __init__(self, store: Store, key: str, info: dict[str, Any], force: bool) -> None:
        self.store, self.key, self.info, self.force = store, key, info, force
        self._work_dir: Path | None = None

    def earlier(self) -> Path | None:
        """The memo an earlier run left (none under --force: a forced run measures again)."""
        entry = None if self.force else self.store.lookup(self.key)
        return entry.path / MEMO if entry else None

    def folder(self) -> Path:
        """A fresh folder for a whole new memo, kept by `keep` when the step succeeds."""
        if self._work_dir is None:
            self._work_dir = self.store.begin(self.key)
            (self._work_dir / MEMO).mkdir()
        return self._work_dir / MEMO

    def keep(self) -> None:
        """Commit what the step wrote (a concurrent run's memo, if sealed first, stays)."""
        if self._work_dir is None:
            return
        work_dir, self._work_dir = self._work_dir, None
        with self.store.lock(self.key):
            if self.store.lookup(self.key) and not self.force:
                self.store.discard(work_dir)
                return
            self.store.commit(self.key, work_dir, OUTPUTS, {}, self.info)

    def discard(self) -> None:
        """Drop what a failed step wrote."""
        if self._work_dir is not None:
            self.store.discard(self._work_dir)
            self._work_dir = None
