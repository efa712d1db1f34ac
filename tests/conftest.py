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
