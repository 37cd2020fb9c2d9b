"""Where candidates train: in this process, in local worker processes, or on a Ray cluster.

Every executor runs `worker.train_candidate` on a `Task` and hands back `Outcome`s (one
that raised, died with its process or ran past its hard time limit, with an error); only
the driver writes to the study.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import math
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from types import FrameType
from typing import Any

import jax
from absl import logging
from jax._src import xla_bridge
from tqdm import tqdm

from nas.search.execution import ray_parts
from nas.search.execution.task import Executor, Outcome, Task, outcome_of
from nas.search.execution.worker import describe_failure, train_or_failure
from nas.search.strategy.settings import RayConfig

GUARD = 'if __name__ == "__main__":'
KILLED = "worker process died (killed or out of memory)"

# ----------------------------------------------------------------------------- Ctrl-C


@contextlib.contextmanager
def deferred_interrupt(raise_after: bool = False) -> Iterator[None]:
    """Holds SIGINT back for the block and delivers it right after, to the handler that was
    in place (`raise_after`: as a KeyboardInterrupt); outside the main thread it changes
    nothing. Why: a KeyboardInterrupt while the pool starts a worker leaves a child nobody
    kills, and JAX starts its plugins inside a bare `except:` that would swallow it."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received and raise_after:
            raise KeyboardInterrupt
        if received:
            signal.raise_signal(signal.SIGINT)  # the previous handler runs now


# ----------------------------------------------------------------------------- worker deaths
# Why: a spawned worker imports the user's script again, and one that calls `nas.run_search`
# outside the `__main__` guard dies there; "killed or out of memory" would mislead. So the
# worker leaves one line for the driver in a file named by both process ids.


def cause_path(parent_pid: int, pid: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"nas-worker-death-{parent_pid}-{pid}.txt")


def refuse_spawned_import() -> None:
    """One RuntimeError, recorded for the driver, inside a spawned worker's import of the
    user's `__main__`."""
    mp_main = sys.modules.get("__mp_main__")
    if mp_main is None or mp_main is sys.modules.get("__main__"):
        return
    script = os.path.basename(getattr(mp_main, "__file__", "") or "your script")
    line = (f"a worker process, importing {script} again, called nas.run_search: put the "
            f"search under `{GUARD}` in {script}")
    with contextlib.suppress(OSError), open(cause_path(os.getppid(), os.getpid()), "w") as f:
        f.write(line)  # else the line still reaches stderr with the exception
    raise RuntimeError(line)


def death_cause(processes: Iterable[Any]) -> str:
    """The driver's line for the ended worker processes: recorded, or from exit codes."""
    codes = []
    for process in processes:  # a recorded line counts before the process is reaped
        path = cause_path(os.getpid(), process.pid)
        try:
            with open(path) as f:
                line = f.read().strip()
            os.remove(path)
        except OSError:
            line = ""
        if line:
            return line
        code = getattr(process, "exitcode", None)
        if code is not None:
            codes.append(code)
    if any(code > 0 for code in codes):  # the pool terminates the others: -SIGTERM
        return (f"worker process exited with status {max(codes)} on an exception (its "
                f"traceback is on stderr)")
    return KILLED


# ----------------------------------------------------------------------------- devices


def visible_gpus() -> list[str]:
    """This host's GPU ids, found without initializing any JAX backend:
    CUDA_VISIBLE_DEVICES if set, else `nvidia-smi -L`."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [x.strip() for x in listed.split(",") if x.strip() and x.strip() != "-1"]
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU")]


def worker_env(index: int, workers: int, gpus: list[str]) -> dict[str, str]:
    """Environment of local worker `index` of `workers` on a host with `gpus`: no
    preallocation; its own GPUs, or with more workers than GPUs an equal share of GPU
    `index % G`'s memory."""
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    if not gpus:
        return env
    g, n, i = len(gpus), max(1, workers), index % max(1, workers)
    if n <= g:
        mine = gpus[i * g // n:(i + 1) * g // n]
    else:
        mine = [gpus[i % g]]
        sharing = math.ceil(n / g)
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{0.9 / sharing:.3f}"
    env["CUDA_VISIBLE_DEVICES"] = ",".join(mine)
    return env


def _taking_turns(executor: str, slots: int, hard_timeout_s: float, prepare_ahead: int,
                  share_device: str | None) -> tuple[int, float, dict[str, Any]]:
    """(capacity, hard time limit, `train_candidate`'s extra arguments) of `slots`, each
    served by 1 + prepare_ahead processes: a candidate may wait through the training of
    those ahead of it, so its hard time limit grows as much."""
    ahead = max(0, prepare_ahead)
    if ahead and not share_device:
        raise ValueError(f"{executor}: prepare_ahead needs share_device (the search's "
                         f"workdir), where its processes take turns on their devices")
    share = {"share_device": share_device} if ahead else {}
    return max(1, slots) * (1 + ahead), hard_timeout_s * (1 + ahead), share


def _init_worker(counter: Any, workers: int, gpus: list[str]) -> None:
    """Runs first in each spawned worker, before jax is imported there."""
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    os.environ.update(worker_env(index % workers, workers, gpus))
    if workers > 1:  # several slots of one CPU host are distinct devices to take turns on
        os.environ["NAS_DEVICE_SLOT"] = str(index % workers)
    # Ctrl-C is the driver's: it kills the workers and releases their claims
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # tqdm's first bar would create a multiprocessing lock, which the resource tracker
    # reports as leaked when the worker is killed; a thread lock is all one worker needs
    tqdm.set_lock(threading.RLock())
    threading.Thread(target=exit_when_orphaned, args=(os.getppid(),), daemon=True,
                     name="exit-when-orphaned").start()


def exit_when_orphaned(owner_pid: int) -> None:
    """Ends this process once its parent `owner_pid` is gone: a killed driver never shuts
    its pool down, and an idle worker would wait on its queue forever."""
    while os.getppid() == owner_pid:
        time.sleep(1.0)
    os._exit(1)


def _failed(task: Task, e: BaseException) -> Outcome:
    return Outcome.failed(task, *describe_failure(e))


def _too_late(task: Task, hard_timeout_s: float) -> Outcome:
    return Outcome.failed(task, f"exceeded the hard time limit of {hard_timeout_s:.0f} s")


# ----------------------------------------------------------------------------- executors


class InlineExecutor:
    """Runs each candidate to completion in this process (debugging, tests)."""

    capacity = 1

    def __init__(self) -> None:
        self._done: list[Outcome] = []

    def submit(self, task: Task) -> None:
        self._done.append(outcome_of(task, train_or_failure(task)))

    def running(self) -> int:
        return len(self._done)  # finished but not yet handed back: still occupies the slot

    def poll(self, timeout: float) -> list[Outcome]:
        done, self._done = self._done, []
        return done

    def close(self) -> None:
        pass


class LocalExecutor:
    """A pool of spawned worker processes, kept between candidates. A worker that dies or
    passes its hard time limit is replaced; its candidate fails, the others run again.

    With `prepare_ahead` > 0, 1 + prepare_ahead processes serve each device and take turns
    on it (`share_device`: the search's workdir): while one trains, the others prepare; the
    hard time limit is (1 + prepare_ahead) times `hard_timeout_s`."""

    def __init__(self, workers: int = 1, hard_timeout_s: float = 0.0,
                 prepare_ahead: int = 0, share_device: str | None = None) -> None:
        self.workers = max(1, workers)
        self.capacity, self.hard_timeout_s, self._share = _taking_turns(
            "LocalExecutor", workers, hard_timeout_s, prepare_ahead, share_device)
        self._context = multiprocessing.get_context("spawn")
        self._counter = self._context.Value("i", 0)
        self._gpus = visible_gpus()
        self._pool = self._new_pool()
        self._inflight: dict[cf.Future, tuple[Task, float]] = {}
        # in flight when a worker died: each runs again alone (`_after_death`)
        self._suspects: list[Task] = []
        self._alone: cf.Future | None = None

    def _new_pool(self) -> cf.ProcessPoolExecutor:
        with self._counter.get_lock():  # a replaced pool hands out the same devices again
            self._counter.value = 0
        return cf.ProcessPoolExecutor(self.capacity, mp_context=self._context,
                                      initializer=_init_worker,
                                      initargs=(self._counter, self.workers, self._gpus))

    def _processes(self) -> list[Any]:
        return list(getattr(self._pool, "_processes", {}).values())

    def _kill_workers(self) -> None:
        for process in self._processes():
            process.kill()

    def _replace_pool(self) -> None:
        self._kill_workers()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = self._new_pool()

    def submit(self, task: Task) -> None:
        # owner_pid: an orphaned worker (its driver was killed) stops instead of training on.
        with deferred_interrupt():  # the pool may start a worker: never half-started
            future = self._pool.submit(train_or_failure, task, **self._share,
                                       owner_pid=os.getpid())
            _watch_new_workers(self._pool)
            self._inflight[future] = (task, time.monotonic())

    def running(self) -> int:
        if self._suspects or self._alone in self._inflight:  # no neighbour while isolating
            return max(self.capacity, len(self._inflight) + len(self._suspects))
        return len(self._inflight)

    def poll(self, timeout: float) -> list[Outcome]:
        self._next_suspect()
        if not self._inflight:
            return []
        done, _ = cf.wait(list(self._inflight), timeout=timeout,
                          return_when=cf.FIRST_COMPLETED)
        outcomes, broken = [], []
        for future in done:
            task, _ = self._inflight.pop(future)
            try:
                outcomes.append(outcome_of(task, future.result()))
            except cf.process.BrokenProcessPool:
                broken.append(task)
            except Exception as e:  # noqa: BLE001
                outcomes.append(_failed(task, e))
        if broken:
            outcomes += self._after_death(broken)
        outcomes += self._enforce_hard_timeout()
        self._next_suspect()
        return outcomes

    def _after_death(self, broken: list[Task]) -> list[Outcome]:
        """A worker process died and broke the pool. A candidate that ran alone died; of
        several, none is blamed: each runs again alone, so none gets another's cause."""
        outcomes, suspects = [], list(broken)
        for future, (task, _) in self._inflight.items():  # a result may be in already
            if future.done() and not future.cancelled() and future.exception() is None:
                outcomes.append(outcome_of(task, future.result()))
            else:
                suspects.append(task)
        self._inflight.clear()
        cause = death_cause(self._processes())  # before the kills: those that ended alone
        self._replace_pool()
        if len(suspects) == 1:
            return outcomes + [Outcome.failed(suspects[0], cause)]
        logging.warning("a worker process died with candidates %s in flight; each runs again "
                        "alone", ", ".join(str(t.candidate_id) for t in suspects))
        self._suspects += suspects
        return outcomes

    def _next_suspect(self) -> None:
        """Starts the next candidate to run alone once nothing else is in flight."""
        if self._suspects and not self._inflight:
            self.submit(self._suspects.pop(0))
            self._alone = next(iter(self._inflight))

    def _enforce_hard_timeout(self) -> list[Outcome]:
        """Fails the candidates past the hard time limit; the others restart in a new pool."""
        if not self.hard_timeout_s:
            return []
        now = time.monotonic()
        late = [f for f, (_, t) in self._inflight.items() if now - t > self.hard_timeout_s]
        if not late:
            return []
        outcomes = []
        for future in late:
            task, _ = self._inflight.pop(future)
            logging.warning("candidate %d exceeded the hard time limit; killing its worker",
                            task.candidate_id)
            outcomes.append(_too_late(task, self.hard_timeout_s))
        self._replace_pool()
        pending = list(self._inflight.values())
        self._inflight.clear()
        for task, _ in pending:
            self.submit(task)
        return outcomes

    def close(self) -> None:
        """Stops the workers (killed if any task is left) and frees the pool's semaphores
        now, before a CLI's `os._exit`."""
        # the pool's queue too: Ctrl-C can land after the pool took a task, before `_inflight`
        if self._inflight or getattr(self._pool, "_pending_work_items", None):
            self._kill_workers()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._inflight.clear()
        self._suspects.clear()
        del self._pool, self._counter  # the last references: semaphores go now


def _watch_new_workers(pool: cf.ProcessPoolExecutor) -> None:
    """Wakes the pool's manager thread after a submit, so it watches a worker that the
    submit started (CPython 3.11 wakes it before, and a death went unnoticed)."""
    wakeup = getattr(pool, "_executor_manager_thread_wakeup", None)
    if wakeup is not None:
        wakeup.wakeup()


# Ray's errors for a task whose node, worker process or object was lost: the candidate is
# trained again elsewhere, not blamed.
LOST_NODE_ERRORS = ("NodeDiedError", "WorkerCrashedError", "ObjectLostError",
                    "LocalRayletDiedError", "OutOfMemoryError", "RaySystemError")


@dataclasses.dataclass
class RayRun:
    """One task as the Ray executor tracks it (`tries` counts its starts)."""

    task: Task
    started: float
    tries: int = 1


class RayExecutor:
    """Each candidate is a Ray task (`ray_parts.run_task`) with its own resource request.

    `settings` is `search.ray` as the settings reader gave it (`RayConfig`, its zeros
    resolved): one task's request (`RayConfig.request`) and how its dataset travels,
    "ship" (into the object store once per study) or "node" (each node reads it where the
    config names it); None: one CPU a task, the data shipped. A task whose node, worker
    or object is lost runs again, up to `max_tries` starts (metric `ray_retries`). With
    `prepare_ahead` > 0, 1 + prepare_ahead tasks run per slot and take turns on their
    device, as locally."""

    def __init__(self, address: str | None = None, capacity: int = 1,
                 hard_timeout_s: float = 0.0, prepare_ahead: int = 0,
                 share_device: str | None = None, *, settings: RayConfig | None = None,
                 max_tries: int = 3) -> None:
        if settings is None:
            settings = RayConfig().resolved(num_cpus_per_candidate=1.0,
                                            num_gpus_per_candidate=0.0)
        self.capacity, self.hard_timeout_s, self._share = _taking_turns(
            "RayExecutor", capacity, hard_timeout_s, prepare_ahead, share_device)
        self.max_tries = max(1, max_tries)
        self._dataset_mode = settings.dataset
        try:
            import ray
        except ImportError:
            raise ValueError("executor 'ray' needs ray: pip install 'alphanas-search[ray]' "
                             "(from a clone: pip install -e '.[ray]')") from None
        self._ray = ray
        request = settings.request()
        ray_parts.start_or_join(ray, address, self.capacity, request)
        ray_parts.check_fits(ray, request)
        self._lost = tuple(getattr(ray.exceptions, n) for n in LOST_NODE_ERRORS
                           if hasattr(ray.exceptions, n))
        num_gpus = settings.num_gpus
        options: dict[str, Any] = {"num_cpus": settings.num_cpus, "num_gpus": num_gpus,
                                   "max_retries": 0}
        if settings.resources:
            options["resources"] = dict(settings.resources)
        if num_gpus:  # no preallocation; a fractional GPU gets that fraction of its memory
            env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
            if num_gpus < 1:
                env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{0.9 * num_gpus:.3f}"
            options["runtime_env"] = {"env_vars": env}
        self._remote = ray.remote(**options)(ray_parts.run_task)
        self._inflight: dict[Any, RayRun] = {}
        self._shipped: dict[str, dict[str, Any]] = {}
        self._ready: list[Outcome] = []  # failed before reaching Ray (e.g. no dataset file)

    def submit(self, task: Task) -> None:
        self._start(RayRun(task, time.monotonic()))

    def _start(self, run: RayRun) -> None:
        """Sends `run`'s task to Ray with its dataset reference and its run folder's files."""
        folder = run.task.workdir
        try:
            dataset = self._dataset(run.task.train_config)
            run_in = None
            if folder and os.path.isdir(folder):
                step = ray_parts.latest_step(folder)
                run_in = ray_parts.read_files(
                    folder, keep=lambda rel: ray_parts.keep_returned(rel, step))
        except (ValueError, OSError) as e:
            self._ready.append(_failed(run.task, e))
            return
        run.started = time.monotonic()
        ref = self._remote.remote(run.task.replace(workdir=None), self._share, dataset, run_in)
        self._inflight[ref] = run

    def _dataset(self, train_config: dict[str, Any]) -> dict[str, Any] | None:
        """The study's dataset as a shipment, put into the object store on first use."""
        if self._dataset_mode == "node":
            return None
        inp = train_config["input"]
        key = f"{inp['data']['name']}\0{inp.get('data_dir', '')}"
        if key not in self._shipped:
            kind, name, files = ray_parts.dataset_files(train_config)
            ref = self._ray.put(files) if files is not None else None
            self._shipped[key] = ray_parts.shipment(kind, name,
                                                    files.digest() if files else "", ref)
            if files is not None:
                logging.info("dataset %s: %.1f MB put into Ray's object store once; each node "
                             "caches it", inp["data"]["name"], files.size / 1e6)
        return self._shipped[key]

    def running(self) -> int:
        return len(self._inflight) + len(self._ready)

    def poll(self, timeout: float) -> list[Outcome]:
        outcomes, self._ready = self._ready, []
        if not self._inflight:
            return outcomes
        ready, _ = self._ray.wait(list(self._inflight), num_returns=1,
                                  timeout=0 if outcomes else timeout)
        for ref in ready:
            run = self._inflight.pop(ref)
            try:
                result, files, timings, curves = self._ray.get(ref)
            except self._lost as e:
                outcomes += self._after_loss(run, e)
                continue
            except Exception as e:  # noqa: BLE001
                cause = getattr(e, "cause", None) or e
                outcomes.append(_failed(run.task, cause))
                continue
            if files is not None and run.task.workdir:
                ray_parts.replace_folder(files, run.task.workdir)
            if curves is not None and run.task.tensorboard:
                # added beside earlier rungs' event files: each has a name of its own
                ray_parts.write_files(curves, run.task.tensorboard)
            outcome = outcome_of(run.task, result)
            if outcome.metrics is not None:
                metrics = {**outcome.metrics, **timings, "ray_retries": run.tries - 1}
                outcome = dataclasses.replace(outcome, metrics=metrics)
            outcomes.append(outcome)
        now = time.monotonic()
        for ref, run in list(self._inflight.items()):
            if self.hard_timeout_s and now - run.started > self.hard_timeout_s:
                self._ray.cancel(ref, force=True)
                del self._inflight[ref]
                outcomes.append(_too_late(run.task, self.hard_timeout_s))
        return outcomes

    def _after_loss(self, run: RayRun, e: BaseException) -> list[Outcome]:
        """A lost node is no fault of the candidate: it runs again, up to `max_tries`."""
        cause = describe_failure(e)[0]
        if run.tries >= self.max_tries:
            return [Outcome.failed(run.task, f"{cause} (on each of its {run.tries} tries)")]
        logging.warning("candidate %d: its Ray node or worker was lost (%s); it runs again on "
                        "the nodes that remain (try %d of %d)", run.task.candidate_id, cause,
                        run.tries + 1, self.max_tries)
        run.tries += 1
        self._start(run)
        return []

    def close(self) -> None:
        for ref in list(self._inflight):
            self._ray.cancel(ref, force=True)
        self._inflight.clear()
        self._ready.clear()


class NoExecutor:
    """`search.workers=0`: the driver only proposes; `nas-search worker`s train."""

    capacity = 0

    def submit(self, task: Task) -> None:
        raise ValueError("search.workers=0: this driver trains nothing")

    def running(self) -> int:
        return 0

    def poll(self, timeout: float) -> list[Outcome]:
        return []

    def close(self) -> None:
        pass


def keep_driver_on_cpu() -> bool:
    """Puts the driver's own JAX work on the CPU backend, so it takes no accelerator memory
    from its workers; returns whether it took effect (only before JAX was first used)."""
    if xla_bridge.backends_are_initialized():
        return jax.default_backend() == "cpu"
    jax.config.update("jax_platforms", "cpu")
    with deferred_interrupt(raise_after=True):
        jax.devices()  # now, not lazily in the middle of the search
    return True


def make_executor(kind: str, *, workers: int, ray_address: str | None,
                  hard_timeout_s: float, prepare_ahead: int = 0,
                  share_device: str | None = None, ray: RayConfig | None = None,
                  max_tries: int = 3) -> Executor:
    """The executor `kind` names. `ray`: the study's resolved `settings.RayConfig` (None:
    one CPU a task, the data shipped)."""
    if workers == 0 or kind in ("local", "ray"):
        if not keep_driver_on_cpu():
            logging.warning("the driver already initialized an accelerator backend before "
                            "its executor was made; it may hold accelerator memory")
    else:
        with deferred_interrupt(raise_after=True):
            jax.devices()  # the backend it trains on: now, not mid-candidate
    if workers == 0:
        return NoExecutor()
    if kind == "inline":
        return InlineExecutor()
    if kind == "local":
        return LocalExecutor(workers, hard_timeout_s, prepare_ahead, share_device)
    if kind == "ray":
        return RayExecutor(ray_address, workers, hard_timeout_s, prepare_ahead,
                           share_device, settings=ray, max_tries=max_tries)
    raise ValueError(f"config field 'search.executor': unknown executor {kind!r}; expected "
                     f"'local', 'ray' or 'inline'")
