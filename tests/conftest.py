"""What every test shares: a root for its files, one Ray cluster, the tiny model, and how ``make test`` splits
the suite between its two test processes (pytest-xdist) and its solo part.

``make test`` runs the suite in two processes side by side, then the ``solo`` tests alone. Each test module
runs whole in one process, so its module fixtures start once; the tests that start a real vLLM server run in
one process, one after another, so two engines never share the two cores (``engine`` marks them).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from orchestrator.models.cache import default_cache_dir
from orchestrator.models.tiny import ensure_tiny_model
from orchestrator.workload.tokenizer import HfTokenCounter
from tests.clusters import RayCluster, SecureHead, add_fake_gpu_nodes, start_secure_head, start_shared_cluster
from tests.processes import TEST_ROOT_ENV, kill_processes_naming

# A local ``ray.init()`` with RAY_AUTH_MODE unset turns token authentication on in this process for good (its
# C++ config keeps it) and writes RAY_AUTH_MODE=token into os.environ. Once ``restored_environment`` has dropped
# that variable, the next module's cluster starts without auth while this process still demands a token on every
# call the cluster makes to it ("Missing authorization header"), so each actor it creates dies at once. Set before
# any test runs, the mode is the same for this process and every cluster it starts.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

# This test process's root: temporary files, pytest's tmp_path, and Ray's temp dir (with the address file that
# `ray.init()` and a driver with no address join) of everything it starts, so that a test process beside it never
# joins its clusters or mistakes its servers for its own. Short: Ray's socket paths must fit in 107 bytes.
TEST_ROOT = Path(tempfile.mkdtemp(prefix=f"kvt-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-", dir="/tmp"))
os.environ[TEST_ROOT_ENV] = str(TEST_ROOT)
os.environ["TMPDIR"] = str(TEST_ROOT)
os.environ.pop("RAY_TMPDIR", None)  # Ray's temp dir is then TMPDIR/ray
tempfile.tempdir = str(TEST_ROOT)
# TorchInductor caches the kernels it compiles (a tensor-parallel CPU replica's, g++ for each) under the temp dir,
# which is new for every run: kept where the node keeps its models instead, a later run loads them.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(default_cache_dir().parent / "torchinductor"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before pytest's own hook reads it; under pytest-xdist this replaces the basetemp the controller gave.
    config.option.basetemp = str(TEST_ROOT / "pytest")


def pytest_unconfigure(config: pytest.Config) -> None:
    # A backstop for a fixture whose teardown did not run: every process started under the root (Ray's nodes name
    # their session directory in it) goes with the test process.
    kill_processes_naming(str(TEST_ROOT))
    shutil.rmtree(TEST_ROOT, ignore_errors=True)


# Session fixtures too costly to start in both test processes: their tests run in one group, so one process.
ONE_PROCESS_FIXTURES = ("secure_ray_head",)
ONE_PROCESS_GROUP = "one-process-fixtures"
# Fixtures whose tests start Ray clusters, drivers and replicas: after the real engine's, the longest groups.
CLUSTER_FIXTURES = ("ray_cluster", "fake_gpu_nodes", "autoscaling_head")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """For pytest-xdist's ``--dist loadgroup --no-loadscope-reorder``: the tests of a module in one group (module
    fixtures start once), those of a one-process fixture in one group of their own, and the groups handed out
    longest first (real-engine tests, then those of a cluster, then the rest), so that neither test process
    ends the run alone with a long group."""
    rank: dict[str, int] = {}
    for item in items:
        if not any(item.iter_markers("xdist_group")):
            one_process = set(ONE_PROCESS_FIXTURES) & set(item.fixturenames)
            item.add_marker(pytest.mark.xdist_group(ONE_PROCESS_GROUP if one_process else item.nodeid.split("::")[0]))
        group = item.get_closest_marker("xdist_group").args[0]
        rank[group] = min(rank.get(group, 3), _length_rank(item))
    items.sort(key=lambda item: rank[item.get_closest_marker("xdist_group").args[0]])


def _length_rank(item: pytest.Item) -> int:
    if item.get_closest_marker("engine"):
        return 0
    if set(ONE_PROCESS_FIXTURES) & set(item.fixturenames):
        return 1
    return 2 if set(CLUSTER_FIXTURES) & set(item.fixturenames) else 3


@pytest.fixture(scope="module", autouse=True)
def restored_environment():
    """Each test module leaves ``os.environ`` as it found it. vLLM's CPU platform, set up in-process by the
    async-Continuum tests, writes ``LD_PRELOAD`` (tcmalloc, torch's libgomp) into it, and every process a
    later test starts (a Ray cluster, a sweep's driver, a stand-in server) would inherit those libraries."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return ensure_tiny_model(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def tiny_counter(tiny_model_dir):
    return HfTokenCounter(str(tiny_model_dir))


@pytest.fixture(scope="session")
def ray_cluster() -> RayCluster:
    """The test process's one Ray cluster (``tests.clusters.start_shared_cluster``), joined by this process and by
    the drivers its tests start. Started once: the tests that need a cluster started otherwise (a token head, an
    autoscaler, a driver's own) start theirs."""
    import ray

    cluster = start_shared_cluster()
    ray.init(address=cluster.address, log_to_driver=False)
    yield RayCluster(cluster.address, cluster)
    ray.shutdown()
    cluster.shutdown()
    # The head's Ray Client proxy outlives the shutdown by minutes; it names the head's address, not the root.
    kill_processes_naming(f"--address={cluster.address}")


@pytest.fixture(scope="session")
def fake_gpu_nodes(ray_cluster) -> dict[str, str]:
    """The shared cluster with nodes of declared GPUs ('H100', 'A100', 'L4' of two; ``tests.clusters``), added the
    first time a test asks: GPU type -> the node id of its node."""
    return add_fake_gpu_nodes(ray_cluster.cluster)


@pytest.fixture(scope="session")
def secure_ray_head(tmp_path_factory) -> SecureHead:
    """A head that asks for a token, started as the recipes start theirs (``tests.clusters.start_secure_head``),
    for the tests of drivers, doctors and Ray jobs joining such a cluster (``ray_cluster`` asks for none). It
    outlives a killed driver. Only its own processes are stopped afterwards: `ray stop` would end every Ray
    process of this user, those of a test process beside this one too."""
    temp_dir = Path(tempfile.mkdtemp(prefix="head-"))  # under the test root: short enough for Ray's sockets
    head = start_secure_head(tmp_path_factory.mktemp("home"), temp_dir)
    yield head
    kill_processes_naming(str(temp_dir))
    kill_processes_naming(f"--address={head.address}")
