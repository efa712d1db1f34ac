"""The autoscaler, as the sweep sees it: which GPU node types it can launch, and asking it for GPUs.

Where the launchable node types come from, first found wins:

1. the cluster configuration the autoscaler publishes in Ray's GCS (autoscaler v2, which KubeRay runs);
2. the cluster-launcher YAML the autoscaler was started with: ``--autoscaler-config PATH``, else the
   ``--autoscaling-config`` of the autoscaler (``monitor.py``) running on this node, which is where
   ``ray job submit`` runs the driver on a ``ray up`` cluster (its head starts the monitor with
   ``~/ray_bootstrap_config.yaml``).

Asking is Ray's own mechanism, ``ray.autoscaler.sdk.request_resources``: one bundle per whole node wanted,
``{"GPU": <the type's GPUs per node>, "accelerator_type:<T>": 0.001}``, which only a node of a type that has both
holds. Each call replaces the previous request; an empty one withdraws it, so idle GPU nodes can go.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from orchestrator.inputs.validation import InputError
from orchestrator.sweep.cluster.inventory import ACCELERATOR_PREFIX, NodeType
from orchestrator.units import GIB

MONITOR_FLAG = "--autoscaling-config="
# Per-bundle share of a node's accelerator_type resource (each node has 1 of it): any number of GPUs of
# one node fit, and only nodes of that type can hold the bundle.
ACCELERATOR_SHARE = 0.001


def node_types_from_launcher_config(config: Mapping) -> tuple[NodeType, ...]:
    """The GPU worker types of a cluster-launcher configuration (pure); types that can launch no node are left out."""
    default_max = config.get("max_workers", 0)
    types = []
    for name, node in (config.get("available_node_types") or {}).items():
        resources = node.get("resources") or {}
        max_workers = node.get("max_workers", default_max)
        node_type = _gpu_node_type(name, resources, max_workers)
        if node_type is not None:
            types.append(node_type)
    return tuple(types)


def node_types_from_cluster_config(cluster_config) -> tuple[NodeType, ...]:
    """The GPU node groups of autoscaler v2's ``ClusterConfig`` message (``max_count`` -1: unbounded)."""
    types = []
    for group in cluster_config.node_group_configs:
        max_count = group.max_count if group.max_count >= 0 else 10**6
        node_type = _gpu_node_type(group.name, dict(group.resources), max_count)
        if node_type is not None:
            types.append(node_type)
    return tuple(types)


def _gpu_node_type(name: str, resources: Mapping, max_workers: int) -> NodeType | None:
    accelerators = sorted(key.removeprefix(ACCELERATOR_PREFIX) for key in resources if key.startswith(ACCELERATOR_PREFIX))
    num_gpus = int(resources.get("GPU", 0))
    if not accelerators or num_gpus <= 0 or max_workers <= 0:
        return None
    memory = resources.get("memory")
    return NodeType(name, accelerators[0], num_gpus, int(max_workers), memory / GIB if memory else None)


def read_launchable_types(config_path: Path | None = None) -> tuple[NodeType, ...]:
    """The GPU node types the cluster's autoscaler can launch; () when it has none (or no autoscaler runs)."""
    if config_path is not None:
        return node_types_from_launcher_config(_load_yaml(config_path))
    published = _published_cluster_config()
    if published is not None and published.node_group_configs:
        return node_types_from_cluster_config(published)
    local = _local_monitor_config_path()
    if local is not None and local.exists():
        return node_types_from_launcher_config(_load_yaml(local))
    return ()


def node_bundles(demand: Mapping[str, int], gpus_per_node: Mapping[str, int]) -> list[dict[str, float]]:
    """The bundles that ask for ``demand[T]`` GPUs of each type ``T`` as whole nodes of ``gpus_per_node[T]``: a
    tensor-parallel replica needs its GPUs on one node, which bundles of one GPU each would let the autoscaler
    spread over nodes it packs with other work."""
    return [{"GPU": gpus_per_node[gpu], f"{ACCELERATOR_PREFIX}{gpu}": ACCELERATOR_SHARE}
            for gpu, count in sorted(demand.items()) for _ in range(count // gpus_per_node[gpu])]  # fmt: skip


def request_gpus(demand: Mapping[str, int], gpus_per_node: Mapping[str, int]) -> None:
    """Ask the autoscaler for ``demand[T]`` GPUs of each accelerator type ``T``, whole nodes of ``gpus_per_node[T]``
    (replacing any earlier ask)."""
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=node_bundles(demand, gpus_per_node))


def _load_yaml(path: Path) -> dict:
    try:
        return yaml.safe_load(Path(path).expanduser().read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise InputError(f"--autoscaler-config {path}: cannot read it as a cluster YAML ({error})") from None


def _published_cluster_config():
    try:
        import ray._private.state

        return ray._private.state.state.get_cluster_config()
    except Exception:  # an older GCS without the key, or a client connection: nothing published
        return None


def _local_monitor_config_path() -> Path | None:
    """The ``--autoscaling-config`` of the autoscaler of the connected cluster, if it runs on this node
    (another local cluster's autoscaler, which tests start, has another GCS address)."""
    import psutil
    import ray

    gcs_flag = f"--gcs-address={ray.get_runtime_context().gcs_address}"
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info.get("cmdline") or []
        if not any(Path(part).name == "monitor.py" for part in cmdline) or gcs_flag not in cmdline:
            continue
        for part in cmdline:
            if part.startswith(MONITOR_FLAG):
                return Path(part.removeprefix(MONITOR_FLAG)).expanduser()
    return None
