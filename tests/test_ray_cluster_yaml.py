"""ray_cluster.yaml is a valid Ray cluster-launcher config and declares what the sweep relies on."""

import copy

import yaml

from orchestrator.gpus import GPU_TYPES
from orchestrator.paths import PROJECT_ROOT

CONFIG = yaml.safe_load((PROJECT_ROOT / "ray_cluster.yaml").read_text())


def test_it_passes_rays_own_schema_after_ray_fills_in_the_provider_defaults():
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(copy.deepcopy(CONFIG)))


def test_a_typo_fails_the_same_check():
    import jsonschema
    import pytest
    from ray.autoscaler._private.util import prepare_config, validate_config

    broken = copy.deepcopy(CONFIG)
    broken["available_node_types"]["h100"]["resourcez"] = broken["available_node_types"]["h100"].pop("resources")
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(broken))


def test_every_worker_type_is_one_known_gpu_type_with_its_accelerator_resource():
    workers = {name: node for name, node in CONFIG["available_node_types"].items() if name != CONFIG["head_node_type"]}
    declared = set()
    for node in workers.values():
        (accelerator,) = [key for key in node["resources"] if key.startswith("accelerator_type:")]
        declared.add(accelerator.removeprefix("accelerator_type:"))
        assert node["resources"]["GPU"] >= 1
    assert declared == {"H200", "H100", "A100", "L40S"} and declared <= set(GPU_TYPES)
    assert CONFIG["available_node_types"][CONFIG["head_node_type"]]["resources"]["GPU"] == 0


def test_every_node_starts_ray_with_a_small_object_store_and_no_memory_monitor():
    for commands in (CONFIG["head_start_ray_commands"], CONFIG["worker_start_ray_commands"]):
        start = next(command for command in commands if "ray start" in command)
        assert "RAY_memory_monitor_refresh_ms=0" in start and "--object-store-memory=4000000000" in start
