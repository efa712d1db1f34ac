from dataclasses import replace

import pytest

from orchestrator.inputs.validation import InputError
from orchestrator.sweep.cluster.inventory import NodeType, inventory_from_nodes
from orchestrator.units import GIB


def node_id(name: str) -> str:
    return name.encode().hex().ljust(56, "0")  # Ray node ids are 28 bytes of hex


def node(name, gpu=None, num_gpus=0, memory_gib=100, alive=True):
    resources = {"CPU": 8, "memory": memory_gib * GIB}
    if gpu:
        resources |= {"GPU": num_gpus, f"accelerator_type:{gpu}": 1}
    return {"NodeID": node_id(name), "Alive": alive, "Resources": resources, "NodeManagerAddress": "10.0.0.1"}


H200_TYPE = NodeType("h200", "H200", num_gpus=8, max_workers=2, memory_gib=2000)
INVENTORY = inventory_from_nodes(
    [node("head"), node("h1", "H100", 8, 1000), node("h2", "H100", 4, 2000), node("a1", "A100", 8, 300),
     node("dead", "L40S", 8, alive=False)],
    driver_node_id=node_id("head"),
    launchable=(H200_TYPE,),
)  # fmt: skip


def test_types_are_read_from_accelerator_resources_of_live_nodes_and_launchable_types():
    assert INVENTORY.gpu_types() == {"H100", "A100"}
    assert INVENTORY.has("cpu") and not INVENTORY.has("L40S")
    assert INVENTORY.has("H200") and not INVENTORY.is_up("H200")
    assert INVENTORY.availability("H100") == "up (12 GPUs on 2 node(s))"
    assert INVENTORY.availability("H200") == "launchable (max 16 GPUs)"
    assert INVENTORY.availability("L40S") == "absent"


def test_a_node_gets_a_slot_per_gpu_unless_its_memory_cannot_hold_every_slots_replica():
    assert len(INVENTORY.slots("H100", 0)) == 12
    # 1000 GiB holds two 416 GiB replicas (a 400 GiB tier and 16 GiB of replica), 2000 GiB four (it has 4 GPUs).
    by_node = [slot.node_id for slot in INVENTORY.slots("H100", 416)]
    assert by_node.count(node_id("h1")) == 2 and by_node.count(node_id("h2")) == 4
    assert [slot.node_id for slot in INVENTORY.slots("cpu", 0)] == [node_id("head")]
    assert INVENTORY.slots("H200", 0) == []  # nothing up yet
    assert INVENTORY.max_slots_launchable("H200", 416) == 2 * 4  # 2000 GiB per node: four replicas


def test_slots_ask_ray_for_one_gpu_of_their_type_and_the_replicas_memory_on_their_node():
    options = INVENTORY.slots("A100", 216)[0].actor_options()
    assert options["num_gpus"] == 1 and options["accelerator_type"] == "A100" and options["memory"] == 216 * GIB
    assert options["scheduling_strategy"].node_id == node_id("a1")


def test_a_dram_budget_no_node_of_the_type_can_give_is_refused_naming_the_largest_valid_one():
    INVENTORY.check_replica_memory("A100", 284, 300)
    with pytest.raises(InputError, match=r"DRAM budget 285 GiB is larger than any A100 node can give.* 16 GiB for itself.*at most 284"):
        INVENTORY.check_replica_memory("A100", 285, 301)


def test_launchable_types_count_for_the_memory_check_when_their_configuration_states_it():
    INVENTORY.check_replica_memory("H200", 1900, 1916)
    with pytest.raises(InputError, match=r"largest H200 node \(launchable type 'h200'\) has 2000 GiB"):
        INVENTORY.check_replica_memory("H200", 1990, 2006)
    unknown = inventory_from_nodes([node("head")], node_id("head"), (NodeType("x", "L4", 1, 1, None),))
    unknown.check_replica_memory("L4", 10**6, 10**6 + 16)  # checked when its nodes come up


def test_a_tensor_parallel_replica_larger_than_any_node_of_its_type_is_refused_naming_the_largest_degree():
    INVENTORY.check_gang("H100", (8,), 100)  # h1: 8 GPUs and 1000 GiB of Ray memory
    with pytest.raises(InputError, match=r"a tensor-parallel replica of 8 H100 GPUs needs them on one node, and no "
                                         r"H100 node up or launchable gives more than 4 slot\(s\); valid: --tp up to 4"):
        INVENTORY.check_gang("H100", (8,), 416)  # by memory h1 gives 2 slots, h2 4
    INVENTORY.check_gang("H200", (8, 8), 200)  # two launchable nodes of 8
    with pytest.raises(InputError, match=r"a cell of 3 replicas of 8 GPUs needs 24 H200 GPUs at once; the cluster has 0 "
                                         r"H200 slot\(s\) up and can launch 16 more; valid: --replicas up to 2"):
        INVENTORY.check_gang("H200", (8, 8, 8), 200)


def test_a_tensor_parallel_worker_asks_ray_for_all_its_gpus_on_its_node_and_a_routed_coordinator_for_none():
    slot = INVENTORY.slots("H100", 0)[0]
    holder = replace(slot, gang_size=4, num_gpus=4, memory_gib=80).actor_options()
    assert holder["num_gpus"] == 4 and holder["accelerator_type"] == "H100" and holder["memory"] == 80 * GIB
    coordinator = replace(slot, gang_size=4, num_gpus=0, memory_gib=0).actor_options()
    assert "num_gpus" not in coordinator and coordinator["num_cpus"] == 0
