"""Reaching Ray: a local Ray of our own, or the cluster at an address, checked up front.

Why: `ray.init()` with no address joins whatever cluster Ray's session file names, a dead
one included (a crash leaves it behind), and failed there with a message about num_cpus.
A local search therefore starts its own Ray (`address="local"`); an address is checked to
answer within seconds, and a task that no node can hold is refused at start (Ray would keep
it pending forever).
"""

from __future__ import annotations

import contextlib
import math
import socket
import warnings
from collections.abc import Iterator
from typing import Any

REACH_TIMEOUT_S = 5.0


@contextlib.contextmanager
def fork_then_exec() -> Iterator[None]:
    """Silences JAX's warning that `os.fork()` was called, for Ray's process starts only.

    Ray starts its local processes with a `preexec_fn` (so CPython forks through
    `os.register_at_fork` hooks, where JAX, once loaded, warns of deadlocks); each child
    only sets its signals and then execs, so none of this process's threads is needed."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called",
                                category=RuntimeWarning)
        yield


def start_or_join(ray: Any, address: str | None, slots: int, request: dict[str, float]
                  ) -> None:
    """Initializes Ray in this process, unless it already is (a user's own `ray.init`).

    No `address`: a new local Ray with room for `slots` tasks of `request` at once (its GPUs
    found by Ray). An address ("auto", "host:port", "ray://host:port"): that cluster, or one
    ValueError line saying it cannot be reached."""
    if ray.is_initialized():
        return
    if not address:
        custom = {k: v * slots for k, v in request.items() if k not in ("CPU", "GPU")}
        with fork_then_exec():
            ray.init(address="local", num_cpus=max(1, math.ceil(request.get("CPU", 1) * slots)),
                     resources=custom or None, include_dashboard=False, log_to_driver=False)
        return
    check_reachable(address)
    try:
        with fork_then_exec():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as e:
        raise ValueError(f"config field 'search.ray_address': cannot join the Ray cluster at "
                         f"{address!r} ({_first_line(e)})") from None


def check_reachable(address: str) -> None:
    """One ValueError line when nothing answers at `address` (within REACH_TIMEOUT_S):
    "auto" naming no running cluster, or a host:port that refuses or does not answer."""
    target: str | None = address.removeprefix("ray://")
    if not address.startswith("ray://"):
        try:
            from ray._private.services import canonicalize_bootstrap_address

            target = canonicalize_bootstrap_address(address)
        except ImportError:  # Ray moved it: ray.init checks on its own
            return
        except ConnectionError:  # "auto" found no cluster
            target = None
        except Exception as e:  # noqa: BLE001 - Ray's own reasons, e.g. a malformed address
            raise ValueError(f"config field 'search.ray_address': {address!r} is not a Ray "
                             f"address ({_first_line(e)})") from None
        if target is None:
            raise ValueError(f"config field 'search.ray_address': {address!r} names no "
                             f"running Ray cluster (start one with `ray start --head`, or "
                             f"leave the field empty for a local Ray)")
    host, _, port = str(target).rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), REACH_TIMEOUT_S):
            pass
    except (OSError, ValueError) as e:
        raise ValueError(f"config field 'search.ray_address': cannot reach a Ray cluster at "
                         f"{target} ({_first_line(e)})") from None


def check_fits(ray: Any, request: dict[str, float]) -> None:
    """One ValueError line when no live node has every resource one task asks for."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(all(node.get(k, 0.0) >= v for k, v in request.items()) for node in nodes):
        return
    have = "; ".join(", ".join(f"{k} {v:g}" for k, v in sorted(node.items())
                               if k in request) or "none of them" for node in nodes)
    asked = ", ".join(f"{k} {v:g}" for k, v in sorted(request.items()))
    raise ValueError(f"config field 'search.ray': each task asks for {asked}, more than any "
                     f"node of the Ray cluster has ({len(nodes)} node(s): {have or 'none'})")


def _first_line(e: BaseException) -> str:
    text = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]
