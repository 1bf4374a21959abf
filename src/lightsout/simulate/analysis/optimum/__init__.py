"""The offline optimum of a trace: the least energy (or cost, or carbon) any schedule could
use, by a real solver.

`model` states and builds the zero-wait MIP and the with-waits LP in HiGHS' row-wise form;
`windows` the time-indexed MIP (pods start anywhere in their windows, deferrable runs by their
deadlines, machines up by whole slots; energy, cost or carbon); `solver` hands them to HiGHS
and says what the outcome proves (`solve`, `Bound`; `solve_windows`, `WindowsBound`);
`realise` makes a schedule of real machines from a pooled solution and splits a solution's
energy by machine (`ScheduleEnergy`). `lightsout simulate --optimum` and the benchmarks call
`solve` (benchmarks/cheap_hours.py `solve_windows`); docs/simulator.md states the models with
their assumptions.
"""

from lightsout.simulate.analysis.optimum.model import zero_wait_runs
from lightsout.simulate.analysis.optimum.realise import ScheduleEnergy
from lightsout.simulate.analysis.optimum.solver import (
    NO_BOUND,
    WITH_WAITS,
    ZERO_WAIT,
    Bound,
    SolverMissingError,
    WindowsBound,
    solve,
    solve_windows,
)

__all__ = [
    "NO_BOUND",
    "WITH_WAITS",
    "ZERO_WAIT",
    "Bound",
    "ScheduleEnergy",
    "SolverMissingError",
    "WindowsBound",
    "solve",
    "solve_windows",
    "zero_wait_runs",
]
