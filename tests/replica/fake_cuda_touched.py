"""Preloaded into a launcher by a test, standing for a module whose import touched CUDA (this machine has no GPU): it
puts a stand-in ``torch`` into ``sys.modules`` whose CUDA is initialized (``FAKE_CUDA=initialized``) or, as after a
``cuInit`` behind torch's back, marks every child forked from here unable to use it (``FAKE_CUDA=driver``)."""

import os
import sys
from types import SimpleNamespace

_state = os.environ["FAKE_CUDA"]
sys.modules["torch"] = SimpleNamespace(cuda=SimpleNamespace(is_initialized=lambda: _state == "initialized",
                                                            _is_in_bad_fork=lambda: _state == "driver"))  # fmt: skip
