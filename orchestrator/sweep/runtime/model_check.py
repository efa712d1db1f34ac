"""Before any replica starts: every node that will serve the sweep's model can read it.

Replicas start offline, so a model missing from a node's Hugging Face cache used to fail each cell about a
minute in, inside the worker. Here one short Ray task per node of every GPU type that is up (the driver's
node for the CPU engine) asks ``models.served`` there, in seconds, and the sweep stops with one line that
names the model, the node and ``--weights dummy``. Nodes of a type that is only launchable, and a node that
cannot take the task now (one that just joined or left), are checked by their workers when cells come to
them: the cell fails at once with the same line and is not retried.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.cell.spec import CellSpec, EngineKind
from orchestrator.inputs.validation import InputError
from orchestrator.models.served import ModelUnavailable, Weights, served_model
from orchestrator.sweep.cluster.inventory import Inventory, raylet_answers

CHECK_TIMEOUT_S = 60.0  # generating the tiny model on a node imports torch: seconds, not minutes


def unreadable_on_this_node(model: str, weights: Weights, need_weights: bool) -> str | None:
    """Why this node cannot serve ``model`` with ``weights`` (one line), or None when it can."""
    try:
        served_model(model, weights, need_weights)
    except ModelUnavailable as error:
        return str(error)
    return None


def check_model_files(cells: Iterable[CellSpec], inventory: Inventory) -> None:
    """Raises ``InputError`` when a node of a type that is up cannot read what its cells serve."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    wanted = {(cell.gpu, cell.model, cell.weights, cell.engine is EngineKind.VLLM)
              for cell in cells if cell.engine is not EngineKind.SIM and inventory.is_up(cell.gpu)}  # fmt: skip
    probes = []  # (GPU type, node id, the task's answer)
    for gpu, model, weights, need_weights in sorted(wanted):
        for node in filter(raylet_answers, inventory.nodes_of(gpu)):  # not one that has just left: its task would fail
            where = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
            task = ray.remote(unreadable_on_this_node).options(num_cpus=0, scheduling_strategy=where)
            probes.append((gpu, node.node_id, task.remote(model, weights, need_weights)))
    if not probes:
        return
    refs = [ref for _, _, ref in probes]
    answered, unanswered = ray.wait(refs, num_returns=len(refs), timeout=CHECK_TIMEOUT_S)
    for ref in unanswered:
        ray.cancel(ref, force=True)
    for gpu, node_id, ref in probes:
        if ref not in answered:
            continue
        try:
            error = ray.get(ref)
        except ray.exceptions.RayError:  # the node could not take the task: its worker checks when it runs a cell
            continue
        if error is not None:
            raise InputError(f"{error} (found on {gpu} node {node_id[:8]})")
