"""The app's heavy work in worker processes: one session's long search blocks no other, and a
hostile upload cannot take the server down.

Every search, sweep and file import of the app goes through :func:`run`. The call runs in a
fresh process forked from a server process that has pase imported already
(``multiprocessing``'s ``forkserver``: forking the Streamlit server itself, with its threads,
would be unsafe), under an address-space limit (:data:`JOB_MEMORY_BYTES`) and a time limit
(:data:`JOB_TIME_S`), with at most :data:`MAX_JOBS` running at once over all sessions. The
calling script thread sleeps on a pipe, so other sessions' scripts run meanwhile; it relays the
worker's progress to the page and gets the result back pickled. When the worker exits, the
operating system takes back all its memory (a large search leaves nothing in the server's
heap). Leaving the page (Streamlit stops the script) kills the worker.
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing import spawn
import resource
import sys
import threading
import time
import traceback
from typing import Callable

from pase.errors import PaseError

__all__ = ["JobError", "run", "gather", "JOB_MEMORY_BYTES", "JOB_TIME_S", "MAX_JOBS", "SEARCH_BUDGET_BYTES"]


def _physical_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# Address space one job may map, in bytes: PASE_JOB_MEMORY_GB, else a third of the machine's
# memory, at most 16 GB.
JOB_MEMORY_BYTES = int(float(os.environ.get("PASE_JOB_MEMORY_GB", 0)) * 1e9) or min(
    _physical_memory_bytes() // 3, 16 * 10**9)
# The exact search's table budget inside a job: half the job's memory, so that a search too large
# is handed to the approximate one (or refused) instead of running out of memory.
SEARCH_BUDGET_BYTES = JOB_MEMORY_BYTES // 2
# Seconds one job may run before it is stopped.
JOB_TIME_S = float(os.environ.get("PASE_JOB_TIME_S", 900))
# Jobs running at once over all sessions of this server (PASE_MAX_JOBS; by default one per core
# while the jobs' memory limits leave a third of the machine's memory free, and at least two, so
# that one long search never holds up everyone); others wait for a free worker.
MAX_JOBS = int(os.environ.get("PASE_MAX_JOBS", 0)) or max(
    2, min(os.cpu_count() or 2, _physical_memory_bytes() * 2 // 3 // JOB_MEMORY_BYTES))

_PRELOAD = ["ui.jobs", "ui.solving", "pase.planner", "pase.analysis.sweep", "pase.analysis.baselines",
            "pase.io.graph_json", "pase.models"]
_slots = threading.BoundedSemaphore(MAX_JOBS)
_context_lock = threading.Lock()
_context = None


class JobError(PaseError):
    """A job failed in a way the page should report: out of memory or time, or an internal error."""


def _without_main(get_preparation_data):
    """``get_preparation_data`` minus the main module: a worker must never re-run it.

    Streamlit makes the page script ``__main__`` while it runs, and multiprocessing would
    re-execute ``__main__`` in every new process (the whole app, in the worker).
    """
    def prepare(name):
        data = get_preparation_data(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    return prepare


def _get_context():
    global _context
    with _context_lock:
        if _context is None:
            spawn.get_preparation_data = _without_main(spawn.get_preparation_data)
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(_PRELOAD)
            _context = ctx
        return _context


def _worker(conn, fn, args, kwargs, memory_bytes, wants_progress):
    """The job's process: limit its memory, run ``fn``, send progress and the outcome over ``conn``."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    # Within a hard limit set from outside (a container, ulimit), which a process cannot raise.
    soft = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < 0.1:
            return
        last[0] = now
        conn.send(("progress", done, total))

    try:
        result = fn(*args, **kwargs, progress=progress) if wants_progress else fn(*args, **kwargs)
        conn.send(("ok", result))
    except MemoryError:
        conn.send(("memory", None))
    except PaseError as exc:
        conn.send(("pase", exc))
    except Exception as exc:
        conn.send(("crash", (f"{type(exc).__name__}: {exc}", traceback.format_exc())))
    finally:
        conn.close()


def run(fn: Callable, *args, progress: Callable[[int, int], None] | None = None,
        waiting: Callable[[], None] | None = None, heartbeat: Callable[[], None] | None = None,
        what: str = "the job", **kwargs):
    """``fn(*args, **kwargs)`` computed in a worker process; its result, or its error raised here.

    ``fn`` and its arguments must pickle (a module-level function, pase values). With
    ``progress``, ``fn`` is called with a ``progress(done, total)`` keyword whose reports reach
    ``progress`` here. ``waiting()`` is called (every 0.2 s) while all workers are busy, and
    ``heartbeat()`` every 0.5 s while the job runs: a page passes a call that touches Streamlit,
    so that a click elsewhere (Cancel) stops the script, and with it the worker, promptly.

    Raises
    ------
    PaseError
        What ``fn`` raised (same class name and message).
    JobError
        The job needed more than :data:`JOB_MEMORY_BYTES`, ran past :data:`JOB_TIME_S`, died, or
        failed with an internal error (the traceback goes to the server's log).
    """
    while not _slots.acquire(timeout=0.2):
        if waiting is not None:
            waiting()
    try:
        return _run(fn, args, kwargs, progress, heartbeat, what)
    finally:
        _slots.release()


def _run(fn, args, kwargs, progress, heartbeat, what):
    ctx = _get_context()
    ours, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker, args=(theirs, fn, args, kwargs, JOB_MEMORY_BYTES, progress is not None),
                       daemon=True)
    proc.start()
    theirs.close()
    deadline = time.monotonic() + JOB_TIME_S
    beat = time.monotonic()
    try:
        while True:
            if heartbeat is not None and time.monotonic() - beat > 0.5:
                beat = time.monotonic()
                heartbeat()
            if ours.poll(0.1):
                try:
                    kind, *payload = ours.recv()
                except EOFError:
                    break
                except Exception as exc:  # a result or an exception that does not unpickle
                    raise JobError(f"{what} sent back something unreadable ({type(exc).__name__}: {exc})") from None
                if kind == "progress":
                    progress(*payload)
                    continue
                return _outcome(kind, payload[0], what)
            if not proc.is_alive() and not ours.poll():
                break
            if time.monotonic() > deadline:
                raise JobError(f"{what} ran longer than the {JOB_TIME_S / 60:g} minutes this server allows; "
                               "try fewer devices or a smaller model")
        proc.join(1.0)
        raise JobError(f"{what} stopped unexpectedly (exit status {proc.exitcode}), probably out of the "
                       f"{JOB_MEMORY_BYTES / 1e9:.3g} GB of memory this server allows each job; "
                       "try fewer devices or a smaller model")
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        ours.close()


def _outcome(kind: str, payload, what: str):
    if kind == "ok":
        return payload
    if kind == "memory":
        raise JobError(f"{what} needed more than the {JOB_MEMORY_BYTES / 1e9:.3g} GB of memory this server allows "
                       "each job; try fewer devices, powers of two only, or a smaller model")
    if kind == "pase":
        raise payload
    message, trace = payload
    print(f"pase app: {what} failed:\n{trace}", file=sys.stderr)
    raise JobError(f"{what} failed with an internal error ({message}); the server log has the details")


def gather(pool, futures: list, stop: threading.Event, *, tick: Callable[[set], None] | None = None,
           heartbeat: Callable[[], None] | None = None, poll_s: float = 0.2) -> list:
    """Wait, in the calling (script) thread, for ``futures`` submitted to the thread ``pool``; their results in
    order.

    At least every ``poll_s`` seconds, and as soon as some finish: a finished one's error is raised here,
    ``tick(finished)`` is called (``finished`` may be empty), and ``heartbeat()`` every half second at most.
    Whatever raises (a failed future, or a callback: Streamlit stopping the script) sets ``stop``, which the
    futures' jobs poll to end early, and is raised again; the pool is shut down either way, queued work
    cancelled.
    """
    from concurrent.futures import FIRST_COMPLETED, wait

    try:
        pending = set(futures)
        beat = time.monotonic()
        while pending:
            finished, pending = wait(pending, timeout=poll_s, return_when=FIRST_COMPLETED)
            for f in finished:
                f.result()
            if tick is not None:
                tick(finished)
            if heartbeat is not None and time.monotonic() - beat > 0.5:
                beat = time.monotonic()
                heartbeat()
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return [f.result() for f in futures]
