"""The crossover search: the load at which the verdict between two policies changes, found by bisection over
jobs per second (``bisection``, pure) on sweeps run one round at a time (``search``)."""
