"""Finding vLLM processes on this machine, to prove none is left behind."""

from __future__ import annotations

import os
from pathlib import Path


def vllm_processes() -> list[tuple[int, str]]:
    """(pid, command line) of every live process other than this one that mentions vLLM."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and "vllm" in cmdline.lower():
            found.append((int(entry.name), cmdline.strip()))
    return found
