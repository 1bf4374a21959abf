"""What a Group's objective weighs a kWh by over time: its price in force (`tariff`: the price
series where it has one, else the time-of-use rates over `pricePerKWh`), or with
`objective: Carbon` the grams of CO2 of its carbon series.

One reading of `spec.electricity` for the planner's two uses of it: the cost of a deferrable
Job's start (`planning.autoscaler.deferral`) and the break-even time of a power cycle
(`planning.autoscaler.breakeven`); the simulator's sweep and offline optimum read it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from lightsout.models.enums import DeferralObjective
from lightsout.models.group import Electricity
from lightsout.planning.energy import tariff
from lightsout.state.series import Series
from lightsout.state.types import Group


@dataclass(frozen=True, slots=True)
class Weight:
    """A kWh's weight over time by `objective`: a price, or grams of CO2."""

    electricity: Electricity
    prices: Series | None
    carbon: Series | None
    objective: DeferralObjective

    @classmethod
    def of(cls, group: Group, objective: DeferralObjective | None = None) -> Weight | None:
        """`group`'s weight by `objective` (its own when None); None when the Group has no
        electricity, or the carbon series `objective: Carbon` weighs by is missing."""
        electricity = group.electricity
        if electricity is None:
            return None
        chosen = electricity.objective if objective is None else objective
        if chosen is DeferralObjective.CARBON and group.carbon is None:
            return None
        return cls(electricity, group.prices, group.carbon, chosen)

    @property
    def _carbon(self) -> Series:
        assert self.carbon is not None
        return self.carbon

    @property
    def by_carbon(self) -> bool:
        return self.objective is DeferralObjective.CARBON

    @property
    def unit(self) -> str:
        """What `integral` counts in: grams of CO2 or the currency."""
        return "gCO2" if self.by_carbon else self.electricity.currency

    @property
    def varies(self) -> bool:
        """Whether the weight differs from hour to hour at all (a series, or rates)."""
        if self.by_carbon:
            return self.carbon is not None
        return bool(self.electricity.rates) or self.prices is not None

    def at(self, moment: datetime) -> float | None:
        """The weight of a kWh at `moment`; None outside the carbon series (a price always
        has one: past its series, the tariff's)."""
        if self.by_carbon:
            return self._carbon.at(moment)
        return tariff.price_at(self.electricity, moment, self.prices)

    def next_change(self, moment: datetime) -> datetime | None:
        """The first moment after `moment` at which the weight differs (None: never does)."""
        if self.by_carbon:
            return self._carbon.next_change(moment)
        return tariff.next_change(self.electricity, moment, self.prices)

    def integral(self, watts: float, start: datetime, end: datetime) -> float:
        """`watts` drawn from `start` to `end`, each stretch at its own weight (a stretch
        outside the carbon series weighs 0)."""
        if self.by_carbon:
            return self._carbon.integral(watts, start, end)
        return tariff.cost(self.electricity, watts, start, end, self.prices)

    def covers(self, start: datetime, end: datetime) -> bool:
        """Whether a forecast covers `start` to `end` (a tariff always does; a series only up
        to its last interval)."""
        series = self.carbon if self.by_carbon else self.prices
        return series is None or series.covers(start, end)


__all__ = ["Weight"]
