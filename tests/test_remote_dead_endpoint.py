"""An S3 remote that is down costs seconds, not botocore's minutes: trtflow opens S3 remotes with
short timeouts and few attempts (remote_config.S3_DEFAULTS) that the user's $TRTFLOW_REMOTE_OPTIONS
override — through `trtflow run` against an endpoint that refuses connections and one that
accepts them and never answers (bench/dead_remote.py measures both)."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from conftest import write_recipe
from test_remote_cache import RECIPE, S3_CREDENTIALS, Remote, _run

from trtflow.errors import RemoteError
from trtflow.executor.remote import RemoteStore


class _Silent:
    """An endpoint that accepts every connection and never sends a byte (a hung server), counting
    the connections: each is one attempt of botocore's."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                self.held.append(self._listener.accept()[0])
            except TimeoutError:
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for connection in self.held:
            connection.close()
        self._listener.close()


def _refused_url() -> str:
    with socket.socket() as probe:  # bound, then closed: nothing listens on that port
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def _dead(endpoint: str, **options) -> Remote:
    settings = {"client_kwargs": {"endpoint_url": endpoint}, **options}
    env = {**S3_CREDENTIALS, "TRTFLOW_REMOTE_OPTIONS": json.dumps(settings)}
    return Remote("s3://nobody-answers/cache", env, list, list, print)


def _runs_with_one_warning(tmp_path, plugin_env, remote: Remote, name: str) -> str:
    folder = tmp_path / name
    folder.mkdir()
    write_recipe(folder, RECIPE)
    result = _run(folder, plugin_env, remote, "alice", "--jobs", "1")
    assert result.returncode == 0, result.stderr
    assert "2 ran" in result.stdout
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.stderr
    assert "computing here instead, and this run no longer uses the remote" in warnings[0]
    assert "Traceback" not in result.stderr
    return warnings[0]


def test_a_silent_s3_endpoint_is_given_up_after_two_attempts(tmp_path, plugin_env):
    """botocore's defaults (5 attempts, each waiting 60 s) under s3fs's 5 attempts asked a hung
    endpoint 25 times before the first failure; trtflow's defaults ask twice, and the user's
    options still win."""
    pytest.importorskip("s3fs", reason="pip install 'trtflow[remote]'")
    asked = {}
    for name, options in (
        ("defaults", {}),
        ("theirs", {"config_kwargs": {"read_timeout": 1, "retries": {"total_max_attempts": 3}}}),
    ):
        endpoint = _Silent()
        try:
            warning = _runs_with_one_warning(
                tmp_path, plugin_env, _dead(endpoint.url, **options), name
            )
        finally:
            endpoint.close()
        assert "ReadTimeoutError" in warning
        asked[name] = len(endpoint.held)
    assert asked == {"defaults": 2, "theirs": 3}


def test_a_refusing_s3_endpoint_is_one_warning(tmp_path, plugin_env):
    pytest.importorskip("s3fs", reason="pip install 'trtflow[remote]'")
    warning = _runs_with_one_warning(tmp_path, plugin_env, _dead(_refused_url()), "refused")
    assert "Could not connect to the endpoint URL" in warning


def test_the_s3_client_gets_short_timeouts_unless_the_user_says_otherwise(monkeypatch):
    """What the remote's filesystem hands botocore: trtflow's defaults, each overridable alone."""
    pytest.importorskip("s3fs", reason="pip install 'trtflow[remote]'")
    for name, value in S3_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    endpoint = {"client_kwargs": {"endpoint_url": _refused_url()}}
    for given, connect, read, botocore_attempts, mode, s3fs_attempts in (
        ({}, 3, 5, 2, "standard", 1),
        ({"config_kwargs": {"read_timeout": 30}, "retries": 4}, 3, 30, 2, "standard", 4),
        ({"config_kwargs": {"retries": {"max_attempts": 0}}}, 3, 5, 1, "legacy", 1),
    ):
        url = f"s3://nobody-{len(given)}-{s3fs_attempts}/cache"
        store = RemoteStore.open(url, {**endpoint, **given})
        with pytest.raises(RemoteError, match="Could not connect"):
            store.has("0" * 64)
        config = store.fs.s3.meta.config
        assert (config.connect_timeout, config.read_timeout) == (connect, read)
        assert (config.retries["total_max_attempts"], config.retries["mode"]) == (
            botocore_attempts,
            mode,
        )
        assert store.fs.retries == s3fs_attempts
