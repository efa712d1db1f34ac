"""Reading launchable GPU node types from the autoscaler's configuration, the scale-up rules, and how a gang of
idle workers is picked."""

import yaml

from orchestrator.paths import PROJECT_ROOT
from orchestrator.sweep.cluster.autoscaler import (
    node_bundles,
    node_types_from_cluster_config,
    node_types_from_launcher_config,
)
from orchestrator.sweep.cluster.inventory import NodeType, Slot
from orchestrator.sweep.planning.scaling import ScaleUp, gpus_to_ask
from orchestrator.sweep.runtime.pool import Worker, gang_of


def test_the_projects_cluster_yaml_offers_every_gpu_type_of_the_source_study_at_zero_minimum():
    config = yaml.safe_load((PROJECT_ROOT / "ray_cluster.yaml").read_text())
    types = {t.accelerator_type: t for t in node_types_from_launcher_config(config)}
    assert set(types) == {"H200", "H100", "A100", "L40S"}
    assert all(t.num_gpus == 8 and t.max_workers >= 1 for t in types.values())


def test_cpu_types_and_types_that_can_launch_nothing_are_left_out():
    config = {
        "max_workers": 3,
        "available_node_types": {
            "head": {"resources": {"CPU": 4}, "max_workers": 0},
            "cpu": {"resources": {"CPU": 16}},
            "frozen": {"resources": {"GPU": 1, "accelerator_type:L4": 1}, "max_workers": 0},
            "h100": {"resources": {"GPU": 8, "accelerator_type:H100": 1, "memory": 512 * 2**30}},
        },
    }
    assert node_types_from_launcher_config(config) == (NodeType("h100", "H100", 8, 3, 512.0),)


def test_autoscaler_v2_node_groups_read_the_same_way():
    from ray.core.generated.autoscaler_pb2 import ClusterConfig, NodeGroupConfig

    message = ClusterConfig(node_group_configs=[
        NodeGroupConfig(name="gpu-h100", resources={"GPU": 8, "accelerator_type:H100": 1}, min_count=0, max_count=2),
        NodeGroupConfig(name="unbounded", resources={"GPU": 1, "accelerator_type:L4": 1}, max_count=-1),
        NodeGroupConfig(name="head", resources={"CPU": 8}, max_count=1),
    ])  # fmt: skip
    types = node_types_from_cluster_config(message)
    assert [(t.name, t.accelerator_type, t.num_gpus, t.max_workers) for t in types] == [
        ("gpu-h100", "H100", 8, 2), ("unbounded", "L4", 1, 10**6)
    ]  # fmt: skip


def test_whole_nodes_are_asked_for_within_max_workers_and_memory():
    h100 = NodeType("h100", "H100", num_gpus=8, max_workers=3, memory_gib=1000)
    assert gpus_to_ask(h100, 1, 0) == 8  # one node
    assert gpus_to_ask(h100, 9, 0) == 16
    assert gpus_to_ask(h100, 100, 0) == 24  # max_workers caps it
    assert gpus_to_ask(h100, 5, 416) == 24  # two replicas per node by memory: three nodes


def test_scale_up_asks_only_on_change_and_times_out_types_with_no_node_up():
    asks = []
    scale = ScaleUp(timeout_s=10, ask=asks.append)
    assert scale.update({"H100": 8, "A100": 0}, up=set(), now=0) == []
    assert scale.update({"H100": 8}, up=set(), now=5) == []
    assert asks == [{"H100": 8}]  # the same demand is not asked twice
    assert scale.update({"H100": 8, "H200": 8}, up={"H100"}, now=11) == []  # H100 came up in time
    assert scale.update({"H100": 8, "H200": 8}, up={"H100"}, now=22) == ["H200"]
    scale.withdraw()
    scale.withdraw()
    assert asks == [{"H100": 8}, {"H100": 8, "H200": 8}, {}]


def test_the_autoscaler_is_asked_for_whole_nodes_so_a_tensor_parallel_replica_finds_its_gpus_on_one():
    bundles = node_bundles({"H100": 16, "L4": 2}, {"H100": 8, "L4": 1})
    assert [bundle["GPU"] for bundle in bundles] == [8, 8, 1, 1]
    assert all(bundle[f"accelerator_type:{gpu}"] > 0 for bundle, gpu in zip(bundles, ["H100", "H100", "L4", "L4"]))


def test_a_gang_takes_each_group_from_one_node_best_fit_and_nothing_until_it_is_whole():
    def idle(counts: dict[str, int]) -> list[Worker]:
        return [Worker(Slot("H100", node, index, 0.0)) for node, count in counts.items() for index in range(count)]

    workers = idle({"a": 3, "b": 8, "c": 4})
    gang = gang_of(workers, (4,))
    assert {worker.slot.node_id for worker in gang} == {"c"}  # the fullest fit, leaving b whole for a TP-8 cell
    pair = gang_of(workers, (4, 4))
    assert [worker.slot.node_id for worker in pair].count("c") == 4 and len({w.slot.node_id for w in pair}) == 2
    assert gang_of(workers, (8, 8)) is None  # two groups of eight: one node has 8, none other
    assert gang_of(idle({"a": 3, "b": 3}), (4,)) is None  # six idle GPUs, but no four on one node
    assert len(gang_of(idle({"a": 3, "b": 3}), (1, 1, 1, 1))) == 4  # a routed cell of 4 one-GPU replicas spreads
