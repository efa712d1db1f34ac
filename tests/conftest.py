from __future__ import annotations

import os

import pytest

from orchestrator.models.tiny import ensure_tiny_model
from orchestrator.workload.tokenizer import HfTokenCounter


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
