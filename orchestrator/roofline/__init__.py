"""What a step costs on a device (pure): the roofline of a forward pass, a copy over the host link and an all-reduce
(``hardware.py``), from the GPU catalogue's datasheets, each GPU's measured rates (``rates.py``, ``gpu_rates.toml``)
and an engine stack's constants (``Calibration``: the source study's in ``calibration.toml``, fitted by
``sim.calibrate``; the fitted stacks' in ``sim/fitted_stacks``).

Below the mechanisms and the simulator, which both read it: the simulator prices each step with a ``StepCost``, and a
tier's hooks price its loads and saves from the same costs and the stack's constants.
"""
