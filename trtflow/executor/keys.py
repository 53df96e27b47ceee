"""Why a step is (or is not) up to date: its key, and what changed since it last ran.

A step's key is the sha256 of the canonical JSON of its *material*:
- `uses` and the step kind's `version` (bumped when the same params give other outputs);
- its validated params, cosmetic ones left out, with every path replaced by an identity —
  `{"artifact": digest}` for an earlier step's output, `{"file": digest}` for a user file — so a
  key depends on content, not on where files live;
- the environment facts the step kind declares (`Step.fingerprint`: onnxruntime version, GPU...);
- `reports`: the kind and schema version of each typed report it writes (`Step.report_schemas`,
  e.g. `{"report": "compare/2"}`), so a report's new shape re-runs its writers by itself; `version`
  stays for what no schema shows (the same report fields computed differently, Markdown, models).
Step order, descriptions and ids do not enter the key. The material also carries `labels`
(where each identity came from), which are not hashed and only serve `describe_changes` — the
answer `trtflow status` gives to "why will this step run again?".

A key is made in two halves. `resolve` (where the run is driven) resolves references against the
entries of finished steps, validates params and hashes user files; `Resolved.complete_here` adds
the environment facts on the machine that runs the step, so an engine built on a GPU worker is
filed under that worker's TensorRT and GPU, never under those of the machine that started the run.
A `Resolved` also keeps its params with each earlier step's output named by entry key and file
(`template`), so a worker with a store of its own resolves them against that store (`params_in`):
entries are found by key wherever they are checked out, never by the path they had elsewhere.
`KeyWalk` is the one walk over a pipeline that `run`, `status` and `replay export` share.

The journal of a long step is keyed by the same material minus its search budget, and a replay
is checked against the material minus budget and machine facts (`replay_identity`); the memo of
a memoized step by the material minus its judgement params (`memo_key`).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trtflow.errors import StepError
from trtflow.executor.hashing import StatCache
from trtflow.executor.pipeline import Pipeline, PlannedStep
from trtflow.executor.store import Entry, Store
from trtflow.schema.paths import PathResolver
from trtflow.schema.source import format_path
from trtflow.steps.base import Step, StepParams


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()


def identify_paths(
    value: Any,
    identities: dict[str, tuple[str, str, str]],
    labels: dict[str, str],
    at: tuple = ("with",),
) -> Any:
    """Replace path strings by `{kind: digest}` per `identities` (path -> (kind, digest, label))."""
    if isinstance(value, dict):
        return {k: identify_paths(v, identities, labels, at + (k,)) for k, v in value.items()}
    if isinstance(value, list):
        return [identify_paths(v, identities, labels, at + (i,)) for i, v in enumerate(value)]
    if isinstance(value, str) and value in identities:
        kind, digest, label = identities[value]
        labels[format_path(at)] = label
        return {kind: digest}
    return value


def material(
    uses: str,
    version: int,
    params: dict,
    env: dict,
    labels: dict[str, str],
    reports: dict[str, str] | None = None,
) -> dict:
    """The key material; `reports` only for steps that write typed reports (others keep their keys)."""
    return {
        "uses": uses,
        "version": version,
        **({"reports": reports} if reports else {}),
        "params": params,
        "env": env,
        "labels": labels,
    }


def keyed_params(kind: type[Step], params: StepParams) -> dict:
    """The params as they enter the step key: every one but those the kind declares cosmetic."""
    return params.model_dump(mode="json", exclude=set(kind.Params.cosmetic))


def step_key(step_material: dict) -> str:
    return _digest({k: v for k, v in step_material.items() if k != "labels"})


def journal_key(step_material: dict, search_budget: frozenset[str]) -> str:
    """The journal's identity: trials do not depend on how the report is shaped, so a new report
    schema resumes the same journal."""
    params = {k: v for k, v in step_material["params"].items() if k not in search_budget}
    kept = {k: v for k, v in step_material.items() if k not in ("labels", "reports")}
    return _digest({**kept, "params": params})


def memo_key(step_material: dict, judgement: frozenset[str]) -> str:
    """The memo's identity: the step's material without the params that only judge (and without
    report schemas, which shape the report, not the measurements); marked so it never equals a
    step key."""
    params = {k: v for k, v in step_material["params"].items() if k not in judgement}
    kept = {k: v for k, v in step_material.items() if k not in ("labels", "reports")}
    return _digest({**kept, "params": params, "memo": 1})


def replay_identity(step_material: dict, search_budget: frozenset[str]) -> dict:
    """What a replay must have been made for: kind, version and params, not budget or machine."""
    params = {k: v for k, v in step_material["params"].items() if k not in search_budget}
    labels = {
        k: v
        for k, v in step_material["labels"].items()
        if k.split(".")[1].split("[")[0] not in search_budget
    }
    return {
        "uses": step_material["uses"],
        "version": step_material["version"],
        "params": params,
        "labels": labels,
    }


def _short(value: Any) -> str:
    text = canonical(value)
    return text if len(text) <= 50 else text[:47] + "..."


def _diff(
    old: Any, new: Any, at: tuple, old_labels: dict, new_labels: dict, out: list[str]
) -> None:
    if old == new:
        return
    where = format_path(at)
    if isinstance(old, dict) and isinstance(new, dict):
        identity_kinds = {"file", "artifact"}
        if set(old) & identity_kinds or set(new) & identity_kinds:
            label = new_labels.get(where) or old_labels.get(where) or where
            if "artifact" in new and "artifact" in old:
                out.append(f"{where}: the output of {label} changed")
            elif "file" in new and "file" in old:
                out.append(f"{where}: file {label} changed")
            else:
                out.append(f"{where}: now {label}, was {old_labels.get(where, _short(old))}")
            return
        for key in sorted(set(old) | set(new)):
            if key not in old:
                out.append(f"{format_path(at + (key,))}: added ({_short(new[key])})")
            elif key not in new:
                out.append(f"{format_path(at + (key,))}: removed (was {_short(old[key])})")
            else:
                _diff(old[key], new[key], at + (key,), old_labels, new_labels, out)
        return
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new)):
            _diff(a, b, at + (index,), old_labels, new_labels, out)
        return
    out.append(f"{where}: {_short(old)} -> {_short(new)}")


def describe_changes(old: dict, new: dict) -> list[str]:
    """Human-readable differences between two materials (or replay identities); empty if equal."""
    changes: list[str] = []
    if old.get("uses") != new.get("uses"):
        return [f"step kind changed: {old.get('uses')} -> {new.get('uses')}"]
    if old.get("version") != new.get("version"):
        changes.append(
            f"step kind `{new.get('uses')}` changed its outputs (version {old.get('version')} -> {new.get('version')})"
        )
    old_reports, new_reports = old.get("reports", {}), new.get("reports", {})
    for output in sorted(set(old_reports) | set(new_reports)):
        if old_reports.get(output) != new_reports.get(output):
            changes.append(
                f"output `{output}` of `{new.get('uses')}` has a new report schema "
                f"({old_reports.get(output, 'untyped')} -> {new_reports.get(output, 'untyped')})"
            )
    old_labels, new_labels = old.get("labels", {}), new.get("labels", {})
    _diff(old.get("params", {}), new.get("params", {}), ("with",), old_labels, new_labels, changes)
    if "env" in old or "env" in new:
        for name in sorted(set(old.get("env", {})) | set(new.get("env", {}))):
            before, after = old.get("env", {}).get(name), new.get("env", {}).get(name)
            if before != after:
                changes.append(f"environment: {name} {before} -> {after}")
    return changes


@dataclass(frozen=True)
class Prepared:
    """A step ready to run: validated params, its whole material and the key it gives."""

    params: StepParams
    material: dict
    key: str


_IN_ENTRY = re.compile("\x00entry:([0-9a-f]{64})/([^\x00]*)\x00")


def _in_entry(key: str, name: str) -> str:
    """How a template names file `name` of the entry `key` (no recipe text can contain a NUL)."""
    return f"\x00entry:{key}/{name}\x00"


def _checked_out(
    value: Any, store: Store, artifacts: dict[str, str], keys: set[str] | None = None
) -> Any:
    """`value` with every file a template names by entry key resolved to its checkout in `store`
    (each path and its entry's key collected in `artifacts`, the keys also in `keys`)."""
    if isinstance(value, dict):
        return {k: _checked_out(v, store, artifacts, keys) for k, v in value.items()}
    if isinstance(value, list):
        return [_checked_out(v, store, artifacts, keys) for v in value]
    if isinstance(value, str) and "\x00" in value:

        def checkout(match: re.Match) -> str:
            folder = store.entry_path(match[1])
            path = f"{folder}/{match[2]}" if match[2] else str(folder)
            artifacts.setdefault(path, match[1])
            if keys is not None:
                keys.add(match[1])
            return path

        return _IN_ENTRY.sub(checkout, value)
    return value


@dataclass(frozen=True)
class Resolved:
    """A step's key material but for the facts of the machine that runs it. Picklable, so it can be
    handed to a worker that completes the key where the step runs."""

    kind: type[Step]
    params: StepParams  # validated against `store_root`'s checkouts
    params_identity: dict  # the params as they enter the key: paths replaced by identities
    labels: dict[str, str]
    template: dict  # the params before validation, earlier outputs named by entry key and file
    store_root: Path  # the store `params` point into
    base_dir: Path  # where the recipe's relative paths start
    needs: frozenset[str] = frozenset()  # the keys of the entries `template` names

    def params_in(self, store: Store) -> StepParams:
        """The params with earlier steps' outputs in `store`, which holds the `needs` entries."""
        if store.root == self.store_root:
            return self.params
        artifacts: dict[str, str] = {}
        params = _checked_out(self.template, store, artifacts)
        try:
            return self.kind.Params.model_validate(
                params, context={"paths": PathResolver(self.base_dir, artifacts)}
            )
        except ValidationError as error:
            raise StepError(
                f"its params do not hold where it runs ({store.root}): {error}"
            ) from None

    def complete_here(self, store: Store | None = None) -> Prepared:
        """The whole key, with this machine's facts, and the params for `store` (where the step
        runs; the run's own store if not given)."""
        params = self.params if store is None else self.params_in(store)
        env = self.kind().fingerprint(params)
        step_material = material(
            self.kind.kind,
            self.kind.version,
            self.params_identity,
            env,
            self.labels,
            self.kind.report_schemas(),
        )
        return Prepared(params, step_material, step_key(step_material))


def resolve(
    pipeline: Pipeline,
    step: PlannedStep,
    entries: dict[str, Entry],
    stat_cache: StatCache,
    store: Store,
) -> Resolved:
    """Resolve a step's references against finished upstream entries (in `store`); identify every
    path by content."""
    artifacts: dict[str, tuple[str, str, str]] = {}
    value_outputs: dict[str, str] = {}

    def by_key(step_id: str, output: str) -> Any:
        entry = entries[step_id]
        if output in entry.outputs and entry.outputs[output]["kind"] != "value":
            return _in_entry(entry.key, entry.outputs[output]["path"])
        return output_of(step_id, output)

    def output_of(step_id: str, output: str) -> Any:
        entry = entries[step_id]
        if output not in entry.outputs:
            raise StepError(
                f"needs `{output}` from step `{step_id}`, which did not produce it this time",
                step=step.id,
            )
        resolved = entry.output_value(output)
        if entry.outputs[output]["kind"] != "value":
            # a file or folder output always has a digest in its manifest
            artifacts[resolved] = (
                "artifact",
                str(entry.digest(output)),
                f"steps.{step_id}.{output}",
            )
        else:
            value_outputs[str(resolved)] = f"${{steps.{step_id}.{output}}}"
        return resolved

    params_dict = pipeline.resolve_params(step, output_of)
    template = pipeline.resolve_params(step, by_key)
    resolver = PathResolver(
        pipeline.recipe.base_dir,
        {path: identity[1] for path, identity in artifacts.items()},
        value_outputs=value_outputs,
        companions=lambda path: stat_cache.companions(path, step.kind.companions),
    )
    params = pipeline.validate_params(step, params_dict, resolver)
    identities = dict(artifacts)
    for user_file in resolver.user_files:
        path = Path(user_file)
        try:
            label = path.relative_to(pipeline.recipe.base_dir).as_posix()
        except ValueError:
            label = user_file
        identities[user_file] = ("file", stat_cache.digest(path, step.kind.companions), label)
    labels: dict[str, str] = {}
    dumped = keyed_params(step.kind, params)
    needs: set[str] = set()
    _checked_out(template, store, {}, needs)
    return Resolved(
        step.kind,
        params,
        identify_paths(dumped, identities, labels),
        labels,
        template,
        store.root,
        pipeline.recipe.base_dir,
        frozenset(needs),
    )


class KeyWalk:
    """A pipeline's steps in dependency order, each keyed from the entries its needs left.

    A step's key can be known once every step it needs has an entry; a need that failed, was
    skipped or is not cached leaves its dependents unkeyable. Steps are settled with their entry
    (or None) as their outcome becomes known: in order by `status` and `replay export`, as
    workers finish by `run`.
    """

    def __init__(self, pipeline: Pipeline, steps: list[str], stat_cache: StatCache, store: Store):
        self.pipeline = pipeline
        self.stat_cache = stat_cache
        self.store = store
        self.pending = dict.fromkeys(steps)  # in dependency order; closed under "needs"
        self.entries: dict[str, Entry] = {}
        self.settled: set[str] = set()
        # what `ready` needs without rescanning every pending step each time one settles: a
        # 4,000-step run scheduled in linear time, not quadratic
        self._steps = list(steps)
        self._waiting = {step_id: len(pipeline.dag.deps[step_id]) for step_id in steps}
        self._dependents: dict[str, list[int]] = {step_id: [] for step_id in steps}
        for position, step_id in enumerate(steps):
            for need in pipeline.dag.deps[step_id]:
                self._dependents[need].append(position)
        self._ready = [i for i, step_id in enumerate(steps) if not self._waiting[step_id]]

    def ready(self) -> Iterator[str]:
        """Pending steps whose needs have all settled, in dependency order. The caller takes or
        settles each step it is given, or stops: the step it left is the first given next time."""
        while self._ready:
            step_id = self._steps[self._ready[0]]
            if step_id not in self.pending:
                heapq.heappop(self._ready)  # taken or settled since it became ready
                continue
            yield step_id
            if step_id in self.pending:
                return

    def take(self, step_id: str) -> PlannedStep:
        del self.pending[step_id]
        return self.pipeline.steps[step_id]

    def resolve(self, step_id: str) -> Resolved:
        return resolve(
            self.pipeline, self.pipeline.steps[step_id], self.entries, self.stat_cache, self.store
        )

    def settle(self, step_id: str, entry: Entry | None) -> None:
        self.pending.pop(step_id, None)
        if step_id in self.settled:
            return
        self.settled.add(step_id)
        if entry is not None:
            self.entries[step_id] = entry
        for position in self._dependents.get(step_id, ()):
            dependent = self._steps[position]
            self._waiting[dependent] -= 1
            if not self._waiting[dependent]:
                heapq.heappush(self._ready, position)

    def missing(self, step_id: str) -> list[str]:
        """The needs of `step_id` that left no entry: while there are any, its key cannot be known."""
        return sorted(need for need in self.pipeline.dag.deps[step_id] if need not in self.entries)
