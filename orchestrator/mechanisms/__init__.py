"""KV mechanisms: the parts a policy is composed of, each owning what it means everywhere.

A policy (``orchestrator.policies.catalog``) is one mechanism of each kind:

- an **ordering** (``ordering.py``): which waiting request runs first;
- a **retention** (``retention.py``): what becomes of a finished turn's KV (freed to the prefix cache there, or
  pinned for the job's next turn: Continuum's, in ``continuum/``);
- a **tier** (``tier.py`` and one module per tier): where KV goes beyond the GPU pool, or none.

Each mechanism owns its vLLM arguments and environment, its sizes, its behaviour in the simulator (hooks the
simulator's scheduler and engine call, as vLLM's scheduler calls its KV connector), the evidence that it did its
job on a real engine, and what it needs of a node. Nothing outside this package branches on which mechanism a
policy has. A new mechanism is a module here and a line in ``registry.py``; docs/architecture.md shows how.
"""
