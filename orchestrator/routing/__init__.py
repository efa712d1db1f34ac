"""Routing a cell's requests over its replicas (pure): the routers' rules, written once, used by the simulator's
replicas and by the Ray Serve request router alike."""
