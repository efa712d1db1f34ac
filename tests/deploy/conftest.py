"""pip as the network tests run it: against the package index this machine is configured for, without its
local pip policies (a constraints file caps versions to what lies on this machine's disk, which says nothing
about what a GPU node installs)."""

from __future__ import annotations

import os
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

# Settings of pip's configuration files that are local policy, not the route to the index.
LOCAL_POLICY = {"constraint", "constraints", "requirement", "requirements"}


@pytest.fixture(scope="session")
def pip_env() -> dict[str, str]:
    """An environment in which pip reads no configuration file but keeps the configured index, links and CA."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True)
    env = {key: value for key, value in os.environ.items() if key != "PIP_CONSTRAINT"}
    for line in listed.stdout.splitlines():
        match = re.fullmatch(r"(?P<section>[^.]+)\.(?P<key>[^=]+)='(?P<value>.*)'", line.strip())
        if not match or match["section"] == ":env:" or match["key"] in LOCAL_POLICY:
            continue
        env.setdefault("PIP_" + match["key"].upper().replace("-", "_"), match["value"])
    env["PIP_CONFIG_FILE"] = os.devnull  # pip then skips every configuration file
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="session")
def package_index(pip_env) -> str:
    """The index URL pip will use; it must answer (this project's machines and CI reach the package index)."""
    index = pip_env.get("PIP_INDEX_URL", "https://pypi.org/simple").split()[0].rstrip("/")
    cafile = pip_env.get("PIP_CERT")
    context = ssl.create_default_context(cafile=cafile if cafile and os.path.exists(cafile) else None)
    try:
        with urllib.request.urlopen(f"{index}/vllm/", timeout=15, context=context) as response:
            response.read(1)
    except (urllib.error.URLError, OSError) as error:
        pytest.fail(f"package index {index} unreachable: {error}")
    return index
