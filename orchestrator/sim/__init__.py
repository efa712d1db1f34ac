"""The simulated engine (``--engine sim``): one vLLM v1 engine in virtual time.

blocks.py (block pool, CPU tier) -> scheduler.py (one vLLM step, the policies' hooks) -> engine.py (the
clients, the host link and time) with ``orchestrator.roofline`` (what a step costs, from the datasheet and each GPU's
measured rates) and config.py (a cell to an engine); calibrate.py fits the constants on measured/ into the
roofline's calibration.toml; error_bands.py keeps the simulator's own error per policy and
per GPU (sim_error.toml); profile.py builds a device from a real engine's scheduler trace, and gpu_profile.py a
GPU's rates from its own. See docs/simulator.md.
"""
