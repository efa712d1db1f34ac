"""Capacity under an SLO: the highest load each policy carries within it (``plan``: pure), found and confirmed as
sweeps (``search``), the replicas a traffic needs (``fleet``) and what a thousand jobs cost."""
