"""Selection policies: how the planner ranks machines that could all do the job.

A Group's `selectionPolicy` ranks its own machines:

- `LowestEnergy` (default): least added power per unit of pending demand hosted. A machine's
  draw is modelled as idle + (on - idle) * cpu utilisation, minus what it draws when off; times
  the Group's electricity price when Groups differ in price.
- `LeastWaste`: least unused capacity (mean over cpu, memory and any extended resources the
  machine offers) once the pods are placed.
- `Priority`: highest `spec.autoscaling.priority` first.
- `FastestBoot`: shortest boot first: the boot time learned from the machine's phase history
  (`status.learned.bootSeconds`), else its `spec.power.bootTimeoutSeconds`.

Ties fall back to energy per demand, then to the machine's name, so plans are deterministic.
Between Groups whose policies differ, energy per demand decides. `planning.autoscaler.scaleup`
(choosing machines to power on), its minNodes top-up and `planning.autoscaler.scaledown` (the order
machines are considered for power-off) call the functions here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lightsout.models.enums import SelectionPolicy
from lightsout.state.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, Resources
from lightsout.state.types import Group, Machine, ObjectKey

#: Assumed draw of a machine without a power profile when no machine declares one.
DEFAULT_WATTS = 100.0
_NOT_WASTE = frozenset({PODS, EPHEMERAL_STORAGE})


@dataclass(frozen=True, slots=True)
class EnergyModel:
    """Watts and prices for the whole snapshot, so unknowns are filled in consistently."""

    #: Draw assumed for a machine without a power profile: the hungriest declared one, so a
    #: machine whose draw is known is preferred to one whose draw is not.
    default_watts: float
    #: Price per kWh assumed for a Group without one (their mean), 1.0 when none has one.
    default_price: float

    @classmethod
    def of(cls, machines: Iterable[Machine], groups: Iterable[Group]) -> EnergyModel:
        known = [w for m in machines for w in (m.watts_idle, m.watts_on) if w is not None]
        prices = [g.price_per_kwh for g in groups if g.price_per_kwh is not None]
        return cls(
            default_watts=max(known, default=DEFAULT_WATTS),
            default_price=sum(prices) / len(prices) if prices else 1.0,
        )

    def watts(self, machine: Machine, cpu_utilisation: float) -> float:
        """Power the machine adds when on at this cpu utilisation (0..1)."""
        idle = machine.watts_idle if machine.watts_idle is not None else machine.watts_on
        busy = machine.watts_on if machine.watts_on is not None else idle
        if idle is None or busy is None:
            idle = busy = self.default_watts
        off = machine.watts_off or 0.0
        return max(idle - off, 0.0) + max(busy - idle, 0.0) * min(max(cpu_utilisation, 0.0), 1.0)

    def cost(self, machine: Machine, group: Group, cpu_utilisation: float) -> float:
        price = group.price_per_kwh if group.price_per_kwh is not None else self.default_price
        return self.watts(machine, cpu_utilisation) * price


@dataclass(frozen=True, slots=True)
class Fill:
    """One machine with pods placed on it, as the policies compare it."""

    machine: Machine
    group: Group
    #: Pending demand hosted (sum of the placed pods' weights, see `cluster.pod_weights`).
    value: float
    cost: float
    waste: float
    watts: float


def fill_of(
    *,
    machine: Machine,
    group: Group,
    energy: EnergyModel,
    allocatable: Mapping[str, int],
    free_after: Mapping[str, int],
    value: float,
) -> Fill:
    used = {k: v - free_after.get(k, 0) for k, v in allocatable.items() if v > 0}
    shares = [used[k] / allocatable[k] for k in used if k not in _NOT_WASTE]
    waste = 1.0 - sum(shares) / len(shares) if shares else 1.0
    cpu = used.get(CPU, 0) / allocatable[CPU] if allocatable.get(CPU) else 0.0
    return Fill(
        machine, group, value, energy.cost(machine, group, cpu), waste, energy.watts(machine, cpu)
    )


def _per_value(fill: Fill) -> float:
    return fill.cost / fill.value if fill.value > 0 else float("inf")


def rank(policy: SelectionPolicy, fill: Fill) -> tuple[float, ...]:
    """Sort key (lower is better) of `fill` under `policy`."""
    match policy:
        case SelectionPolicy.LEAST_WASTE:
            head: tuple[float, ...] = (fill.waste,)
        case SelectionPolicy.PRIORITY:
            head = (-fill.machine.priority,)
        case SelectionPolicy.FASTEST_BOOT:
            head = (fill.machine.boot_estimate,)
        case _:
            head = ()
    return (*head, _per_value(fill), -fill.value)


def best(fills: list[Fill]) -> Fill:
    """The best fill among the candidates of possibly several Groups."""
    policies = {fill.group.selection_policy for fill in fills}
    policy = policies.pop() if len(policies) == 1 else SelectionPolicy.LOWEST_ENERGY
    return min(fills, key=lambda f: (rank(policy, f), f.machine.key))


def select[T](candidates: Iterable[tuple[T, Fill, ObjectKey]]) -> T:
    """What the scale-up powers on among `candidates` (each a thing, its fill and the name its
    ties fall to): each Group's best under its own policy, then `best` among those. The
    deferral of a Job (`planning.autoscaler.deferral`) prices the machine this picks for its
    pods, so the machine a Job is held for is the one powered on when it is released."""
    per_group: dict[ObjectKey, tuple[tuple[tuple[float, ...], ObjectKey], T, Fill]] = {}
    for thing, fill, name in candidates:
        key = (rank(fill.group.selection_policy, fill), name)
        held = per_group.get(fill.group.key)
        if held is None or key < held[0]:
            per_group[fill.group.key] = (key, thing, fill)
    winner = best([fill for _, _, fill in per_group.values()])
    return per_group[winner.group.key][1]


def idle_rank(
    machine: Machine, group: Group, energy: EnergyModel, allocatable: Resources | None
) -> tuple[float, ...]:
    """Order in which to power on machines with no particular pod in mind (minNodes): the
    cheapest to keep on first under the Group's policy (`allocatable`: None when unknown)."""
    cost = energy.cost(machine, group, 0.0)
    match group.selection_policy:
        case SelectionPolicy.LEAST_WASTE:
            size = allocatable or Resources()
            return (float(size.get(CPU)), float(size.get(MEMORY)), cost)
        case SelectionPolicy.PRIORITY:
            return (-machine.priority, cost)
        case SelectionPolicy.FASTEST_BOOT:
            return (machine.boot_estimate, cost)
    return (cost,)


def power_off_rank(machine: Machine, group: Group, energy: EnergyModel) -> tuple[float, ...]:
    """Among equally idle machines, which to power off first: the reverse of the order
    they would be powered on in (the hungriest, the lowest priority; under FastestBoot the
    fastest to come back)."""
    match group.selection_policy:
        case SelectionPolicy.PRIORITY:
            return (float(machine.priority),)
        case SelectionPolicy.FASTEST_BOOT:
            return (machine.boot_estimate,)
        case SelectionPolicy.LOWEST_ENERGY:
            return (-energy.cost(machine, group, 0.0),)
    return ()


def describe(fill: Fill, count: int) -> str:
    """How the policy saw the chosen machine, for its PowerOn reason."""
    policy = fill.group.selection_policy
    pods = f"{count} pod{'s' if count != 1 else ''}"
    match policy:
        case SelectionPolicy.LEAST_WASTE:
            return f"{policy}: {fill.waste:.0%} of it left unused with {pods}"
        case SelectionPolicy.PRIORITY:
            return f"{policy}: priority {fill.machine.priority}"
        case SelectionPolicy.FASTEST_BOOT:
            learned = fill.machine.learned_boot_seconds
            if learned is not None:
                return f"{policy}: boots in about {learned:.0f}s (learned)"
            return f"{policy}: boots within {fill.machine.boot_seconds}s (bootTimeoutSeconds)"
    return f"{policy}: about {fill.watts:.0f} W for {pods}"
