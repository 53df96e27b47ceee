"""Where steps run (`trtflow run --executor NAME`): the seam between scheduling a run and running steps.

A pool takes a `StepTask` and returns a future of what `run_task` returns; what the step reports
on the way reaches the run's observer — directly from a thread, or through a queue that the run
loop relays from a worker process. `thread` (the default) runs steps in this process; `process`
runs each in a worker process that starts from nothing, as a worker on another machine sharing the
workspace would.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from trtflow.executor.store import Entry
from trtflow.executor.tasks import StepEvents, StepTask, run_task

if TYPE_CHECKING:
    from multiprocessing.queues import SimpleQueue

    from trtflow.executor.run import Observer


class StepPool:
    """Runs tasks, up to `jobs` at a time."""

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

    def __init__(self, jobs: int, observer: Observer):
        self.observer = observer
        self.executor = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="trtflow-step")

    def submit(self, task: StepTask) -> Future[tuple[Entry, bool]]:
        return self.executor.submit(run_task, task, self.observer)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


_events_to_run: SimpleQueue | None = None  # in a worker process: where its steps' events go


def _connect(events: SimpleQueue) -> None:
    global _events_to_run
    _events_to_run = events


class _QueuedEvents:
    """A worker process's `StepEvents`: each event goes down the queue, written before the step's
    result is sent, so the run relays a step's last progress before it reports the step finished."""

    def __init__(self, events: SimpleQueue):
        self.events = events

    def progress(self, step_id: str, done: float, total: float | None, note: str) -> None:
        self.events.put(("progress", (step_id, done, total, note)))

    def log(self, step_id: str, message: str) -> None:
        self.events.put(("log", (step_id, message)))


def _run_in_worker(task: StepTask) -> tuple[Entry, bool]:
    events: StepEvents = _QueuedEvents(_events_to_run)
    return run_task(task, events)


class ProcessPool(StepPool):
    """Steps run in `jobs` worker processes started by spawning: nothing is inherited, so a task
    that runs here runs on any worker that reaches the same workspace."""

    relay_seconds = 0.1

    def __init__(self, jobs: int, observer: Observer):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.observer = observer
        context = multiprocessing.get_context("spawn")
        self.events = context.SimpleQueue()
        self.executor = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_connect,
                                            initargs=(self.events,))

    def submit(self, task: StepTask) -> Future[tuple[Entry, bool]]:
        return self.executor.submit(_run_in_worker, task)

    def relay(self) -> None:
        while not self.events.empty():
            name, args = self.events.get()
            getattr(self.observer, name)(*args)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


POOLS: dict[str, type[StepPool]] = {"thread": ThreadPool, "process": ProcessPool}
