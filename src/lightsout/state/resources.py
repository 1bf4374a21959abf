"""Resource amounts as exact integers, and the words a person reads about them.

Every request, allocatable and free amount in the snapshot and the planner is a `Resources`:
CPU in millicores, everything else (memory and ephemeral storage in bytes, pods, GPUs and other
extended resources in units) in base units rounded up. Integers keep the planner's arithmetic
exact and fast (no Decimal in the hot loop); the builders in `lightsout.state.parse` produce them
and `lightsout.planning.autoscaler.scheduling` formats them back into reasons ("needs 6, free 3.5").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from lightsout.models.types import parse_quantity

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"

#: Resources measured in bytes, shown with binary suffixes.
_BYTE_RESOURCES = (MEMORY, EPHEMERAL_STORAGE)


@dataclass(frozen=True, slots=True)
class Resources:
    """Amounts by resource name, sorted by name, zeros left out (so equal amounts compare and
    hash equal). Amounts may be negative only as the free space of an over-committed node."""

    amounts: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, amounts: Mapping[str, int] | Iterable[tuple[str, int]]) -> Resources:
        items = amounts.items() if isinstance(amounts, Mapping) else amounts
        merged: dict[str, int] = {}
        for name, value in items:
            merged[name] = merged.get(name, 0) + value
        return cls(tuple(sorted((k, v) for k, v in merged.items() if v)))

    def get(self, name: str) -> int:
        for key, value in self.amounts:
            if key == name:
                return value
        return 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.amounts)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.amounts)

    def __bool__(self) -> bool:
        return bool(self.amounts)

    def __add__(self, other: Resources) -> Resources:
        return Resources.of([*self.amounts, *other.amounts])

    def __sub__(self, other: Resources) -> Resources:
        return Resources.of([*self.amounts, *((k, -v) for k, v in other.amounts)])

    def __str__(self) -> str:
        return ", ".join(f"{k}={format_amount(k, v)}" for k, v in self.amounts) or "nothing"


def parse_amount(name: str, value: object) -> int | None:
    """`value` (a quantity string or number from an API object) as an integer amount of `name`,
    or None when it is not a quantity (the caller skips it rather than failing the object)."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, int):
            number = Decimal(value)
        elif isinstance(value, float):
            number = Decimal(repr(value))
        elif isinstance(value, str):
            number = parse_quantity(value)
        else:
            return None
    except (ValueError, InvalidOperation):
        return None
    if not number.is_finite() or number < 0:
        return None
    if name == CPU:
        number *= 1000
    # Rounded up, as the scheduler does: 0.1m of CPU still takes one millicore.
    return math.ceil(number)


def parse_resources(values: object) -> Resources:
    """A `requests`/`allocatable`-style map; entries that are not quantities are skipped."""
    if not isinstance(values, Mapping):
        return Resources()
    out: list[tuple[str, int]] = []
    for name, raw in values.items():
        if not isinstance(name, str):
            continue
        amount = parse_amount(name, raw)
        if amount is not None:
            out.append((name, amount))
    return Resources.of(out)


def format_amount(name: str, value: int) -> str:
    """An amount the way a person writes it: cpu `3.5`, memory `1.5Gi`, gpus `1`."""
    if name == CPU:
        return _trim(value / 1000, 3)
    if name in _BYTE_RESOURCES or name.startswith("hugepages-"):
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if abs(value) >= size:
                return _trim(value / size) + suffix
        return str(value)
    return str(value)


def _trim(number: float, digits: int = 2) -> str:
    text = f"{number:.{digits}f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"
