"""A cell as a value every stage reads: its spec and key, its simulated engine's recorded configuration, its
``cell.json`` read back."""
