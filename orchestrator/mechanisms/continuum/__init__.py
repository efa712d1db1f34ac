"""Continuum: an agent job's KV pinned across its tool calls, in one place.

- ``config``: its tuning (TTL, whose pins give way), which a replica reads from its environment;
- ``pins``: the pin table (what is pinned, until when, who gives way first);
- ``rules``: every decision built on the table, taken by the vLLM plugin and the simulator alike;
- ``retention``: the mechanism a policy composes (``ContinuumPins``) and its hooks in the simulator.

The vLLM plugin (``replica/schedulers/continuum.py``) is glue: it turns vLLM's requests and blocks into these
values and carries out the answers. What became of each pin in a cell is a record (``records/pins.py``).
"""
