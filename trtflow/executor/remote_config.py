"""Which remote cache a command uses and how its filesystem is opened: the workspace's named
remotes, $TRTFLOW_REMOTE, $TRTFLOW_REMOTE_OPTIONS and the short timeouts an S3 remote gets.

Kept apart from the store (`remote.py`) so `trtflow remote list` and `inspect` of a workspace read
the configuration without the object store's machinery.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trtflow.errors import UsageError
from trtflow.executor.workspace import write_atomically

REMOTE_VARIABLE = "TRTFLOW_REMOTE"
OPTIONS_VARIABLE = "TRTFLOW_REMOTE_OPTIONS"
CONFIG = "config.json"  # in the workspace: {"remotes": {name: url}, "default": name}
# What an S3 remote gets unless $TRTFLOW_REMOTE_OPTIONS says otherwise. botocore's defaults (60 s
# connect timeout, 5 attempts) under s3fs's own 5 attempts made an endpoint that accepts
# connections and never answers cost 413 s before the run's first failure (13 s for one that
# refuses them). A run that cannot reach its remote stops using it and computes locally, so the
# first failure should come in seconds: two botocore attempts (standard mode: connection errors,
# timeouts, throttling) and no second layer of s3fs retries around it. A read timeout is the
# wait for the next bytes, not for a whole transfer, so large blobs are unaffected.
S3_DEFAULTS: dict[str, Any] = {
    "retries": 1,  # s3fs's attempts per call (an attribute of S3FileSystem, set after opening)
    "config_kwargs": {
        "connect_timeout": 3,
        "read_timeout": 5,
        "retries": {"total_max_attempts": 2, "mode": "standard"},
    },
}


def configured_remotes(workspace_root: Path) -> tuple[dict[str, str], str | None]:
    """The remotes kept in a workspace (`trtflow remote add`), and the default one's name."""
    try:
        config = json.loads((workspace_root / CONFIG).read_text())
    except (OSError, ValueError):
        return {}, None
    remotes = config.get("remotes") if isinstance(config, dict) else None
    if not isinstance(remotes, dict):
        return {}, None
    return remotes, config.get("default") if config.get("default") in remotes else None


def save_remotes(workspace_root: Path, remotes: dict[str, str], default: str | None) -> None:
    """Replace the workspace's remotes (written under a lock and renamed: concurrent edits never tear it)."""
    workspace_root.mkdir(parents=True, exist_ok=True)
    path = workspace_root / CONFIG
    from filelock import FileLock  # imported when taken: a cached run takes no lock

    with FileLock(workspace_root / f"{CONFIG}.lock"):
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError):
            config = {}
        config = config if isinstance(config, dict) else {}
        config["remotes"] = remotes
        config.pop("default", None)
        if default is not None:
            config["default"] = default
        write_atomically(path, json.dumps(config, indent=1, sort_keys=True))


def _merged(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """`given` over `defaults`, mapping by mapping one level down: a user's `{"config_kwargs":
    {"read_timeout": 60}}` replaces that one setting and keeps the other defaults, while their
    `retries` mapping replaces ours whole (botocore reads `total_max_attempts` before
    `max_attempts`, so a merged mapping would ignore theirs)."""
    merged = dict(defaults)
    for name, value in given.items():
        default = defaults.get(name)
        if isinstance(default, dict) and isinstance(value, dict):
            value = {**default, **value}
        merged[name] = value
    return merged


def is_s3(url: str) -> bool:
    return url.split("://", 1)[0].lower() in ("s3", "s3a") if "://" in url else False


def backend_options(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options a remote's filesystem is opened with: the user's, over S3_DEFAULTS for s3://."""
    return _merged(S3_DEFAULTS, options) if is_s3(url) else dict(options)


def storage_options() -> dict[str, Any]:
    """fsspec storage options from $TRTFLOW_REMOTE_OPTIONS (JSON), e.g. an S3 endpoint:
    `{"client_kwargs": {"endpoint_url": "http://minio:9000"}}`. Credentials come from each
    backend's usual variables (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, GOOGLE_APPLICATION_CREDENTIALS...)."""
    text = os.environ.get(OPTIONS_VARIABLE, "").strip()
    if not text:
        return {}
    try:
        options = json.loads(text)
    except ValueError as error:
        raise UsageError(
            f"${OPTIONS_VARIABLE} is not valid JSON ({error}); give a JSON object of fsspec storage "
            'options, e.g. {"client_kwargs": {"endpoint_url": "http://host:9000"}}'
        ) from None
    if not isinstance(options, dict):
        raise UsageError(
            f"${OPTIONS_VARIABLE} must be a JSON object of fsspec storage options, not {text!r}"
        )
    return options


def choose_remote(workspace_root: Path, asked: str | None) -> str | None:
    """The remote URL a command uses: `--remote URL|NAME`, else $TRTFLOW_REMOTE, else the workspace's
    default remote; None when there is none."""
    remotes, default = configured_remotes(workspace_root)
    chosen, option = (
        (asked, "--remote")
        if asked
        else (os.environ.get(REMOTE_VARIABLE, "").strip(), f"${REMOTE_VARIABLE}")
    )
    if not chosen:
        return remotes[default] if default else None
    if "://" in chosen:
        return chosen
    if chosen in remotes:
        return remotes[chosen]
    known = f"; remotes of this workspace: {', '.join(sorted(remotes))}" if remotes else ""
    raise UsageError(
        f"{option} {chosen}: no remote of that name{known}; give a URL (file:///shared/cache, "
        "s3://bucket/prefix, gs://..., az://...) or add one with `trtflow remote add NAME URL`"
    )
