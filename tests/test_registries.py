"""Every registry the code fixes (policies, their mechanisms, routers, stacks) is one ``Registry``: an unknown name is
refused in one line naming it and every known one, and asking whether a name is there never raises."""

from __future__ import annotations

import pytest

from orchestrator.inputs.validation import InputError
from orchestrator.mechanisms.registry import ORDERINGS, RETENTIONS, TIERS
from orchestrator.policies.catalog import POLICIES, PolicyError
from orchestrator.replica.tested_stacks import STACKS
from orchestrator.routing.rules import ROUTERS


@pytest.mark.parametrize("registry", [ORDERINGS, RETENTIONS, TIERS, ROUTERS, POLICIES, STACKS],
                         ids=lambda registry: registry.kind)  # fmt: skip
def test_a_registry_refuses_an_unknown_name_in_one_line_naming_the_known_ones(registry):
    with pytest.raises(InputError) as raised:
        registry["nope"]
    assert str(raised.value) == f"unknown {registry.kind} 'nope'; known: {', '.join(registry)}"
    assert len(registry) >= 2 and "nope" not in registry and registry.get("nope") is None
    known = list(registry)[-1]
    assert known in registry and registry[known] is registry.get(known)


def test_an_unknown_policy_is_a_policy_error():
    with pytest.raises(PolicyError, match="unknown policy 'pinned'; known: fcfs, job-fcfs, continuum"):
        POLICIES["pinned"]
