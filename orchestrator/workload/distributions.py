"""Named, seeded distributions for the parametric agent workload: turns per job, token counts, tool times.

Each is a frozen pydantic model with a ``kind`` tag, so a workload that uses one is stored, keyed and
logged as plain JSON, and parsed back to the same thing. Every one can ``sample`` from a caller's
``random.Random`` (the caller owns seeding, so a schedule is fixed before the clock starts), and knows its
``cdf`` and ``mean`` exactly, which the tests check draws against and the sizing code plans with.

The presets are the shapes the issue describes from published SWE-agent tool timings; where the
publication gives a median or a mean but not the spread, the spread is ours and is said so beside it.
"""

from __future__ import annotations

import json
import math
import random
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

_FROZEN = ConfigDict(frozen=True, extra="forbid")


def _normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


class Fixed(BaseModel):
    """Always ``value``."""

    model_config = _FROZEN
    kind: Literal["fixed"] = "fixed"
    value: float = Field(ge=0)

    def sample(self, rng: random.Random) -> float:
        return self.value

    def cdf(self, x: float) -> float:
        return 1.0 if x >= self.value else 0.0

    @property
    def mean(self) -> float:
        return self.value


class Uniform(BaseModel):
    """Continuous uniform on ``[low, high]``."""

    model_config = _FROZEN
    kind: Literal["uniform"] = "uniform"
    low: float = Field(ge=0)
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.high <= self.low:
            raise ValueError(f"uniform needs low < high, got low={self.low:g} high={self.high:g}")
        return self

    def sample(self, rng: random.Random) -> float:
        return rng.uniform(self.low, self.high)

    def cdf(self, x: float) -> float:
        return min(1.0, max(0.0, (x - self.low) / (self.high - self.low)))

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2


class IntUniform(BaseModel):
    """Every integer in ``[low, high]`` equally likely (turns per job, for example)."""

    model_config = _FROZEN
    kind: Literal["int-uniform"] = "int-uniform"
    low: int = Field(ge=0)
    high: int

    @model_validator(mode="after")
    def _ordered(self) -> IntUniform:
        if self.high < self.low:
            raise ValueError(f"int-uniform needs low <= high, got low={self.low} high={self.high}")
        return self

    def sample(self, rng: random.Random) -> float:
        return float(rng.randint(self.low, self.high))

    def cdf(self, x: float) -> float:
        return min(1.0, max(0.0, (math.floor(x) - self.low + 1) / (self.high - self.low + 1)))

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2


class LogNormal(BaseModel):
    """``exp(N(ln median, sigma^2))``: the shape of tool times and output lengths, a long right tail.

    Give ``median`` with either ``sigma`` or ``mean`` (then ``sigma = sqrt(2 ln(mean / median))``), since
    published timings quote a median and a mean more often than a spread."""

    model_config = _FROZEN
    kind: Literal["lognormal"] = "lognormal"
    median: float = Field(gt=0)
    sigma: float = Field(gt=0)

    @model_validator(mode="before")
    @classmethod
    def _sigma_from_mean(cls, data):
        if isinstance(data, dict) and "mean" in data:
            data = dict(data)
            mean, median = data.pop("mean"), data.get("median")
            if "sigma" in data:
                raise ValueError("lognormal takes sigma or mean, not both")
            if not isinstance(median, (int, float)) or not isinstance(mean, (int, float)) or not mean > median > 0:
                raise ValueError(f"lognormal from a mean needs mean > median > 0, got median={median} mean={mean}")
            data["sigma"] = math.sqrt(2 * math.log(mean / median))
        return data

    @property
    def mu(self) -> float:
        return math.log(self.median)

    def sample(self, rng: random.Random) -> float:
        return rng.lognormvariate(self.mu, self.sigma)

    def cdf(self, x: float) -> float:
        return 0.0 if x <= 0 else _normal_cdf((math.log(x) - self.mu) / self.sigma)

    @property
    def mean(self) -> float:
        return math.exp(self.mu + self.sigma**2 / 2)

    def partial_mean(self, cap: float) -> float:
        """``E[X; X < cap]``, for the mean of a capped lognormal."""
        return self.mean * _normal_cdf((math.log(cap) - self.mu - self.sigma**2) / self.sigma)


class Capped(BaseModel):
    """``min(draw, max)``: a value past ``max`` is cut to it, as a tool's own timeout cuts a long command."""

    model_config = _FROZEN
    kind: Literal["capped"] = "capped"
    dist: Distribution
    max: float = Field(gt=0)

    def sample(self, rng: random.Random) -> float:
        return min(self.dist.sample(rng), self.max)

    def cdf(self, x: float) -> float:
        return 1.0 if x >= self.max else self.dist.cdf(x)

    @property
    def mean(self) -> float:
        dist = self.dist
        if isinstance(dist, LogNormal):
            return dist.partial_mean(self.max) + self.max * (1 - dist.cdf(self.max))
        if isinstance(dist, Capped):  # min(min(X, a), c) = min(X, min(a, c))
            return Capped(dist=dist.dist, max=min(dist.max, self.max)).mean
        if isinstance(dist, Mixture):  # the cap applies to each component's draw
            capped = [Capped(dist=component.dist, max=self.max).mean for component in dist.components]
            return sum(c.weight * m for c, m in zip(dist.components, capped)) / sum(c.weight for c in dist.components)
        return _capped_mean_by_quadrature(self)


def _capped_mean_by_quadrature(capped: Capped, steps: int = 4096) -> float:
    # E[min(X, c)] = integral over [0, c) of (1 - F(x)) dx, for X >= 0.
    width = capped.max / steps
    return sum((1 - capped.dist.cdf((i + 0.5) * width)) * width for i in range(steps))


class Component(BaseModel):
    model_config = _FROZEN
    weight: float = Field(gt=0)
    dist: Distribution
    label: str = ""


class Mixture(BaseModel):
    """Draw a component by weight (weights need not sum to 1), then draw from it."""

    model_config = _FROZEN
    kind: Literal["mixture"] = "mixture"
    components: tuple[Component, ...] = Field(min_length=1)

    @property
    def _total(self) -> float:
        return sum(component.weight for component in self.components)

    def sample(self, rng: random.Random) -> float:
        pick = rng.random() * self._total
        for component in self.components:
            pick -= component.weight
            if pick < 0:
                return component.dist.sample(rng)
        return self.components[-1].dist.sample(rng)

    def cdf(self, x: float) -> float:
        return sum(component.weight * component.dist.cdf(x) for component in self.components) / self._total

    @property
    def mean(self) -> float:
        return sum(component.weight * component.dist.mean for component in self.components) / self._total


Distribution = Annotated[
    Union[Fixed, Uniform, IntUniform, LogNormal, Capped, Mixture],
    Field(discriminator="kind"),
]
Capped.model_rebuild()
Component.model_rebuild()
Mixture.model_rebuild()
_ADAPTER: TypeAdapter = TypeAdapter(Distribution)


def _swe_agent_tool_time() -> Mixture:
    # About 7,900 tool calls of SWE-agent style runs (the figures): 61% take about 0 s (editor,
    # submit); light shell commands have a median near 0.19 s; heavy shell commands a median near 0.49 s
    # and a mean near 4.9 s; package installs average about 79 s. Ours, not published: how the other 39%
    # split (0.25 / 0.13 / 0.01), the light commands' and installs' spread (sigma 1), and the 300 s cap
    # (a tool's own timeout; it also bounds a cell's length).
    return Mixture(components=(
        Component(weight=0.61, dist=Fixed(value=0.0), label="editor, submit"),
        Component(weight=0.25, dist=Capped(dist=LogNormal(median=0.19, sigma=1.0), max=300), label="light shell"),
        Component(weight=0.13, dist=Capped(dist=LogNormal(median=0.49, mean=4.9), max=300), label="heavy shell"),
        Component(weight=0.01, dist=Capped(dist=LogNormal(median=79 / math.exp(0.5), sigma=1.0), max=300),
                  label="install"),
    ))  # fmt: skip


# Our choices for the parametric workload's other quantities: turns in the range the issue names (8-15 calls
# per SWE-bench session); answers longer than the source study's 20 tokens (an agent's tool call with its
# reasoning); tool outputs smaller than its 775-2,730, so that the longest job (15 turns, every draw at its
# cap: 80 + 14 x (900 + 256) = 16,264 tokens) still fits vLLM's default max_model_len of 16,384.
PRESETS: dict[str, Distribution] = {
    "swe-agent-tool-time": _swe_agent_tool_time(),
    "agent-turns": IntUniform(low=8, high=15),
    "agent-tool-tokens": Capped(dist=LogNormal(median=500, sigma=0.8), max=900),
    "agent-output-tokens": Capped(dist=LogNormal(median=60, sigma=0.8), max=256),
}


def parse_distribution(text: str, what: str) -> float | Distribution:
    """A number (a fixed value), a preset's name, or a distribution as JSON. Raises ``ValueError`` with one line
    naming ``what`` and the valid forms."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    if text in PRESETS:
        return PRESETS[text]
    valid = (f"valid: a number, a preset ({', '.join(PRESETS)}), or JSON such as "
             '{"kind": "lognormal", "median": 0.5, "sigma": 1.2}')  # fmt: skip
    if not text.startswith("{"):
        raise ValueError(f"{what} {text!r} is not a number, preset or JSON distribution; {valid}")
    try:
        return _ADAPTER.validate_python(json.loads(text))
    except json.JSONDecodeError as error:
        raise ValueError(f"{what} {text!r} is not valid JSON ({error.msg} at character {error.pos}); {valid}") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "distribution"
        raise ValueError(f"{what}: {where}: {first['msg']}; {valid}") from None
