"""Valid option values, declared once per flow (in the manner of scikit-learn's ``_parameter_constraints``).

A flow declares ``CONSTRAINTS = {"top_n": Interval(int, 1, None), "method": OneOf("a", "b"), ...}`` and
calls ``validate(CONSTRAINTS, locals())`` first thing; the CLI calls the same ``validate`` before it starts
Prefect, so a bad value fails in well under a second with one line that names the option, the value and
what to give instead. ``None`` always passes: it means "the default" throughout dxplain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .errors import InputError


def flag(name: str) -> str:
    """The CLI spelling of a parameter: ``top_n`` → ``--top-n`` (single letters as ``-m``)."""
    return f"-{name}" if len(name) == 1 else "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Interval:
    """A number of ``kind`` (int or float) in [low, high] (``None`` = unbounded); ``open_low`` excludes low."""

    kind: type
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    example: Any = None

    def check(self, v) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float) if self.kind is float else int):
            return False
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if self.low is not None and (v <= self.low if self.open_low else v < self.low):
            return False
        return self.high is None or v <= self.high

    def describe(self) -> str:
        what = "an integer" if self.kind is int else "a number"
        bounds = []
        if self.low is not None:
            bounds.append(f"{'>' if self.open_low else '≥'} {self.low:g}")
        if self.high is not None:
            bounds.append(f"≤ {self.high:g}")
        text = f"{what} {' and '.join(bounds)}".strip()
        return text + (f" (e.g. {self.example})" if self.example is not None else "")


@dataclass(frozen=True)
class OneOf:
    """One of a fixed set of strings."""

    choices: tuple[str, ...]

    def __init__(self, *choices: str):
        object.__setattr__(self, "choices", tuple(choices))

    def check(self, v) -> bool:
        return v in self.choices

    def describe(self) -> str:
        return "one of " + ", ".join(self.choices)


@dataclass(frozen=True)
class Satisfies:
    """Any rule: ``test(value) -> bool`` and the sentence that says what is valid."""

    test: Any
    text: str

    def check(self, v) -> bool:
        return bool(self.test(v))

    def describe(self) -> str:
        return self.text


Constraint = Interval | OneOf | Satisfies


def validate(constraints: dict[str, Constraint], values: dict[str, Any]) -> None:
    """Raise ``InputError`` for the first value that breaks its constraint, naming the option and the fix."""
    for name, rule in constraints.items():
        v = values.get(name)
        if v is not None and not rule.check(v):
            raise InputError(f"{flag(name)} {v!r}: give {rule.describe()}")


# The factor models' own options, shared by the commands that train one (refresh, train, negatives, ...).
FACTORS = {
    "k": Interval(int, 1, example=32),
    "lam": Interval(float, 0, open_low=True, example=3e-4),
    "seed": Interval(int, 0),
}

# Where a flow runs: LocalCluster workers and the shards its work is cut into (every flow on a mapper).
CLUSTER = {
    "workers": Interval(int, 1, example=2),
    "shards": Interval(int, 1),
}

# Sampled negatives of implicit feedback: samples per positive and their weight in the BCE loss.
SAMPLED_NEGATIVES = {
    "neg_samples": Interval(int, 1, example=4),
    "neg_weight": Interval(float, 0, open_low=True, example=1),
}
