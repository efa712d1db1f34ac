"""Agent traces: the project's own JSONL schema (``schema.py``), its generator (``generate.py``)."""
