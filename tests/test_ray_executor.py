"""`--executor ray`: steps run as Ray tasks give what threads give; a lost worker is a retried step.

One local Ray cluster (2 CPUs, and 1 GPU it is told it has, so GPU placement can be seen on a CPU
machine) is started for the module; each `trtflow run` connects to it with `--address`, as a user
connects to a team's cluster. Starting Ray costs seconds, so only one test starts its own.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ledger_lines, write_recipe
from run_compare.models import mlp_chain, save
from test_executors import WRONG_PARAM, progress_came_before_finish, same_as_threads

from trtflow.errors import StepError
from trtflow.executor.pools import RAY_RETRIES, run_on_ray_worker
from trtflow.executor.tasks import StepTask, worker_workspace
from trtflow.schema.recipe import Resources

try:
    import ray
except ImportError:
    ray = None

requires_ray = pytest.mark.skipif(
    ray is None, reason="Ray is not installed (pip install 'trtflow[ray]')"
)
# one pytest-xdist worker runs them all: one test cluster, and no other worker's Ray starting or
# stopping while a test counts this machine's Ray clusters
pytestmark = pytest.mark.xdist_group("ray")

NO_TOKEN = {
    "RAY_AUTH_MODE": "disabled"
}  # the test cluster and the runs that join it agree on no auth token


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The address of a Ray cluster shared by this module's runs."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in NO_TOKEN.items():
            patch.setenv(name, value)
        ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
        try:
            yield ray.get_runtime_context().gcs_address
        finally:
            ray.shutdown()


@pytest.fixture
def ray_env(plugin_env) -> dict:
    return {**plugin_env, **NO_TOKEN}


@requires_ray
def test_ray_gives_the_keys_and_outputs_of_the_thread_pool(trtflow, tmp_path, ray_env, cluster):
    threads, on_ray, by_ray = same_as_threads(
        trtflow, tmp_path, ray_env, "--executor", "ray", "--address", cluster
    )
    assert progress_came_before_finish(by_ray.stdout), (
        by_ray.stdout
    )  # events came back from the Ray workers
    again = trtflow(
        "run",
        on_ray / "recipe.yaml",
        "--workspace",
        threads / "ws",
        "--executor",
        "ray",
        "--address",
        cluster,
        cwd=on_ray,
        env=ray_env,
    )
    assert again.returncode == 0 and "8 cached" in again.stdout, again.stdout + again.stderr


KILLED = """
trtflow: 1
name: killed
steps:
  slow: {uses: test-pid, with: {seconds: 6}}
  after: {uses: test-sleep, with: {text: "after", source: "${steps.slow.log}"}}
"""


def _computed(env: dict, step: str) -> list[int]:
    """The pids of the processes that started computing `step`, in order."""
    return [
        int(line.split()[2]) for line in ledger_lines(env) if line.startswith(f"compute {step} ")
    ]


def _start_run(recipe: Path, workspace: Path, env: dict, address: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trtflow",
            "run",
            str(recipe),
            "--workspace",
            str(workspace),
            "--executor",
            "ray",
            "--address",
            address,
        ],
        cwd=recipe.parent,
        env={**os.environ, **env, "NO_COLOR": "1", "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _kill_attempts(run: subprocess.Popen, env: dict, step: str, attempts: int) -> list[int]:
    """SIGKILL the worker of each of the step's first `attempts` attempts once it has started writing."""
    killed: list[int] = []
    deadline = time.monotonic() + 90
    while len(killed) < attempts:
        started = _computed(env, step)
        if len(started) > len(killed):
            os.kill(started[len(killed)], signal.SIGKILL)
            killed.append(started[len(killed)])
        assert time.monotonic() < deadline and run.poll() is None, (
            f"attempt {len(killed) + 1} never started"
        )
        time.sleep(0.05)
    return killed


@requires_ray
def test_a_ray_worker_killed_mid_step_means_a_retried_step_and_no_half_entry(
    trtflow, tmp_path, ray_env, cluster
):
    recipe = write_recipe(tmp_path, KILLED)
    workspace = tmp_path / "ws"
    run = _start_run(recipe, workspace, ray_env, cluster)
    (first,) = _kill_attempts(run, ray_env, "slow", 1)
    stdout, stderr = run.communicate(timeout=120)

    assert run.returncode == 0, stdout + stderr
    assert re.search(r"ran\s+slow", stdout) and re.search(r"ran\s+after", stdout), stdout
    pids = _computed(ray_env, "slow")
    assert len(pids) == 2 and pids[0] == first and pids[1] != first  # retried in another worker
    (entry,) = [path for path in (workspace / "store").glob("??/*") if (path / "log.txt").exists()]
    assert (entry / "log.txt").read_text() == f"{pids[1]}\n"  # the entry is the retry's, whole
    (killed,) = (
        workspace / "store" / "tmp"
    ).iterdir()  # what the killed attempt wrote stayed private
    assert (killed / "log.txt").read_text() == f"{first}\n"
    verify = trtflow("cache", "verify", "--workspace", workspace, cwd=tmp_path)
    assert verify.returncode == 0 and "verified 2 entries: 0 damaged" in verify.stdout, (
        verify.stdout
    )


@requires_ray
def test_a_step_whose_worker_is_lost_on_every_attempt_fails_and_leaves_no_entry(
    trtflow, tmp_path, ray_env, cluster
):
    recipe = write_recipe(tmp_path, KILLED.replace("seconds: 6", "seconds: 60"))
    workspace = tmp_path / "ws"
    run = _start_run(recipe, workspace, ray_env, cluster)
    _kill_attempts(run, ray_env, "slow", RAY_RETRIES + 1)
    stdout, stderr = run.communicate(timeout=120)

    assert run.returncode == 3, stdout + stderr
    output = " ".join((stdout + stderr).split())
    assert "step `slow`: Ray could not finish it (3 attempts): WorkerCrashedError" in output, output
    assert "needs `slow`, which did not finish" in output and "Traceback" not in output
    assert not list((workspace / "store").glob("??/*"))
    assert len(list((workspace / "store" / "tmp").iterdir())) == 3


@requires_ray
def test_a_param_error_in_a_ray_worker_points_at_the_param(trtflow, tmp_path, ray_env, cluster):
    recipe = write_recipe(tmp_path, WRONG_PARAM)
    save(mlp_chain(layers=2), tmp_path / "model.onnx")
    result = trtflow(
        "run", recipe, "--executor", "ray", "--address", cluster, cwd=tmp_path, env=ray_env
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert (
        f"{recipe}:8:" in output
        and "steps.diff.with.results" in output
        and "is not a results folder" in output
    )
    assert "Traceback" not in output


PLACED = """
trtflow: 1
name: placed
steps:
  plain: {uses: test-pid}
  pinned: {uses: test-pid, resources: {gpu: 1, memory_mb: 64}, with: {seconds: 0.1}}  # another key than plain's
  greedy: {uses: test-pid, resources: {gpu: 2}}
"""


@requires_ray
def test_a_step_runs_on_a_node_with_the_gpus_it_declares_and_one_no_node_can_take_fails(
    trtflow, tmp_path, ray_env, cluster
):
    recipe = write_recipe(tmp_path, PLACED)
    result = trtflow(
        "run",
        recipe,
        "--executor",
        "ray",
        "--address",
        cluster,
        "--jobs",
        "2",
        cwd=tmp_path,
        env=ray_env,
    )
    assert result.returncode == 3, result.stdout + result.stderr
    gpus = {line.split()[1]: line.split()[3] for line in ledger_lines(ray_env)}
    assert gpus == {"plain": "gpus=", "pinned": "gpus=0"}  # Ray gave `pinned` the cluster's GPU
    assert re.search(r"ran\s+plain", result.stdout) and re.search(r"ran\s+pinned", result.stdout), (
        result.stdout
    )
    message = " ".join((result.stdout + result.stderr).split())
    assert (
        "step `greedy`: needs 2 GPU; no node of the Ray cluster has that much (nodes: 2 CPU, 1 GPU,"
        in message
    )
    assert "Traceback" not in message


@requires_ray
def test_without_an_address_a_local_ray_runs_the_recipe_and_stops_with_it(
    trtflow, tmp_path, ray_env
):
    recipe = write_recipe(tmp_path, KILLED.replace("seconds: 6", "seconds: 0"))
    before = _ray_servers()
    result = trtflow("run", recipe, "--executor", "ray", "--jobs", "2", cwd=tmp_path, env=ray_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 ran" in result.stdout, result.stdout
    assert (
        not _ray_servers() - before
    )  # the cluster it started is gone (an older one may stop meanwhile)


def _descendants(root: int) -> dict[int, str]:
    """The live descendants of process `root`, each with its start time (a reused pid has
    another), so that whether they outlive `root` can be seen."""
    parents, started = {}, {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit():
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                if fields[0] != "Z":  # a zombie has stopped
                    parents[int(proc.name)], started[int(proc.name)] = int(fields[1]), fields[19]
        except OSError:
            continue
    found: set[int] = set()
    while grown := {pid for pid, parent in parents.items() if parent in found | {root}} - found:
        found |= grown
    return {pid: started[pid] for pid in found}


def _alive(processes: dict[int, str]) -> list[int]:
    alive = []
    for pid, started in processes.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and fields[19] == started:
            alive.append(pid)
    return alive


@requires_ray
def test_a_killed_run_takes_the_local_ray_it_started_along(tmp_path, ray_env):
    """SIGKILL runs nothing of the run: its local Ray's dashboard and runtime env agents lived on
    for up to 105 s (issue 31 item 6). The run's descendants are listed while it runs."""
    recipe = write_recipe(tmp_path, KILLED.replace("seconds: 6", "seconds: 60"))
    run = subprocess.Popen(
        [sys.executable, "-m", "trtflow", "run", str(recipe), "--executor", "ray"],
        cwd=tmp_path,
        env={**os.environ, **ray_env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ray_processes: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 120
        while not _computed(ray_env, "slow") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _computed(ray_env, "slow"), "the step never started"
        time.sleep(1)  # the agents are up (the step ran on a worker the raylet started)
        ray_processes = _descendants(run.pid)
        names = {Path(f"/proc/{pid}/cmdline").read_bytes()[:20] for pid in ray_processes}
        assert any(b"DashboardAgent" in name for name in names), names  # and gcs, raylet...
        run.kill()
        run.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(ray_processes) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = {
            pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:40] for pid in _alive(ray_processes)
        }
        assert left == {}
    finally:  # leave nothing behind, even when the test fails
        run.kill()
        for pid in _alive(ray_processes):
            os.kill(pid, signal.SIGKILL)


def _ray_servers() -> set[int]:
    """Pids of the Ray cluster head processes running on this machine."""
    servers = set()
    for proc in Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and b"gcs_server" in (proc / "cmdline").read_bytes().split(b"\0")[0]
            ):
                servers.add(int(proc.name))
        except OSError:
            continue
    return servers


def test_ray_missing_is_a_usage_error_that_says_what_to_install(trtflow, tmp_path, plugin_env):
    no_ray = tmp_path / "no-ray" / "ray"
    no_ray.mkdir(parents=True)
    (no_ray / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    recipe = write_recipe(tmp_path, KILLED)
    env = {
        **plugin_env,
        "PYTHONPATH": os.pathsep.join([str(no_ray.parent), plugin_env["PYTHONPATH"]]),
    }
    result = trtflow("run", recipe, "--executor", "ray", cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--executor ray needs Ray: pip install 'trtflow[ray]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_address_without_the_ray_executor_is_a_usage_error(trtflow, tmp_path, plugin_env):
    recipe = write_recipe(tmp_path, KILLED)
    result = trtflow("run", recipe, "--address", "auto", cwd=tmp_path, env=plugin_env)
    assert result.returncode == 2
    assert (
        "--address auto: only --executor ray runs on a cluster; add --executor ray" in result.stderr
    )


@requires_ray
def test_an_address_nothing_answers_at_is_a_usage_error(trtflow, tmp_path, plugin_env):
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    recipe = write_recipe(tmp_path, KILLED)
    result = trtflow(
        "run", recipe, "--executor", "ray", "--address", address, cwd=tmp_path, env=plugin_env
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        f"--address {address}: no Ray cluster answers there (Connection refused); start one"
        in result.stderr
    )


def test_a_ray_worker_that_does_not_see_the_workspace_and_has_no_remote_says_so(tmp_path):
    task = StepTask("slow", "killed", tmp_path, None, Resources(), tmp_path / "elsewhere", False)
    with pytest.raises(
        StepError,
        match="does not see the workspace .*elsewhere: Ray workers need the workspace on a "
        "disk every node mounts at that path, or a remote cache to exchange entries "
        r"through \(`--remote URL`, without --no-push\)",
    ):
        run_on_ray_worker(task, None)


CHAIN = """
trtflow: 1
name: chain
steps:
  first: {uses: test-sleep, with: {text: hello, size_kb: 3}}
  second: {uses: test-sleep, with: {text: "after ", source: "${steps.first.out}"}}
"""

HIDE = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'


def _can_hide_folders() -> bool:
    """Whether this machine lets a process mount a folder only it sees (a private mount namespace)."""
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs none /mnt"], capture_output=True
    )
    return probe.returncode == 0


requires_private_mounts = pytest.mark.skipif(
    shutil.which("unshare") is None or not _can_hide_folders(),
    reason="needs `unshare -m` to give the run a folder Ray workers cannot see",
)


def _entries(store: Path) -> dict[str, str]:
    """Each entry of a store: its key, and the content of its `out.txt`."""
    return {path.name: (path / "out.txt").read_text() for path in store.glob("??/*")}


@requires_ray
@requires_private_mounts
def test_a_ray_worker_sharing_no_disk_with_the_run_exchanges_entries_through_the_remote(
    trtflow, tmp_path, ray_env, cluster
):
    """The run's workspace is in a folder mounted only in the run's mount namespace: the Ray workers
    cannot see it, as on nodes that share no disk with the run."""
    recipe = write_recipe(tmp_path, CHAIN)
    threads = trtflow("run", recipe, "--workspace", tmp_path / "threads", cwd=tmp_path, env=ray_env)
    assert threads.returncode == 0, threads.stdout + threads.stderr
    real, hidden = tmp_path / "real", tmp_path / "hidden"
    real.mkdir(), hidden.mkdir()
    workspace = (
        hidden / "ws"
    )  # what the run calls its workspace; nothing outside its namespace sees it
    worker_side = worker_workspace(workspace)
    try:
        run = subprocess.run(
            [
                "unshare",
                "-m",
                "sh",
                "-c",
                HIDE,
                "sh",
                str(real),
                str(hidden),
                sys.executable,
                "-m",
                "trtflow",
                "run",
                str(recipe),
                "--workspace",
                str(workspace),
                "--executor",
                "ray",
                "--address",
                cluster,
                "--remote",
                f"file://{tmp_path / 'remote'}",
            ],
            cwd=tmp_path,
            env={**os.environ, **ray_env, "NO_COLOR": "1", "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert "2 ran" in run.stdout, run.stdout
        expected = _entries(tmp_path / "threads" / "store")
        assert len(expected) == 2
        assert (
            _entries(real / "ws" / "store") == expected
        )  # the run fetched what the workers computed
        # the workers ran in a workspace of their own, `second` on the copy of `first` they fetched
        assert _entries(worker_side / "store") == expected
    finally:
        shutil.rmtree(worker_side, ignore_errors=True)
