"""The Ray runtime `tune --ray` and `--ray-address` run on: a local one started for the tune (loopback
only, its files under a directory the tune owns) or a cluster joined, and the nodes it may use.

Every node must run what the driver runs: the same IREE (a build of another compiler is another
program) and the same CPU (a build for the host CPU made on one node is raced on another). A node that
differs is refused with one line naming it, before anything is built. A race takes a whole node as
the Ray resource :data:`RACE_RESOURCE`, 1 on each node that may race (the local runtime has it; a
cluster's nodes are started with it). The runtime is stopped when the ``with`` block ends, an interrupt
included (one that arrives while it starts takes effect once it has started); joining a cluster only
disconnects from it.
"""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from tracelink.errors import TracelinkError, first_line

LOOPBACK = "127.0.0.1"
RACE_RESOURCE = "tracelink_race"  # a race holds all of its node's, a build a sliver: see tune/remote.py
# Ray's unix sockets live at <temp>/session_<date>_<pid>/sockets/plasma_store: Linux allows 107 bytes
MAX_TEMP_DIR = 43


@dataclass(frozen=True)
class RayOptions:
    """How to reach Ray: ``address`` None starts a local runtime of ``cpus`` CPUs (None: all) with its
    files under ``temp_dir``. ``working_dir``: a directory of code the tasks import that the nodes do
    not have installed (a sweep's), carried to them by Ray; their tasks run in its copy."""

    address: str | None = None
    temp_dir: Path | None = None
    cpus: int | None = None
    working_dir: Path | None = None


@dataclass(frozen=True)
class Node:
    """A node of the runtime that passed the checks: its Ray id, address, CPUs and whether it has the
    race resource (builds and races run only on such nodes)."""

    node_id: str
    address: str
    cpus: int
    races: bool


def node_facts() -> dict[str, str]:
    """What must match on every node: the IREE compiler, tracelink and the CPU builds are made for."""
    from tracelink.version import __version__

    try:
        iree = version("iree-base-compiler")
    except PackageNotFoundError:
        iree = "none"
    return {"iree": iree, "tracelink": __version__, "cpu": _cpu()}


def _cpu() -> str:
    """The CPU model and its feature flags (what ``--iree-llvmcpu-target-cpu=host`` compiles for)."""
    try:
        info = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.machine()
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in info.splitlines()[:40])}
    model = fields.get("model name", "")
    flags = " ".join(sorted(fields.get("flags", "").split()))
    return f"{platform.machine()} {model} [{flags}]"


def _node_facts_task() -> dict[str, str]:
    import ray

    return {**node_facts(), "node": ray.get_runtime_context().get_node_id()}


class Cluster:
    """A Ray runtime for one tune, as a context manager: :attr:`nodes` are the nodes it uses."""

    def __init__(self, options: RayOptions, default_temp: Path):
        self.options = options
        self.temp_dir = Path(options.temp_dir or default_temp).absolute()
        self.scratch_owned = options.temp_dir is None  # the default is removed with the runtime
        if self.scratch_owned and len(str(self.temp_dir)) > MAX_TEMP_DIR:
            self.temp_dir = Path(tempfile.mkdtemp(prefix="tracelink-ray-"))  # private, and removed at the end
        self.nodes: list[Node] = []
        self.ray = None

    @property
    def local(self) -> bool:
        return self.options.address is None

    def __enter__(self) -> Cluster:
        if self.local:  # read when Ray is imported; a token of its own: Ray would otherwise write one under ~/.ray
            os.environ["RAY_AUTH_MODE"] = "token"
            os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))
            os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        self.ray = _import_ray(self._loopback())
        try:
            self._start()
            self.nodes = self._checked_nodes()
        except BaseException:
            self.ray.shutdown()
            raise
        return self

    def __exit__(self, *exception: object) -> None:
        self.ray.shutdown()  # a local runtime's processes stop with it
        if self.local and self.scratch_owned:  # its logs and links would stay in the profile's tune/ otherwise
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _loopback(self) -> bool:
        address = self.options.address
        return address is None or address.split("//")[-1].split(":")[0] in (LOOPBACK, "localhost")

    def _start(self) -> None:
        if not self.local:
            _reachable(self.options.address)
            try:
                self.ray.init(address=self.options.address, include_dashboard=False, log_to_driver=False,
                              logging_level="ERROR", runtime_env=self._environment())
            except (ConnectionError, RuntimeError, ValueError, self.ray.exceptions.RayError) as error:
                raise TracelinkError(f"--ray-address {self.options.address}: {first_line(error)}") from None
            return
        if len(str(self.temp_dir)) > MAX_TEMP_DIR:
            raise TracelinkError(f"{self.temp_dir}: too long for Ray's socket paths (at most {MAX_TEMP_DIR} "
                                 "characters); give a shorter --ray-temp-dir")
        if self.temp_dir.is_symlink():
            raise TracelinkError(f"{self.temp_dir}: a link; give a directory of its own as --ray-temp-dir")
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        with _signals_held():
            self.ray.init(num_cpus=self.options.cpus or os.cpu_count(), resources={RACE_RESOURCE: 1},
                          include_dashboard=False, _node_ip_address=LOOPBACK, _temp_dir=str(self.temp_dir),
                          log_to_driver=False, logging_level="ERROR", runtime_env=self._environment())

    def _environment(self) -> dict | None:
        return {"working_dir": str(self.options.working_dir)} if self.options.working_dir else None

    def _checked_nodes(self) -> list[Node]:
        """The alive nodes with CPUs, each asked for its facts; one that differs from the driver's is refused."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self.ray
        alive = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1]
        probe = ray.remote(num_cpus=0)(_node_facts_task)
        try:
            facts = ray.get([probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
                             for n in alive], timeout=120)
        except ray.exceptions.RayError as error:
            raise TracelinkError(f"{self.options.address or 'the local Ray runtime'}: a node did not say what it runs "
                                 f"({first_line(error)})") from None
        own = node_facts()
        for node, theirs in zip(alive, facts):
            for key, what in (("iree", "IREE"), ("tracelink", "tracelink"), ("cpu", "CPU")):
                if theirs[key] != own[key]:
                    raise TracelinkError(f"ray node {node['NodeID'][:12]} ({node['NodeManagerAddress']}) refused: its {what} "
                                         f"is {_short(theirs[key])}, the driver's {_short(own[key])}; every node needs "
                                         "the driver's IREE, tracelink and CPU")
        if not alive:
            raise TracelinkError(f"{self.options.address or 'the local Ray runtime'}: no node with a CPU")
        return [Node(n["NodeID"], n["NodeManagerAddress"], int(n["Resources"]["CPU"]),
                     n["Resources"].get(RACE_RESOURCE, 0) >= 1) for n in alive]

    def address_of(self, node_id: str) -> str:
        return next((node.address for node in self.nodes if node.node_id == node_id), "")

    def racing_nodes(self) -> list[Node]:
        """The nodes a tune builds and races on: those with the race resource; none is one line."""
        racing = [node for node in self.nodes if node.races]
        if not racing:
            raise TracelinkError(f"{self.options.address}: no node has the {RACE_RESOURCE} resource a race takes; "
                                 f"start each node with ray start --resources='{{\"{RACE_RESOURCE}\": 1}}'")
        return racing

    def scratch(self) -> str | None:
        """Where a task writes its files: under the local runtime's directory; a node's own temp elsewhere."""
        return str(self.temp_dir) if self.local else None


@contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP held while Ray starts its processes, then delivered: an interrupt
    half-way leaves the agents its raylet was starting running after the tune. The main thread's
    handlers only (Python runs them there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    numbers = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {number: signal.signal(number, lambda received, frame: held.append(received)) for number in numbers}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if held:
        signal.raise_signal(held[0])


def _reachable(address: str) -> None:
    """Refuse a ``host:port`` nobody answers on (Ray would retry it for minutes); ``auto`` and a
    ``ray://`` address are Ray's to resolve."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except (OSError, ValueError) as error:
        raise TracelinkError(f"--ray-address {address}: no Ray cluster answers there "
                             f"({getattr(error, 'strerror', None) or first_line(error)})") from None


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def _import_ray(loopback: bool):
    """Ray, set to advertise the loopback address when every node is on this machine (its own way: a
    node's loopback address is otherwise replaced by the machine's network address)."""
    if loopback:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        import ray
        import ray._private.ray_constants as constants
    except ImportError:
        raise TracelinkError("--ray needs Ray: pip install 'tracelink[ray]'") from None
    if loopback:  # read when Ray was imported: a caller may have imported it before
        constants.ENABLE_RAY_CLUSTER = False
    if "RAY_AUTH_TOKEN" in os.environ:  # read when Ray was imported: refreshed as Ray does when it turns token mode on
        from ray._private.authentication.authentication_token_setup import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    return ray
