"""Where steps run (`trtflow run --executor NAME`): the seam between scheduling a run and running steps.

A pool takes a `StepTask` and returns a future of what `run_task` returns; what the step reports
on the way reaches the run's observer — directly from a thread, or through a queue that the run
loop relays from a worker process. `thread` (the default) runs steps in this process; `process`
runs each in a worker process that starts from nothing, as a worker on another machine sharing the
workspace would; `ray` runs each as a Ray task on a node that has the resources the step needs, sharing the workspace
or, on a node that shares no disk with the run, exchanging entries through the remote cache.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from trtflow.errors import StepError, UsageError
from trtflow.executor.store import Entry
from trtflow.executor.tasks import (
    StepEvents,
    StepTask,
    entry_here,
    progress_of,
    run_task,
    worker_workspace,
)

if TYPE_CHECKING:
    import subprocess
    from multiprocessing.queues import SimpleQueue

    from ray.util.queue import Queue as RayQueue

    from trtflow.executor.run import Observer


class StepPool:
    """Runs tasks, up to `jobs` at a time. `address` names the cluster of a pool that runs on one
    (`--address`); the CLI refuses it for the others."""

    relay_seconds: float | None = None
    """How often the run loop calls `relay`; None when events reach the observer by themselves."""

    def submit(self, task: StepTask) -> Future[tuple[Entry, bool]]:
        raise NotImplementedError

    def relay(self) -> None:
        """Hand the observer the events workers sent since the last call."""

    def shutdown(self) -> None:
        raise NotImplementedError


class ThreadPool(StepPool):
    """Steps run in threads of this process and call the observer themselves."""

    def __init__(self, jobs: int, observer: Observer, address: str | None = None):
        self.observer = observer
        self.executor = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="trtflow-step")

    def submit(self, task: StepTask) -> Future[tuple[Entry, bool]]:
        return self.executor.submit(run_task, task, self.observer)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


_events_to_run: SimpleQueue | None = None  # in a worker process: where its steps' events go


def _connect(events: SimpleQueue, parent: int, bound_to_process: bool) -> None:
    global _events_to_run
    _events_to_run = events
    _end_with_parent(parent, bound_to_process)


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _end_with_parent(parent: int, bound_to_process: bool) -> None:
    """A worker exits when the run that started it does (SIGKILL, SIGTERM, Ctrl-C, a crash):
    otherwise it is re-parented, keeps computing and commits into a workspace nobody watches.

    Linux delivers SIGKILL at once through PR_SET_PDEATHSIG; the signal follows the thread that
    spawned the worker, so it is asked only when that is the run's main thread
    (`bound_to_process`). Everywhere, a watcher thread ends the worker within a second of its
    parent changing; the check right after covers a parent that died before the watcher began."""
    if bound_to_process and sys.platform.startswith("linux"):
        import ctypes  # here: a run in threads never loads it (2 ms of a cold run)

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


class _QueuedEvents:
    """A worker process's `StepEvents`: each event goes down the queue, written before the step's
    result is sent, so the run relays a step's last progress before it reports the step finished."""

    def __init__(self, events: SimpleQueue | RayQueue):
        self.events = events

    def progress(self, step_id: str, done: float, total: float | None, note: str) -> None:
        self.events.put(("progress", (step_id, done, total, note)))

    def log(self, step_id: str, message: str) -> None:
        self.events.put(("log", (step_id, message)))


def _run_in_worker(task: StepTask) -> tuple[Entry, bool]:
    assert _events_to_run is not None, "a worker process is connected before it runs a step"
    events: StepEvents = _QueuedEvents(_events_to_run)
    return run_task(task, events)


class ProcessPool(StepPool):
    """Steps run in `jobs` worker processes started by spawning: nothing is inherited, so a task
    that runs here runs on any worker that reaches the same workspace."""

    relay_seconds = 0.1

    def __init__(self, jobs: int, observer: Observer, address: str | None = None):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.observer = observer
        context = multiprocessing.get_context("spawn")
        self.events = context.SimpleQueue()
        bound_to_process = threading.current_thread() is threading.main_thread()
        self.executor = ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=context,
            initializer=_connect,
            initargs=(self.events, os.getpid(), bound_to_process),
        )

    def submit(self, task: StepTask) -> Future[tuple[Entry, bool]]:
        return self.executor.submit(_run_in_worker, task)

    def relay(self) -> None:
        while not self.events.empty():
            name, args = self.events.get()
            getattr(self.observer, name)(*args)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


def end_worker_processes() -> None:
    """For a run leaving through `os._exit` (Ctrl-C, TERM: running step threads are not waited
    for), what the interpreter's exit does for a process pool: its workers end now, and the named
    semaphores of its queues are unlinked by multiprocessing's own exit finalizers. Skipped, every
    killed run printed the resource tracker's 'There appear to be 7 leaked semaphore objects'.
    A SIGKILLed run runs nothing: its workers end by PR_SET_PDEATHSIG and the tracker removes the
    semaphores, saying so."""
    if "multiprocessing" not in sys.modules:
        return  # no pool was started
    import multiprocessing.util

    for worker in multiprocessing.active_children():
        worker.kill()
        worker.join(5)
    # what atexit would run first (the semaphores' cleanup); private, and untyped in typeshed
    multiprocessing.util._run_finalizers(0)  # type: ignore[attr-defined]


RAY_RETRIES = 2
"""Times Ray runs a step again when the worker running it is lost (killed, out of memory, node gone).
A lost attempt leaves only its private `tmp/` folder: the entry is committed by a rename or not at all."""


def _worker_environment() -> dict[str, str]:
    """What the workers of a Ray cluster need from this process's environment: the `TRTFLOW_*`
    settings (step plugins among them) and PYTHONPATH, where plugin step kinds are imported from."""
    return {
        name: value
        for name, value in os.environ.items()
        if name.startswith("TRTFLOW_") or name == "PYTHONPATH"
    }


def run_on_ray_worker(task: StepTask, events: RayQueue) -> tuple[Entry, bool]:
    """A step on a Ray worker. A worker that reaches the run's workspace (a local cluster, or a
    mount every node has) runs the step there; one that shares no disk with the run runs it in a
    workspace of its own, exchanging entries with the run through the remote cache (`tasks`)."""
    if task.workspace.is_dir():
        return run_task(task, _QueuedEvents(events))
    if task.remote is None or not task.remote.push:
        raise StepError(
            f"the Ray worker on {socket.gethostname()} does not see the workspace {task.workspace}: "
            "Ray workers need the workspace on a disk every node mounts at that path, or a remote cache "
            "to exchange entries through (`--remote URL`, without --no-push)",
            step=task.step_id,
        )
    return run_task(
        replace(task, workspace=worker_workspace(task.workspace)), _QueuedEvents(events)
    )


def _fits(needs: dict[str, float], node: dict[str, float]) -> bool:
    return all(node.get(name, 0) >= amount for name, amount in needs.items())


def _describe(resources: dict[str, float]) -> str:
    """`2 CPU, 1 GPU, 16436 MiB memory`: what a step needs or a node has; what is not named is none."""
    amounts = {
        "CPU": resources.get("CPU", 0),
        "GPU": resources.get("GPU", 0),
        "MiB memory": resources.get("memory", 0) / 2**20,
    }
    return (
        ", ".join(f"{amount:.0f} {name}" for name, amount in amounts.items() if amount) or "nothing"
    )


def _check_reachable(address: str) -> None:
    """Fail fast on an address nothing answers at: `ray.init` would retry it for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not (host and port.isdigit()):
        raise UsageError(f"--address {address}: expected auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as error:
        raise UsageError(
            f"--address {address}: no Ray cluster answers there ({error.strerror or error}); start "
            "one (`ray start --head`) or give the address `ray status` prints"
        ) from None


RAY_MARK = "TRTFLOW_LOCAL_RAY"
"""Set, to a value of its own, in the environment of the processes of the local Ray a run starts:
how its guard finds them (`RAY_GUARD`)."""

RAY_GUARD = """
import os, signal, sys, time
mark, run = sys.argv[1].encode(), sys.argv[2]
session = sys.stdin.readline().strip()  # the local Ray's session folder, once it has started
sys.stdin.read()  # returns when the run has ended, however it ended

def of_the_run(pid):
    with open(f"/proc/{pid}/environ", "rb") as environ:
        if mark in environ.read().split(b"\\0"):
            return True
    folder = f"/proc/{pid}/fd"
    return bool(session) and any(
        os.readlink(f"{folder}/{fd}").startswith(session) for fd in os.listdir(folder)
    )

for _ in range(50):  # until a look finds none: a dying raylet may still start a process
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if pid not in (run, str(os.getpid())) and of_the_run(pid):
                os.kill(int(pid), signal.SIGKILL)
                found += 1
        except OSError:
            continue
    if not found:
        break
    time.sleep(0.2)
"""
"""Ends the processes of a run's local Ray once the run has ended. Ray ends them itself on
`ray.shutdown()`, which a killed run never reaches: a SIGKILLed run left its dashboard and runtime
env agents running for up to 105 s. The guard holds the read end of a pipe only the run writes to,
in a session of its own (Ctrl-C in a terminal does not reach it), and on EOF kills every process
of that Ray (Linux: /proc): those whose environment holds the run's mark, inherited from the run,
and those with a file of its session folder open (the agents: setting their process title
overwrites the environment /proc shows)."""


def _start_ray_guard() -> subprocess.Popen:
    """Mark this environment for the local Ray about to start, and start its guard."""
    import secrets
    import subprocess

    mark = f"{RAY_MARK}={os.getpid()}-{secrets.token_hex(8)}"
    guard = subprocess.Popen(
        [sys.executable, "-c", RAY_GUARD, mark, str(os.getpid())],
        stdin=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )
    os.environ[RAY_MARK] = mark.partition("=")[2]
    return guard


class RayPool(StepPool):
    """Each step is a Ray task placed on a node with the GPUs and memory it declares; events come
    back through a Ray queue. Without `address` a local Ray with `jobs` CPUs starts for the run and
    stops with it, killed or not (`RAY_GUARD`)."""

    guard: subprocess.Popen | None = None

    relay_seconds = 0.1

    def __init__(self, jobs: int, observer: Observer, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise UsageError("--executor ray needs Ray: pip install 'trtflow[ray]'") from None
        from ray.util.queue import Queue

        self.ray = ray
        self.observer = observer
        if address and address != "auto":
            _check_reachable(address)
        # a local Ray's workers inherit this environment (and start with it, before the first step);
        # a cluster's workers get what they need of it with the run's tasks
        where = (
            {"address": address, "runtime_env": {"env_vars": _worker_environment()}}
            if address
            else {"num_cpus": jobs, "include_dashboard": False}
        )
        if not address and sys.platform.startswith("linux"):
            self.guard = _start_ray_guard()
        try:  # worker output would garble the progress display; steps report through events
            started = ray.init(**where, log_to_driver=False, logging_level=logging.WARNING)
            if self.guard is not None and self.guard.stdin is not None:
                info = getattr(started, "address_info", {})  # a local Ray's RayContext has it
                self.guard.stdin.write(f"{info.get('session_dir', '')}\n")
                self.guard.stdin.flush()
        except ConnectionError as error:
            raise UsageError(
                f"--address {address}: {error}; start a cluster (`ray start --head`) or "
                "give the address `ray status` prints"
            ) from None
        finally:
            os.environ.pop(RAY_MARK, None)  # Ray's processes have it; what the run starts next not
        self.nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
        self.events = Queue()
        self.step_task = ray.remote(run_on_ray_worker)
        self.running: set = set()
        self.homing = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="trtflow-fetch")

    def submit(self, task: StepTask) -> Future[tuple[Entry, bool]]:
        needs: dict[str, float] = {
            "GPU": task.resources.gpu,
            "memory": (task.resources.memory_mb or 0) * 2**20,
        }
        result: Future[tuple[Entry, bool]] = Future()
        if not any(
            _fits(needs, node) for node in self.nodes
        ):  # Ray would wait for such a node forever
            result.set_exception(
                StepError(
                    f"needs {_describe(needs)}; no node of the Ray cluster has that much "
                    f"(nodes: {'; '.join(_describe(node) for node in self.nodes)})",
                    step=task.step_id,
                )
            )
            return result
        reference = self.step_task.options(
            num_gpus=needs["GPU"], memory=needs["memory"] or None, max_retries=RAY_RETRIES
        ).remote(task, self.events)
        self.running.add(reference)

        def settle(done: Future) -> None:
            self.running.discard(reference)
            try:
                entry, computed = done.result()
                self.homing.submit(self._entry_here, task, entry, computed, result)
            except (
                self.ray.exceptions.RayTaskError
            ) as error:  # the step's own error, as the thread pool gives it
                result.set_exception(error.cause)
            except (
                self.ray.exceptions.RayError
            ) as error:  # lost workers, each retried: the last word
                result.set_exception(
                    StepError(
                        f"Ray could not finish it ({RAY_RETRIES + 1} attempts): "
                        f"{type(error).__name__}: {error}",
                        step=task.step_id,
                    )
                )

        reference.future().add_done_callback(settle)
        return result

    def _entry_here(
        self, task: StepTask, entry: Entry, computed: bool, result: Future[tuple[Entry, bool]]
    ) -> None:
        """Settle `result` with the run's own copy of the worker's entry (a download when the worker
        shares no disk with the run: in a thread of its own, never in Ray's callback thread)."""
        try:
            result.set_result(
                (entry_here(task, entry, progress_of(self.observer, task.step_id)), computed)
            )
        except Exception as error:  # noqa: BLE001 - the run records it as the step's failure
            result.set_exception(error)

    def relay(self) -> None:
        for name, args in self.events.get_nowait_batch(self.events.qsize()):
            getattr(self.observer, name)(*args)

    def shutdown(self) -> None:
        for reference in list(
            self.running
        ):  # an interrupted run: its steps discard their tmp folders
            self.ray.cancel(reference)
        self.homing.shutdown(wait=False, cancel_futures=True)
        self.ray.shutdown()
        if self.guard is not None and self.guard.stdin is not None:
            self.guard.stdin.close()  # it ends what of the local Ray outlived ray.shutdown()


POOLS: dict[str, Callable[[int, Observer, str | None], StepPool]] = {
    "thread": ThreadPool,
    "process": ProcessPool,
    "ray": RayPool,
}
