from __future__ import annotations

import pytest

from orchestrator.models.tiny import ensure_tiny_model
from orchestrator.workload.tokenizer import HfTokenCounter


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
