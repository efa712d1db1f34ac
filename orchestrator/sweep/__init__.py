"""A sweep, by role: ``planning`` decides what runs and where it may run before anything starts (pure: the
spec, its cells, their engines, preflight, scale-up arithmetic); ``runtime`` runs it (the driver's loop, the
worker pool and workers, the ledger that is the only writer, tracking, progress); ``cluster`` is the access
to the Ray cluster (its inventory, the autoscaler, connecting, the model check on every node). The command line
every ``sweeps/*.py`` script shares is ``orchestrator.cli.sweep``."""
