"""The one shape of every JSON report a step writes: a typed model that carries its `kind` and its
`schema_version`, owned by the module that writes it (`CompareReport` in `trtflow.tensors.report`,
`BisectReport` in `trtflow.sessions.precision.report`).

Why: reports have one writer and several readers (the render overlay, engine-layer grouping,
`inspect`, task metrics). Readers that probed dict keys broke silently whenever the writer moved a
key; a reader that names the model it expects gets a validated object or a clear error saying what
the file is and what to do. The `schema_version` of every report a step writes enters the step's
cache key (`Output.report`, `Step.report_schemas`), so changing a report's shape re-runs the steps
that wrote the old one without a hand-bumped `version`.

Derived facts (`passed`) are `computed_field` properties: written into the JSON for people and
other tools, never read back — the model recomputes them from the facts they derive from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from trtflow.errors import UsageError

R = TypeVar("R", bound="Report")


# Report models are built on first use (`defer_build`), not when their module is imported: a run
# whose steps are all cached reads no report, and building them cost its start-up ~20 ms.
_REPORT_CONFIG = ConfigDict(
    extra="ignore", defer_build=True
)  # computed fields come back in the JSON and are recomputed


class ReportPart(BaseModel):
    """A model inside a report (a tensor's comparison, a kept node): built on first use, as reports."""

    model_config = _REPORT_CONFIG


class Report(BaseModel):
    """A report's kind (`compare`, `bisect-precision`...) and the version of its shape. A subclass
    sets `KIND` and `SCHEMA_VERSION` (bump it whenever a field is added, removed or changes meaning)."""

    model_config = _REPORT_CONFIG

    KIND: ClassVar[str]
    SCHEMA_VERSION: ClassVar[int]
    _BY_KIND: ClassVar[dict[str, type[Report]]] = {}

    kind: str = ""
    schema_version: int = 0

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that names its `KIND` registers itself: readers find its model by the kind a
        file says (`model_for`), with no list of report kinds to keep in step."""
        super().__pydantic_init_subclass__(**kwargs)
        if "KIND" in cls.__dict__:
            Report._BY_KIND[cls.KIND] = cls

    @staticmethod
    def model_for(kind: str) -> type[Report] | None:
        """The registered model of reports of `kind` (its module must have been imported)."""
        return Report._BY_KIND.get(kind)

    @staticmethod
    def registered() -> dict[str, type[Report]]:
        """Every registered report model, by kind."""
        return dict(Report._BY_KIND)

    def model_post_init(self, context: Any) -> None:
        """A report made in code says what it is; one read from a file was checked by `read_report`."""
        if not self.kind:
            self.kind = self.KIND
        if not self.schema_version:
            self.schema_version = self.SCHEMA_VERSION

    @classmethod
    def schema_id(cls) -> str:
        """`compare/1`: what enters the cache key of a step writing this report."""
        return f"{cls.KIND}/{cls.SCHEMA_VERSION}"

    def write(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=1))

    def summary_lines(self) -> list[str]:
        """What `trtflow inspect` prints of a report it has no summary of its own for: each top-level
        fact that is one value, and the size of each list or mapping. A subclass says more by
        overriding it; a new report kind is inspected from the day its step writes it."""
        lines = []
        for name, value in self.model_dump(exclude={"kind", "schema_version"}).items():
            if isinstance(value, (list, dict)):
                lines.append(
                    f"{name}: {len(value)} {'entries' if isinstance(value, list) else 'keys'}"
                )
            else:
                lines.append(f"{name}: {str(value)[:200]}")
        return lines


def report_kind(content: Any) -> tuple[str, int] | None:
    """A report's `(kind, schema_version)`, or None for JSON that is no typed trtflow report."""
    if not isinstance(content, dict):
        return None
    kind, version = content.get("kind"), content.get("schema_version")
    if isinstance(kind, str) and isinstance(version, int):
        return kind, version
    return None


def parse_report(content: Any, path: Path, *models: type[R]) -> R:
    """`content` (a report file's JSON) as the one of `models` its `kind` names. A report of another
    kind, one written by a trtflow whose reports carried no kind or another schema version, or one
    whose fields do not validate is a UsageError that says which and what to do."""
    expected = " or ".join(f"a {m.KIND} report" for m in models)
    found = report_kind(content)
    if found is None:
        raise UsageError(
            f"{path}: not a typed trtflow report (no `kind`/`schema_version`); expected {expected}. "
            "Reports written before trtflow's reports were typed carry neither: re-run the step that "
            "wrote it (`trtflow run`; its cache entry is recomputed because the report's schema is in "
            "the step key)"
        )
    kind, version = found
    model = next((m for m in models if m.KIND == kind), None)
    if model is None:
        raise UsageError(f"{path}: a {kind} report; expected {expected}")
    if version != model.SCHEMA_VERSION:
        raise UsageError(
            f"{path}: a {kind} report of schema version {version}; this trtflow reads version "
            f"{model.SCHEMA_VERSION}: re-run the step that wrote it (`trtflow run` recomputes it)"
        )
    try:
        return model.model_validate(content)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise UsageError(
            f"{path}: not a valid {kind} report: `{where}`: {first['msg']} "
            f"({error.error_count()} problem(s)); re-run the step that wrote it"
        ) from None


def read_report(path: Path, *models: type[R]) -> R:
    """The report file at `path` as one of `models` (see `parse_report`)."""
    try:
        content = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"{path}: cannot read the report: {error}") from None
    return parse_report(content, Path(path), *models)
