"""A sweep running: the driver's loop (``driver``), the worker pool and the cell worker, the ledger (the only
writer of results and tracking), the MLflow tracker, progress, and the CPU engine's profiling sweep."""
