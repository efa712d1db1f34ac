"""The GPU evidence run's parts (``python -m orchestrator.gpu_evidence``): the time budget its stages are planned
against, and the few files its evidence is packed into."""
