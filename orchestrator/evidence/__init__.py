"""Evidence that a node serves and that a cell did what its policy claims: the node's checks (``checks``), and the
GPU evidence run's parts (``kvsweep evidence``): the time budget its stages are planned against, the pressure plan, the
held-out predictions, and the few files its evidence is packed into."""
