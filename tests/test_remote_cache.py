"""The team cache: two workspaces share a remote (a `file://` folder, and S3 served by a real moto
server), and the second answers from what the first pushed — through `trtflow run`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ledger_lines, run_cli, write_recipe

from trtflow.executor.hashing import list_files

RECIPE = """
trtflow: 1
name: team
steps:
  first: {uses: test-sleep, with: {text: hello, size_kb: 300}}
  second: {uses: test-sleep, with: {text: "length ${steps.first.length}"}}
"""


@dataclass
class Remote:
    url: str
    env: dict[str, str]
    blobs: Callable[[], list[str]]  # the remote's blob paths
    entries: Callable[[], list[str]]  # the remote's manifest paths
    flip_byte: Callable[[str], None]  # damage one blob in place, keeping its size


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def moto_endpoint():
    """A real S3-compatible server (moto in server mode), for the whole session."""
    pytest.importorskip("moto.server", reason="pip install 'trtflow[test]' (moto[server])")
    pytest.importorskip("s3fs", reason="pip install 'trtflow[remote]'")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail("moto_server did not start")
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(timeout=30)


S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _s3_remote(endpoint: str, bucket: str, extra_options: dict | None = None) -> Remote:
    import s3fs

    os.environ.update(S3_CREDENTIALS)
    options = {"client_kwargs": {"endpoint_url": endpoint}, **(extra_options or {})}
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir(bucket)

    def listing(folder: str) -> Callable[[], list[str]]:
        def paths() -> list[str]:
            fs.invalidate_cache()
            return fs.find(f"{bucket}/cache/{folder}")

        return paths

    def flip_byte(path: str) -> None:
        content = bytearray(fs.cat_file(path))
        content[0] ^= 0xFF
        fs.pipe_file(path, bytes(content))

    env = {**S3_CREDENTIALS, "TRTFLOW_REMOTE_OPTIONS": json.dumps(options)}
    return Remote(f"s3://{bucket}/cache", env, listing("blobs"), listing("entries"), flip_byte)


def _folder_remote(folder: Path) -> Remote:
    def flip_byte(path: str) -> None:
        blob = Path(path)
        content = bytearray(blob.read_bytes())
        content[0] ^= 0xFF
        blob.write_bytes(bytes(content))

    def listing(name: str) -> Callable[[], list[str]]:
        return lambda: sorted(str(p) for p in (folder / name).rglob("*") if p.is_file())

    return Remote(folder.as_uri(), {}, listing("blobs"), listing("entries"), flip_byte)


@pytest.fixture(params=["file", "s3"])
def remote(request, tmp_path) -> Remote:
    if request.param == "file":
        return _folder_remote(tmp_path / "shared-cache")
    endpoint = request.getfixturevalue("moto_endpoint")
    return _s3_remote(
        endpoint, f"trtflow-{request.node.name.split('[')[0][5:30].replace('_', '-')}-{os.getpid()}"
    )


def _run(tmp_path: Path, plugin_env: dict, remote: Remote, workspace: str, *extra: str):
    recipe = tmp_path / "recipe.yaml"
    if not recipe.exists():
        write_recipe(tmp_path, RECIPE)
    return run_cli(
        "run",
        recipe,
        "--workspace",
        tmp_path / workspace,
        "--out",
        tmp_path / f"out-{workspace}",
        "--remote",
        remote.url,
        *extra,
        cwd=tmp_path,
        env={**plugin_env, **remote.env},
    )


def _outputs(tmp_path: Path, workspace: str, manifests: bool = False) -> dict[str, bytes]:
    """The files of a workspace's output links; manifests (which hold when an entry was computed)
    only when asked: a recomputed entry has the same outputs, not the same manifest."""
    folder = tmp_path / f"out-{workspace}" / "team"  # links into the workspace's store
    return {
        name: (folder / name).read_bytes()
        for name in list_files(folder)
        if manifests or not name.endswith("/manifest.json")
    }


def test_second_workspace_runs_no_step_and_gets_identical_outputs(tmp_path, plugin_env, remote):
    first = _run(tmp_path, plugin_env, remote, "alice")
    assert first.returncode == 0, first.stderr
    assert len(remote.entries()) == 2
    computed = ledger_lines(plugin_env)
    assert computed == ["compute first hello", "compute second length 5"]

    second = _run(tmp_path, plugin_env, remote, "bob")
    assert second.returncode == 0, second.stderr
    assert ledger_lines(plugin_env) == computed  # bob computed nothing
    assert "2 cached" in second.stdout
    assert _outputs(tmp_path, "bob", manifests=True) == _outputs(tmp_path, "alice", manifests=True)
    assert set(_outputs(tmp_path, "bob", manifests=True)) == {
        f"{step}/{name}"
        for step in ("first", "second")
        for name in ("out.txt", "values.json", "manifest.json")
    }


def test_damaged_remote_entry_is_detected_recomputed_and_repaired(tmp_path, plugin_env, remote):
    assert _run(tmp_path, plugin_env, remote, "alice").returncode == 0
    first_out = next(path for path in remote.blobs() if _blob_is(path, "first/out.txt", tmp_path))
    remote.flip_byte(first_out)

    damaged = _run(tmp_path, plugin_env, remote, "bob")
    assert damaged.returncode == 0, damaged.stderr
    assert "is damaged (out.txt: content does not match its sha256)" in damaged.stderr
    assert ledger_lines(plugin_env).count("compute first hello") == 2  # recomputed, never used
    assert _outputs(tmp_path, "bob") == _outputs(tmp_path, "alice")

    repaired = _run(tmp_path, plugin_env, remote, "carol")  # bob's push rewrote the damaged blob
    assert repaired.returncode == 0, repaired.stderr
    assert "damaged" not in repaired.stderr
    assert ledger_lines(plugin_env).count("compute first hello") == 2
    assert _outputs(tmp_path, "carol") == _outputs(tmp_path, "alice")


def _blob_is(blob: str, output: str, tmp_path: Path) -> bool:
    """Whether `blob` holds the bytes of alice's `output` (blobs are named by their sha256)."""
    import hashlib

    digest = hashlib.sha256((tmp_path / "out-alice" / "team" / output).read_bytes()).hexdigest()
    return blob.endswith(digest)


def test_run_killed_during_push_leaves_remote_readable_and_next_run_completes_it(
    tmp_path, plugin_env, moto_endpoint
):
    remote = _s3_remote(
        moto_endpoint, f"trtflow-killed-{os.getpid()}", {"default_block_size": 5 * 2**20}
    )
    write_recipe(tmp_path, RECIPE.replace("size_kb: 300", "size_kb: 40000"))
    command = [
        sys.executable,
        "-m",
        "trtflow",
        "run",
        "recipe.yaml",
        "--workspace",
        "alice",
        "--out",
        "out-alice",
        "--remote",
        remote.url,
    ]
    env = {
        **{k: v for k, v in os.environ.items() if k != "TRTFLOW_WORKSPACE"},
        **plugin_env,
        **remote.env,
        "TRTFLOW_PROGRESS_SECONDS": "0.05",
        "COLUMNS": "200",
        "NO_COLOR": "1",
    }
    killed = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for line in killed.stdout:
        if "first:" in line and "pushing to remote" in line:
            killed.send_signal(signal.SIGKILL)
            break
    assert killed.wait(timeout=120) == -signal.SIGKILL, "the push finished before the kill"
    assert remote.entries() == []  # no manifest: the half-pushed entry does not exist for readers

    reader = _run(tmp_path, plugin_env, remote, "bob", "--no-push")
    assert reader.returncode == 0, reader.stderr
    assert ledger_lines(plugin_env).count("compute first hello") == 2  # bob found nothing, computed
    assert remote.entries() == []

    resumed = _run(
        tmp_path, plugin_env, remote, "alice"
    )  # first is cached in alice: its push completes now
    assert resumed.returncode == 0, resumed.stderr
    assert len(remote.entries()) == 2

    last = _run(tmp_path, plugin_env, remote, "carol")
    assert last.returncode == 0, last.stderr
    assert ledger_lines(plugin_env).count("compute first hello") == 2
    assert _outputs(tmp_path, "carol") == _outputs(tmp_path, "alice")


def test_a_remote_entry_of_the_older_store_format_is_pushed_again(tmp_path, plugin_env):
    """A remote filled by a trtflow before store format 2 holds manifests a fetch cannot use: a run
    that finds those steps cached locally pushes them again, so colleagues stop recomputing them."""
    shared = _folder_remote(tmp_path / "nfs")
    assert _run(tmp_path, plugin_env, shared, "alice").returncode == 0
    for path in shared.entries():  # as the older trtflow wrote them
        manifest = json.loads(Path(path).read_text())
        Path(path).write_text(json.dumps({**manifest, "format": 1}))

    cached = _run(tmp_path, plugin_env, shared, "alice")
    assert cached.returncode == 0 and "2 cached" in cached.stdout, cached.stderr
    assert [json.loads(Path(path).read_text())["format"] for path in shared.entries()] == [2, 2]
    bob = _run(tmp_path, plugin_env, shared, "bob")
    assert bob.returncode == 0 and "2 cached" in bob.stdout, bob.stderr
    assert len(ledger_lines(plugin_env)) == 2  # computed once, by alice


def test_configured_default_remote_offline_and_no_push(tmp_path, plugin_env):
    shared = _folder_remote(tmp_path / "nfs")
    recipe = write_recipe(tmp_path, RECIPE)
    space = tmp_path / "alice"
    added = run_cli("remote", "add", "team", shared.url, "--default", "--workspace", space)
    assert added.returncode == 0, added.stderr
    listed = run_cli("remote", "list", "--workspace", space)
    assert listed.stdout.split() == ["team", shared.url, "(default)"]

    offline = run_cli(
        "run", recipe, "--workspace", space, "--offline", cwd=tmp_path, env=plugin_env
    )
    assert offline.returncode == 0, offline.stderr
    assert shared.entries() == []
    no_push = run_cli(
        "run", recipe, "--workspace", space, "--no-push", cwd=tmp_path, env=plugin_env
    )
    assert no_push.returncode == 0 and shared.entries() == []
    pushing = run_cli(
        "run", recipe, "--workspace", space, cwd=tmp_path, env=plugin_env
    )  # the default remote
    assert pushing.returncode == 0, pushing.stderr
    assert len(shared.entries()) == 2

    removed = run_cli("remote", "remove", "team", "--workspace", space)
    assert removed.returncode == 0 and run_cli("remote", "list", "--workspace", space).stdout == ""


def test_push_and_pull_by_hand(tmp_path, plugin_env):
    shared = _folder_remote(tmp_path / "nfs")
    recipe = write_recipe(tmp_path, RECIPE)
    ran = run_cli("run", recipe, "--workspace", tmp_path / "alice", cwd=tmp_path, env=plugin_env)
    assert ran.returncode == 0, ran.stderr
    pushed = run_cli(
        "push", recipe, "--workspace", tmp_path / "alice", "--remote", shared.url, env=plugin_env
    )
    assert pushed.returncode == 0, pushed.stderr
    assert f"pushed 2 entries to {shared.url} (0 already there)" in pushed.stdout

    pulled = run_cli(
        "pull",
        recipe,
        "--workspace",
        tmp_path / "bob",
        env={**plugin_env, "TRTFLOW_REMOTE": shared.url},
    )
    assert pulled.returncode == 0, pulled.stderr
    assert (
        f"pulled 2 entries from {shared.url}" in pulled.stdout
    )  # second's key is known once first is pulled
    offline = run_cli(
        "run", recipe, "--workspace", tmp_path / "bob", "--offline", cwd=tmp_path, env=plugin_env
    )
    assert offline.returncode == 0 and "2 cached" in offline.stdout
    assert len(ledger_lines(plugin_env)) == 2


def test_unreachable_remote_is_a_warning_and_the_run_completes(tmp_path, plugin_env):
    (tmp_path / "a-file").write_text("not a folder")
    broken = _folder_remote(tmp_path / "a-file" / "cache")
    result = _run(tmp_path, plugin_env, broken, "alice")
    assert result.returncode == 0, result.stderr
    assert "computing here instead" in result.stderr
    assert "keeps its results locally (`trtflow push` uploads them later)" in result.stderr
    assert "Traceback" not in result.stderr


class _DeadEndpoint:
    """A TCP port that hangs up on every request, counting the connections: an S3 endpoint that
    is there but never answers."""

    def __init__(self):
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            self.connections += 1
            with connection:  # the request is read whole, then the line goes dead: every
                connection.settimeout(5)  # attempt fails the same way, however loaded the machine
                request = b""
                try:
                    while b"\r\n\r\n" not in request and (chunk := connection.recv(65536)):
                        request += chunk
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._listener.close()


def test_a_dead_s3_endpoint_costs_one_failure_said_once(tmp_path, plugin_env):
    """After the first failure to reach the remote the run stops asking it: one warning, and a
    3-step run makes no more requests to it than a 1-step run (not one lookup, one push and their
    retries per step)."""
    pytest.importorskip("s3fs", reason="pip install 'trtflow[remote]'")
    one_step = RECIPE.split("  second:")[0]
    three_steps = RECIPE + '  third: {uses: test-sleep, with: {text: "3 ${steps.second.length}"}}\n'
    asked = []
    for name, text in (("one", one_step), ("three", three_steps)):
        endpoint = _DeadEndpoint()
        dead = Remote(
            "s3://nobody-answers/cache",
            {
                **S3_CREDENTIALS,
                "TRTFLOW_REMOTE_OPTIONS": json.dumps(
                    {
                        "client_kwargs": {"endpoint_url": endpoint.url},
                        # no botocore retry (max_attempts counts retries; s3fs's own are off
                        # by default), so the count of connections says how often the run asked
                        "config_kwargs": {"retries": {"max_attempts": 0}},
                    }
                ),
            },
            list,
            list,
            print,
        )
        folder = tmp_path / name
        folder.mkdir()
        write_recipe(folder, text)
        try:
            result = _run(folder, plugin_env, dead, "alice", "--jobs", "1")
        finally:
            endpoint.close()
        assert result.returncode == 0, result.stderr
        assert f"{text.count('uses:')} ran" in result.stdout
        warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1, result.stderr
        assert "computing here instead, and this run no longer uses the remote" in warnings[0]
        assert "Traceback" not in result.stderr
        asked.append(endpoint.connections)
    assert asked[1] == asked[0] > 0, (asked, warnings)


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--remote", "team"], {}, "--remote team: no remote of that name"),
        ([], {"TRTFLOW_REMOTE": "nowhere"}, "$TRTFLOW_REMOTE nowhere: no remote of that name"),
        (
            ["--remote", "file:///x"],
            {"TRTFLOW_REMOTE_OPTIONS": "{bad"},
            "$TRTFLOW_REMOTE_OPTIONS is not valid JSON",
        ),
        (
            ["--remote", "file:///x", "--offline"],
            {},
            "--offline and --remote file:///x contradict each other",
        ),
        (["--remote", "nosuchscheme://bucket"], {}, "remote nosuchscheme://bucket:"),
    ],
)
def test_bad_remote_settings_are_usage_errors(tmp_path, plugin_env, args, env, message):
    recipe = write_recipe(tmp_path, RECIPE)
    result = run_cli(
        "run",
        recipe,
        "--workspace",
        tmp_path / "ws",
        *args,
        cwd=tmp_path,
        env={**plugin_env, **env},
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert ledger_lines(plugin_env) == []


def test_worker_processes_fetch_from_the_remote(tmp_path, plugin_env):
    """The remote travels inside each task, so a worker process (or machine) looks it up itself."""
    shared = _folder_remote(tmp_path / "nfs")
    assert _run(tmp_path, plugin_env, shared, "alice").returncode == 0
    result = _run(tmp_path, plugin_env, shared, "bob", "--executor", "process", "--jobs", "2")
    assert result.returncode == 0, result.stderr
    assert "2 cached" in result.stdout and len(ledger_lines(plugin_env)) == 2
    assert _outputs(tmp_path, "bob", manifests=True) == _outputs(tmp_path, "alice", manifests=True)


TWINS = """
trtflow: 1
name: team
steps:
  first: {uses: test-sleep, with: {text: hello, size_kb: 300}}
  twin: {uses: test-sleep, with: {text: hello, size_kb: 300, seconds: 0.01}}
  second: {uses: test-sleep, with: {text: "length ${steps.first.length}"}}
"""


def test_push_delete_the_store_pull_and_verify_is_clean(tmp_path, plugin_env, remote):
    """The local store and the remote are one object store: push moves the blobs the remote
    lacks (a blob two entries share, once), pull brings them back into an empty store and checks
    the entries out of them, and `cache verify` finds every blob and entry whole."""
    recipe = write_recipe(tmp_path, TWINS)
    env = {**plugin_env, **remote.env}
    workspace = tmp_path / "alice"
    out = ("--out", tmp_path / "out-alice")  # the links _outputs reads
    ran = run_cli("run", recipe, "--workspace", workspace, *out, "--offline", cwd=tmp_path, env=env)
    assert ran.returncode == 0, ran.stderr
    pushed = run_cli("push", recipe, "--workspace", workspace, "--remote", remote.url, env=env)
    assert pushed.returncode == 0, pushed.stderr
    # first and twin hold the same out.txt and values.json: 3 entries, 4 blobs
    assert f"pushed 3 entries to {remote.url} (0 already there): 4 blobs" in pushed.stdout
    assert len(remote.blobs()) == 4 and len(remote.entries()) == 3
    before = _outputs(tmp_path, "alice", manifests=True)

    shutil.rmtree(workspace / "store")
    pulled = run_cli("pull", recipe, "--workspace", workspace, "--remote", remote.url, env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert f"pulled 3 entries from {remote.url}: 4 blobs" in pulled.stdout
    verify = run_cli("cache", "verify", "--workspace", workspace)
    assert verify.returncode == 0, verify.stdout
    assert "verified 3 entries: 0 damaged; 4 blobs: 0 damaged" in verify.stdout
    cached = run_cli(
        "run", recipe, "--workspace", workspace, *out, "--offline", cwd=tmp_path, env=env
    )
    assert cached.returncode == 0 and "3 cached" in cached.stdout, cached.stdout
    assert _outputs(tmp_path, "alice", manifests=True) == before
    assert len(ledger_lines(plugin_env)) == 3

    # an edit: only the blobs of the changed entry travel, each way
    write_recipe(tmp_path, TWINS.replace("length ${steps", "size ${steps"))
    edited = run_cli("run", recipe, "--workspace", workspace, "--offline", cwd=tmp_path, env=env)
    assert edited.returncode == 0, edited.stderr
    again = run_cli("push", recipe, "--workspace", workspace, "--remote", remote.url, env=env)
    assert f"pushed 1 entries to {remote.url} (2 already there): 2 blobs" in again.stdout
    bob = tmp_path / "bob"
    pulled_by_bob = run_cli("pull", "--workspace", bob, "--remote", remote.url, env=env)
    assert f"pulled 4 entries from {remote.url}: 6 blobs" in pulled_by_bob.stdout
    assert run_cli("cache", "verify", "--workspace", bob).returncode == 0


def test_a_killed_push_leaves_nothing_the_next_push_does_not_collect(tmp_path, plugin_env):
    """On a folder remote an upload is written under `tmp/` and renamed; what a killed push left
    there is removed by the next push."""
    shared = _folder_remote(tmp_path / "nfs")
    write_recipe(tmp_path, RECIPE.replace("size_kb: 300", "size_kb: 60000"))
    ran = run_cli("run", "recipe.yaml", "--workspace", "alice", cwd=tmp_path, env=plugin_env)
    assert ran.returncode == 0, ran.stderr
    env = {
        **{k: v for k, v in os.environ.items() if k != "TRTFLOW_WORKSPACE"},
        **plugin_env,
        "COLUMNS": "200",
    }
    pushing = subprocess.Popen(
        [sys.executable, "-m", "trtflow", "push", "--workspace", "alice", "--remote", shared.url],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    leftovers = tmp_path / "nfs" / "tmp"
    deadline = time.monotonic() + 60
    while not (leftovers.is_dir() and any(p.stat().st_size for p in leftovers.iterdir())):
        assert time.monotonic() < deadline and pushing.poll() is None, "the push never started"
        time.sleep(0.01)
    pushing.send_signal(signal.SIGKILL)
    pushing.wait()
    assert list(leftovers.iterdir()), "the killed push left its upload behind"
    assert shared.entries() == [] or len(shared.entries()) < 2
    again = run_cli("push", "--workspace", tmp_path / "alice", "--remote", shared.url, env=env)
    assert again.returncode == 0, again.stderr
    assert "removed 1 leftovers of killed pushes" in again.stdout, again.stdout
    assert list(leftovers.iterdir()) == []
    assert len(shared.entries()) == 2
    assert not [p for p in (tmp_path / "nfs").rglob("*") if ".tmp" in p.name]


def test_leftovers_of_pushes_by_older_trtflow_are_collected_after_a_day(tmp_path, plugin_env):
    """Before `tmp/`, a killed push left `*.tmp-<pid>-<hex>` files beside the blobs and manifests:
    a push removes those a day old, and leaves a fresh one (another machine may be writing it)."""
    shared = _folder_remote(tmp_path / "nfs")
    recipe = write_recipe(tmp_path, RECIPE)
    ran = run_cli("run", recipe, "--workspace", tmp_path / "alice", cwd=tmp_path, env=plugin_env)
    assert ran.returncode == 0, ran.stderr
    stale = [
        tmp_path / "nfs" / "blobs" / "ab" / f"{'ab' * 32}.tmp-4242-0123abcd",
        tmp_path / "nfs" / "entries" / "cd" / f"{'cd' * 32}.json.tmp-4242-89abcdef",
    ]
    fresh = tmp_path / "nfs" / "blobs" / "ef" / f"{'ef' * 32}.tmp-4343-0123abcd"
    for path in [*stale, fresh]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half an upload")
    for path in stale:
        os.utime(path, (time.time() - 2 * 86400,) * 2)
    pushed = run_cli(
        "push", recipe, "--workspace", tmp_path / "alice", "--remote", shared.url, env=plugin_env
    )
    assert pushed.returncode == 0, pushed.stderr
    assert "removed 2 leftovers of killed pushes" in pushed.stdout, pushed.stdout
    assert not any(path.exists() for path in stale) and fresh.exists()


def test_gc_keep_evicts_nothing_a_push_is_uploading(tmp_path, plugin_env):
    """A push holds the workspace's run lease: `cache gc --keep` during it removes no entry (it
    says a run is using the workspace), and the push completes every entry."""
    shared = _folder_remote(tmp_path / "nfs")
    write_recipe(tmp_path, RECIPE.replace("size_kb: 300", "size_kb: 60000"))
    ran = run_cli("run", "recipe.yaml", "--workspace", "alice", cwd=tmp_path, env=plugin_env)
    assert ran.returncode == 0, ran.stderr
    other = write_recipe(tmp_path, RECIPE.replace("hello", "other"), "other.yaml")
    env = {
        **{k: v for k, v in os.environ.items() if k != "TRTFLOW_WORKSPACE"},
        **plugin_env,
        "COLUMNS": "200",
    }
    pushing = subprocess.Popen(
        [sys.executable, "-m", "trtflow", "push", "--workspace", "alice", "--remote", shared.url],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    uploads = tmp_path / "nfs" / "tmp"
    deadline = time.monotonic() + 60
    while not (uploads.is_dir() and any(p.stat().st_size for p in uploads.iterdir())):
        assert time.monotonic() < deadline and pushing.poll() is None, "the push never started"
        time.sleep(0.01)
    pushing.send_signal(signal.SIGSTOP)  # held midway while gc runs
    try:
        gc = run_cli(
            "cache", "gc", "--keep", other, "--force", "--workspace", tmp_path / "alice", env=env
        )
    finally:
        pushing.send_signal(signal.SIGCONT)
    out, err = pushing.communicate(timeout=120)
    assert gc.returncode == 0, gc.stderr
    assert "is using this workspace, so gc removed no entries" in gc.stdout + gc.stderr
    assert pushing.returncode == 0, err
    assert "pushed 2 entries" in out
    assert len(shared.entries()) == 2
    verify = run_cli("cache", "verify", "--workspace", tmp_path / "alice")
    assert "verified 2 entries: 0 damaged" in verify.stdout, verify.stdout


class _Watched:
    """A filesystem that counts the requests in flight at once (each takes 20 ms, as a far
    bucket's do)."""

    def __init__(self, fs):
        self._fs, self.flying, self.most = fs, 0, 0
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        found = getattr(self._fs, name)
        if name not in ("cat_file", "open"):
            return found

        def watched(*args, **kwargs):
            with self._lock:
                self.flying += 1
                self.most = max(self.most, self.flying)
            try:
                time.sleep(0.02)
                return found(*args, **kwargs)
            finally:
                with self._lock:
                    self.flying -= 1

        return watched


def test_a_many_file_entry_is_fetched_concurrently(tmp_path):
    """Each blob is a request: an entry of 200 files is fetched many blobs at a time, not one by one."""
    import fsspec

    from trtflow.executor.gc import verify_store
    from trtflow.executor.objects import WORKERS, transfer
    from trtflow.executor.remote import RemoteStore
    from trtflow.executor.store import Store
    from trtflow.steps.base import folder

    home = Store(tmp_path / "home")
    key = "ab" * 32
    work_dir = home.begin(key)
    (work_dir / "many").mkdir()
    for index in range(200):
        (work_dir / "many" / f"{index}.bin").write_bytes(f"file {index}".encode())
    home.commit(key, work_dir, {"many": folder("files")}, {}, {"step": "many"})
    url = (tmp_path / "shared").as_uri()
    fs, root = fsspec.core.url_to_fs(url)
    transfer(home, RemoteStore(url, fs, root), [key])

    watched = _Watched(fs)
    there = Store(tmp_path / "there")
    with there.lock(key):
        fetched = transfer(RemoteStore(url, watched, root), there, [key]).moved.get(key)
    assert fetched is not None and watched.most == WORKERS > 1
    assert verify_store(there).damaged == [] and len(list(there.blob_digests())) == 200
