"""`ReduceReport`: the report `reduce` writes (`ReduceOutcome.report`), read back through this
model by `inspect` and the summary; kept apart from the session so a reader imports pydantic only."""

from __future__ import annotations

from pydantic import BaseModel

from trtflow.schema.reports import Report


class RegionNode(BaseModel):
    name: str
    op: str


class ReduceTrial(BaseModel):
    region: list[str]
    failed: bool
    metrics: dict


class ReduceReport(Report):
    """What `reduce` found: the region, why it is minimal, how many checks it took, the verification."""

    KIND = "reduce"
    SCHEMA_VERSION = 2  # 2: which trials the journal answered is in the `journal` measurement

    found: bool
    complete: bool
    message: str
    nodes: int  # nodes in the model
    first_failing: str | None  # the first node whose tapped outputs fail (screening)
    screening_checks: int  # checks of tapped tensors, no runs
    region: list[RegionNode]
    region_inputs: list[str]
    region_outputs: list[str]
    minimal: str
    evaluations: int  # trials: regions run by both runners
    samples: int
    verification: dict | None
    trials: list[ReduceTrial]
