"""Preloaded into a launcher by a test: every child the launcher forks exits at once with code 3, as a server forked
onto a GPU would that cannot use CUDA after the fork. The launcher itself runs on."""

import os

os.register_at_fork(after_in_child=lambda: os._exit(3))
