"""Why a step is (or is not) up to date: its key, and what changed since it last ran.

A step's key is the sha256 of the canonical JSON of its *material*:
- `uses` and the step kind's `version` (bumped when the same params give other outputs);
- its validated params, cosmetic ones left out, with every path replaced by an identity —
  `{"artifact": digest}` for an earlier step's output, `{"file": digest}` for a user file — so a
  key depends on content, not on where files live;
- the environment facts the step kind declares (`Step.fingerprint`: onnxruntime version, GPU...).
Step order, descriptions and ids do not enter the key. The material also carries `labels`
(where each identity came from), which are not hashed and only serve `describe_changes` — the
answer `trtflow status` gives to "why will this step run again?".

The journal of a long step is keyed by the same material minus its search budget, and a replay
is checked against the material minus budget and machine facts (`replay_identity`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from trtflow.schema.source import format_path


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical(value).encode()).hexdigest()


def identify_paths(value: Any, identities: dict[str, tuple[str, str, str]], labels: dict[str, str],
                   at: tuple = ("with",)) -> Any:
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


def material(uses: str, version: int, params: dict, env: dict, labels: dict[str, str]) -> dict:
    return {"uses": uses, "version": version, "params": params, "env": env, "labels": labels}


def step_key(step_material: dict) -> str:
    return _digest({k: v for k, v in step_material.items() if k != "labels"})


def journal_key(step_material: dict, search_budget: frozenset[str]) -> str:
    params = {k: v for k, v in step_material["params"].items() if k not in search_budget}
    return _digest({**{k: v for k, v in step_material.items() if k != "labels"}, "params": params})


def replay_identity(step_material: dict, search_budget: frozenset[str]) -> dict:
    """What a replay must have been made for: kind, version and params, not budget or machine."""
    params = {k: v for k, v in step_material["params"].items() if k not in search_budget}
    labels = {k: v for k, v in step_material["labels"].items() if k.split(".")[1].split("[")[0] not in search_budget}
    return {"uses": step_material["uses"], "version": step_material["version"], "params": params, "labels": labels}


def _short(value: Any) -> str:
    text = canonical(value)
    return text if len(text) <= 50 else text[:47] + "..."


def _diff(old: Any, new: Any, at: tuple, old_labels: dict, new_labels: dict, out: list[str]) -> None:
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
        changes.append(f"step kind `{new.get('uses')}` changed its outputs (version {old.get('version')} -> {new.get('version')})")
    old_labels, new_labels = old.get("labels", {}), new.get("labels", {})
    _diff(old.get("params", {}), new.get("params", {}), ("with",), old_labels, new_labels, changes)
    if "env" in old or "env" in new:
        for name in sorted(set(old.get("env", {})) | set(new.get("env", {}))):
            before, after = old.get("env", {}).get(name), new.get("env", {}).get(name)
            if before != after:
                changes.append(f"environment: {name} {before} -> {after}")
    return changes
