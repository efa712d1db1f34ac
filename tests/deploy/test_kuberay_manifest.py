"""deploy/kuberay/raycluster.yaml: a RayCluster whose worker groups are the GPU types of ray_cluster.yaml, as
the autoscaler that KubeRay runs reads them (Ray's own parser of the custom resource)."""

import copy
import json

import pytest
import yaml

from orchestrator.gpus import GPU_TYPES
from orchestrator.models.catalog import LLAMA_8B
from orchestrator.paths import PROJECT_ROOT

MANIFEST = PROJECT_ROOT / "deploy" / "kuberay" / "raycluster.yaml"
DOCUMENTS = list(yaml.safe_load_all(MANIFEST.read_text()))
(CLUSTER,) = [doc for doc in DOCUMENTS if doc["kind"] == "RayCluster"]
SPEC = CLUSTER["spec"]
LAUNCHER = yaml.safe_load((PROJECT_ROOT / "ray_cluster.yaml").read_text())


def _launcher_gpu_types() -> set[str]:
    return {
        key.removeprefix("accelerator_type:")
        for node in LAUNCHER["available_node_types"].values()
        for key in node["resources"]
        if key.startswith("accelerator_type:")
    }


def _autoscaler_config(cluster=CLUSTER) -> dict:
    """What KubeRay's Ray autoscaler derives from the RayCluster (it also runs Ray's config schema over it)."""
    from ray.autoscaler._private.kuberay.autoscaling_config import _derive_autoscaling_config_from_ray_cr

    live = copy.deepcopy(cluster)
    live["metadata"].setdefault("namespace", "default")  # the API server fills it in on apply
    return _derive_autoscaling_config_from_ray_cr(live)


def _pods():
    yield "head", SPEC["headGroupSpec"]
    for group in SPEC["workerGroupSpecs"]:
        yield group["groupName"], group


def test_it_is_an_autoscaled_ray_io_v1_raycluster_of_ray_2_60():
    assert CLUSTER["apiVersion"] == "ray.io/v1"
    assert SPEC["enableInTreeAutoscaling"] is True and SPEC["autoscalerOptions"]["version"] == "v2"
    assert SPEC["rayVersion"] == "2.60.0"


def test_the_worker_groups_are_the_gpu_types_of_the_cluster_launcher_config_as_the_autoscaler_reads_them():
    node_types = _autoscaler_config()["available_node_types"]
    by_type = {}
    for name, node in node_types.items():
        accelerators = [
            key.removeprefix("accelerator_type:") for key in node["resources"] if key.startswith("accelerator_type:")
        ]
        if name == "headgroup":
            assert accelerators == [] and node["resources"].get("GPU", 0) == 0 and node["resources"]["CPU"] > 0
            continue
        (accelerator,) = accelerators
        by_type[accelerator] = node
        assert node["resources"][f"accelerator_type:{accelerator}"] == 1
        assert node["resources"]["GPU"] == 8 and node["min_workers"] == 0 and node["max_workers"] >= 1
    assert set(by_type) == _launcher_gpu_types() == {"H200", "H100", "A100", "L40S"}
    assert set(by_type) <= set(GPU_TYPES)


def test_a_resources_string_without_kuberays_quoting_is_refused_by_the_same_parser():
    broken = copy.deepcopy(CLUSTER)
    broken["spec"]["workerGroupSpecs"][0]["rayStartParams"]["resources"] = '{"accelerator_type:H200": 1}'
    with pytest.raises(Exception):
        _autoscaler_config(broken)


def test_each_gpu_group_gets_its_gpus_from_kubernetes_on_nodes_of_its_product():
    for group in SPEC["workerGroupSpecs"]:
        pod = group["template"]["spec"]
        (container,) = pod["containers"]
        gpus = group["rayStartParams"]["num-gpus"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
        assert container["resources"]["requests"]["nvidia.com/gpu"] == gpus
        accelerator = next(iter(json.loads(group["rayStartParams"]["resources"][1:-1].replace("\\", ""))))
        product = pod["nodeSelector"]["nvidia.com/gpu.product"]
        assert accelerator.removeprefix("accelerator_type:") in product, (group["groupName"], product)
        assert group["minReplicas"] == 0 and group["replicas"] == 0


def test_every_ray_node_has_a_small_object_store_no_memory_monitor_unniced_workers_and_one_image():
    images = set()
    for name, group in _pods():
        assert group["rayStartParams"]["object-store-memory"] == "4000000000", name
        pod = group["template"]["spec"]
        for container in pod["containers"] + pod.get("initContainers", []):
            images.add(container["image"])
        env = {item["name"]: item.get("value") for item in pod["containers"][0]["env"]}
        assert env["RAY_memory_monitor_refresh_ms"] == "0" and env["RAY_worker_niceness"] == "0", name
    assert len(images) == 1


def test_gpu_pods_fetch_the_model_into_the_cache_the_replicas_read_with_the_token_from_a_secret():
    for group in SPEC["workerGroupSpecs"]:
        pod = group["template"]["spec"]
        (fetch,) = pod["initContainers"]
        script = " ".join(fetch["command"])
        assert f"hf download {LLAMA_8B} " in script and "huggingface-cli" not in script
        token = next(item for item in fetch["env"] if item["name"] == "HF_TOKEN")
        assert set(token["valueFrom"]) == {"secretKeyRef"}
        cache = {mount["mountPath"]: mount["name"] for mount in fetch["volumeMounts"]}
        worker_cache = {mount["mountPath"]: mount["name"] for mount in pod["containers"][0]["volumeMounts"]}
        # Replicas run with HF_HUB_OFFLINE=1 and find the model by name in ~/.cache/huggingface of Ray's user.
        assert cache["/home/ray/.cache/huggingface"] == worker_cache["/home/ray/.cache/huggingface"]
    assert "huggingface-cli" not in MANIFEST.read_text()


def test_the_results_outlive_the_head_pod():
    head = SPEC["headGroupSpec"]["template"]["spec"]
    (claim,) = [
        volume["persistentVolumeClaim"]["claimName"] for volume in head["volumes"] if "persistentVolumeClaim" in volume
    ]
    assert any(doc["kind"] == "PersistentVolumeClaim" and doc["metadata"]["name"] == claim for doc in DOCUMENTS)


def test_every_ray_container_runs_with_token_authentication_which_an_open_dashboard_needs():
    # KubeRay's authOptions gives every Ray container (the autoscaler's too) RAY_AUTH_MODE=token and the token from a
    # Secret it generates: nothing in the manifest may switch it off or put a token in plain text.
    assert SPEC["authOptions"] == {"mode": "token"}
    for name, group in _pods():
        for container in group["template"]["spec"]["containers"]:
            names = {item["name"] for item in container.get("env", [])}
            assert not names & {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"}, name
    host = SPEC["headGroupSpec"]["rayStartParams"].get("dashboard-host", "localhost")
    assert host in ("localhost", "127.0.0.1") or SPEC["authOptions"]["mode"] == "token"
    assert "RAY_AUTH_MODE=token ray job submit" in MANIFEST.read_text()
