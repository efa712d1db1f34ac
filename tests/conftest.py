from __future__ import annotations

import os

import pytest

from orchestrator.models.tiny import ensure_tiny_model
from orchestrator.workload.tokenizer import HfTokenCounter

# A local ``ray.init()`` with RAY_AUTH_MODE unset turns token authentication on in this process for good (its
# C++ config keeps it) and writes RAY_AUTH_MODE=token into os.environ. Once ``restored_environment`` has dropped
# that variable, the next module's cluster starts without auth while this process still demands a token on every
# call the cluster makes to it ("Missing authorization header"), so each actor it creates dies at once. Set before
# any test runs, the mode is the same for this process and every cluster it starts.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


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


@pytest.fixture(scope="module")
def local_ray():
    """A real local Ray cluster of 2 CPUs for the tests of one module."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
