"""The Ray cluster as a sweep sees it: its inventory of GPU slots (``inventory``), the autoscaler's
launchable node types and requests, connecting fast, and the check that every node can read the model."""
