import pytest

from orchestrator.sweep.cluster import inventory_from_nodes
from orchestrator.validation import InputError


def node_id(name: str) -> str:
    return name.encode().hex().ljust(56, "0")  # Ray node ids are 28 bytes of hex


def node(name, gpu=None, num_gpus=0, memory_gb=100, alive=True):
    resources = {"CPU": 8, "memory": memory_gb * 1e9}
    if gpu:
        resources |= {"GPU": num_gpus, f"accelerator_type:{gpu}": 1}
    return {"NodeID": node_id(name), "Alive": alive, "Resources": resources, "NodeManagerAddress": "10.0.0.1"}


INVENTORY = inventory_from_nodes(
    [node("head"), node("h1", "H100", 8, 1000), node("h2", "H100", 4, 2000), node("a1", "A100", 8, 300),
     node("dead", "L40S", 8, alive=False)],
    driver_node_id=node_id("head"),
)  # fmt: skip


def test_types_are_read_from_accelerator_resources_of_live_nodes():
    assert INVENTORY.gpu_types() == {"H100", "A100"}
    assert INVENTORY.has("cpu") and not INVENTORY.has("L40S")


def test_a_node_gets_a_slot_per_gpu_unless_its_memory_cannot_hold_every_slots_dram_budget():
    assert len(INVENTORY.slots("H100", 0)) == 12
    # 1000 GB holds two 400 GB tiers, 2000 GB holds four (but the node has only 4 GPUs).
    by_node = [slot.node_id for slot in INVENTORY.slots("H100", 400)]
    assert by_node.count(node_id("h1")) == 2 and by_node.count(node_id("h2")) == 4
    assert [slot.node_id for slot in INVENTORY.slots("cpu", 0)] == [node_id("head")]


def test_slots_ask_ray_for_one_gpu_of_their_type_on_their_node():
    options = INVENTORY.slots("A100", 200)[0].actor_options()
    assert options["num_gpus"] == 1 and options["accelerator_type"] == "A100" and options["memory"] == int(200e9)
    assert options["scheduling_strategy"].node_id == node_id("a1")


def test_a_dram_budget_no_node_of_the_type_can_give_is_refused():
    INVENTORY.check_dram("A100", 300)
    with pytest.raises(InputError, match="DRAM budget 301 GB is larger than any A100 node can give .* at most 300"):
        INVENTORY.check_dram("A100", 301)
