"""What every command shares: the error-to-exit-code mapping, and finding the recipe's pipeline and
workspace (light imports only: the executor is imported inside the functions). No typer here: a
plain `trtflow run` is parsed without it (`trtflow.cli.run_command`); the options typer parses
are in `options.py`."""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from trtflow.errors import TrtflowError, UsageError


@contextmanager
def ends_quietly_on_closed_stdout() -> Iterator[None]:
    """A reader that stops early (`trtflow inspect m.onnx | head -2`) closes the pipe; that is its
    choice, not an error: end with exit 0 and nothing on stderr (Python docs, "Note on SIGPIPE")."""
    try:
        try:
            yield
        finally:
            sys.stdout.flush()  # what is still buffered fails here, not at interpreter exit
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush succeeds
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0) from None


class Terminated(KeyboardInterrupt):
    """SIGTERM, met as Ctrl-C is: a run's `finally` blocks run and its workers are ended. Left to
    its default action, TERM ended the process where it stood, and the resource tracker then warned
    of the process pool's 'leaked semaphore objects'."""


def _terminated(signum: int, frame: object) -> None:
    raise Terminated


def end_cleanly_on_term() -> None:
    """Meet SIGTERM as Ctrl-C (`Terminated`); only the main thread may set a handler."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)


@contextmanager
def errors_to_exit_codes(debug: bool) -> Iterator[None]:
    """A `TrtflowError` is the user's to fix: its message and its exit code. Anything else is a bug
    of ours (a `ValueError` included: it is never how user errors travel): exit 3, said plainly."""
    try:
        yield
    except TrtflowError as error:
        if debug:
            raise
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(error.exit_code) from None
    except KeyboardInterrupt as interrupt:
        how = "terminated" if isinstance(interrupt, Terminated) else "interrupted"
        print(f"{how}; finished steps are cached, run again to resume", file=sys.stderr)
        sys.stderr.flush()
        from trtflow.executor.pools import end_worker_processes

        end_worker_processes()  # what the interpreter's exit would have done for them
        os._exit(143 if isinstance(interrupt, Terminated) else 130)  # no wait for step threads
    except Exception as error:  # a bug of ours: say so plainly, keep the traceback for --debug
        if debug or _ends_the_command(error):
            raise
        if _disk_full(error):  # not a bug: the one thing to say is where space is missing
            where = getattr(error, "filename", None)
            at = f" (writing {where})" if where else ""
            print(
                f"error: the disk is full{at}; free space on it, or give --workspace DIR / --out DIR "
                "on another disk, and run again",
                file=sys.stderr,
            )
            raise SystemExit(3) from None
        print(
            f"internal error: {type(error).__name__}: {error} (run again with --debug for the traceback, "
            "and please report it)",
            file=sys.stderr,
        )
        raise SystemExit(3) from None


def _ends_the_command(error: Exception) -> bool:
    """`typer.Exit` / `typer.Abort` (a command's chosen end; typer is imported only when it parsed
    the command line) and a closed stdout (`ends_quietly_on_closed_stdout`'s to handle)."""
    if isinstance(error, BrokenPipeError):
        return True
    typer = sys.modules.get("typer")
    return typer is not None and isinstance(error, (typer.Exit, typer.Abort))


def _disk_full(error: Exception) -> bool:
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    return type(error).__name__ == "OperationalError" and "disk is full" in str(error)  # SQLite


def load(recipe: Path, overrides: list[str], *, companions: bool = False):
    from trtflow.executor.pipeline import load_pipeline

    return load_pipeline(recipe, overrides, companions=companions)


def workspace_of(recipe: Path, workspace: Path | None):
    from trtflow.executor.workspace import Workspace, origin

    space = Workspace.for_recipe(recipe.absolute(), workspace)
    writable_folder(space.root, origin(workspace))
    return space


def writable_folder(folder: Path, option: str) -> None:
    """Create `folder` or say plainly why it cannot be written, before any step runs: a read-only
    or missing mount would otherwise surface as an OSError from deep inside the executor. A folder
    inside a cache entry is refused: the entry would hold files its manifest does not list."""
    from trtflow.executor.store import entry_holding

    if (entry := entry_holding(folder)) is not None:
        raise UsageError(
            f"{folder} ({option}) lies inside the cache entry {entry} (through an output link), "
            f"and nothing but the cache may write there; give {option} outside it, or run from "
            "a folder outside the cache"
        )
    if folder.exists() and not folder.is_dir():
        raise UsageError(
            f"{folder} ({option}) is a file, not a folder; give {option} naming a folder"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(
            f"cannot create {folder} ({error.strerror}); give {option} on a disk you can write to"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot write to {folder} (read-only, or no permission); give {option} on a disk you can write to"
        )


def step_ids(pipeline, names: list[str], option: str) -> set[str]:
    """Step ids named on the command line; a matrix step's name selects all its expansions."""
    from trtflow.schema.problems import did_you_mean

    chosen: set[str] = set()
    for name in names:
        if name in pipeline.steps:
            chosen.add(name)
        elif name in pipeline.recipe.matrix_groups:
            chosen.update(pipeline.recipe.matrix_groups[name])
        else:
            raise UsageError(
                f"{option} {name}: no such step{did_you_mean(name, list(pipeline.steps))}; "
                f"steps: {', '.join(pipeline.steps)}"
            )
    return chosen


def cache_workspace(workspace: Path | None, recipe: Path | None, create: bool = False):
    """The workspace the cache commands act on; an error, not an empty listing, when there is none
    (unless `create`: `remote add` may come before the first run)."""
    from trtflow.executor.workspace import Workspace, chosen_root, origin

    if recipe is not None:
        if not recipe.is_file():
            raise UsageError(f"--recipe {recipe}: file not found")
        space = Workspace.for_recipe(recipe.absolute(), workspace)
    else:
        space = Workspace(chosen_root(workspace) or Path(".trtflow").absolute())
    if create:
        writable_folder(space.root, origin(workspace))
    if not space.root.is_dir():
        named = f" (from {origin(workspace)})" if chosen_root(workspace) else ""
        raise UsageError(
            f"no trtflow workspace at {space.root}{named}; give --workspace DIR, or --recipe RECIPE for "
            "the workspace of a recipe (the .trtflow/ folder next to it)"
        )
    return space
