"""Every typed report's shape is pinned with its `SCHEMA_VERSION`: a field added, removed or retyped
without a bump fails here (CompareReport gained `quantization` without one, and readers of older
reports met it unannounced). The schema is hashed without titles and descriptions, which document
a field but do not change what a reader gets.

After changing a report's fields: bump its SCHEMA_VERSION (the step key follows) and update the table
with `python tests/test_report_schemas.py`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

TABLE = Path(__file__).with_name("report_schemas.json")


def _shape(schema: Any) -> Any:
    """The schema without the words that only document it."""
    if isinstance(schema, dict):
        return {k: _shape(v) for k, v in schema.items() if k not in ("title", "description")}
    if isinstance(schema, list):
        return [_shape(item) for item in schema]
    return schema


def current() -> dict[str, dict]:
    """{kind: {schema_version, schema_sha256}} of every report a step of this trtflow writes."""
    from trtflow.inspect_json import report_models

    return {
        kind: {
            "schema_version": model.SCHEMA_VERSION,
            "schema_sha256": hashlib.sha256(
                json.dumps(
                    _shape(model.model_json_schema(mode="serialization")), sort_keys=True
                ).encode()
            ).hexdigest(),
        }
        for kind, model in sorted(report_models().items())
    }


def test_every_report_shape_is_pinned_with_its_schema_version():
    pinned = json.loads(TABLE.read_text())
    found = current()
    assert set(found) == set(pinned), f"report kinds changed: update {TABLE.name} (see docstring)"
    for kind, now in found.items():
        before = pinned[kind]
        if now["schema_version"] == before["schema_version"]:
            assert now["schema_sha256"] == before["schema_sha256"], (
                f"the `{kind}` report's fields changed but its SCHEMA_VERSION is still "
                f"{before['schema_version']}: bump it, then update {TABLE.name}"
            )
        else:
            assert now["schema_version"] > before["schema_version"], kind
            raise AssertionError(
                f"`{kind}` is at schema version {now['schema_version']}: update {TABLE.name}"
            )


def test_every_report_kind_registers_itself_and_inspects(tmp_path):
    """The kinds steps write are registered by their own classes; a new kind registers itself by
    being defined, and inspects (through its model, the generic summary) with no code of its own."""
    from typing import ClassVar

    from trtflow.inspect import describe
    from trtflow.inspect_json import report_models
    from trtflow.schema.reports import Report

    assert {"compare", "bisect-precision", "reduce", "load-lint"} <= set(report_models())

    class SweepReport(Report):
        KIND: ClassVar[str] = "test-sweep"
        SCHEMA_VERSION: ClassVar[int] = 1

        models: list[str]
        worst: str

    try:
        assert Report.model_for("test-sweep") is SweepReport
        path = tmp_path / "sweep.json"
        SweepReport(models=["a.onnx", "b.onnx"], worst="b.onnx").write(path)
        assert describe(path) == [
            f"{path}: test-sweep report",
            "  models: 2 entries",
            "  worst: b.onnx",
        ]
    finally:
        Report._BY_KIND.pop("test-sweep")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    TABLE.write_text(json.dumps(current(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {TABLE}")
