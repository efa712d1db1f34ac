"""Units shared by every module, defined once.

The DRAM budget of a cell (``dram_gb`` on the command line, in specs, summaries and MLflow) is in GiB
(2**30 bytes): that is how LMCache (``LMCACHE_MAX_LOCAL_CPU_SIZE``) and vLLM (``--kv-offloading-size``)
read the size they are given, so the budget a user names is the tier the engine allocates.
"""

GIB = 2**30
