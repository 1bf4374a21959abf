"""The Group kind (`groups.lightsout.dev`): the autoscaling policy for a set of Nodes.

Nodes join a Group by naming it in `spec.group`. The planner reads `GroupSpec` for limits and
policy; the operator writes `GroupStatus` (counts, target size, last scaling decisions) through
the status subresource; cluster-autoscaler sees each Group as one node group.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
)

from lightsout.models import windows as window_times
from lightsout.models.base import ApiModel, Rule, default_empty
from lightsout.models.battery import BatteryPolicy, BatteryStatus
from lightsout.models.common import Conditions, Currency, Energy, Taints
from lightsout.models.drivers import SensorEntity
from lightsout.models.enums import (
    Autoscaler,
    DeferralObjective,
    DriftPolicy,
    NodeRemovalPolicy,
    SelectionPolicy,
)
from lightsout.models.homeassistant import HomeAssistantApi
from lightsout.models.types import (
    CronSchedule,
    DnsSubdomain,
    IPv4,
    IPv4Cidr,
    LabelMap,
    LongText,
    SchemaExtra,
    SecretKey,
    ShortText,
)

Seconds = Annotated[int, Field(ge=0, le=86_400)]

#: `scaleDown.unneededSeconds: auto`: wait one break-even time (see
#: `planning.autoscaler.breakeven`).
AUTO = "auto"
UNNEEDED_RULE = Rule(
    cel="type(self) == int ? self >= 0 && self <= 86400 : self == 'auto'",
    message="unneededSeconds must be 'auto' or a number of seconds from 0 to 86400",
    test=lambda value: 0 <= value <= 86_400 if isinstance(value, int) else value == AUTO,
)
UnneededSeconds = Annotated[
    int | str, SchemaExtra.of(x_kubernetes_int_or_string=True, maxLength=8), UNNEEDED_RULE
]
Concurrency = Annotated[int, Field(ge=1, le=100)]
#: `scaleDown.jobGraceSeconds` when unset: a day, longer than most batch Jobs run.
DEFAULT_JOB_GRACE_SECONDS = 86_400
#: At most a year: effectively "never evict a running Job's pod", and a deadline that stays a
#: date the planner can compute.
JobGrace = Annotated[int, Field(ge=0, le=31_536_000)]
#: `scaleDown.breakEvenMultiple` when unset: one break-even time, the ski-rental rule.
DEFAULT_BREAK_EVEN_MULTIPLE = 1.0
BreakEvenMultiple = Annotated[float, Field(ge=0, le=100)]
#: `electricity.deferralMarginSeconds` when unset: ten minutes, room for the planner's debounce,
#: the scheduler and a run a little slower than the last.
DEFAULT_DEFERRAL_MARGIN_SECONDS = 600

THRESHOLD_RANGE = Rule(
    cel="self >= 0.0 && self <= 1.0",
    message="utilizationThreshold must be between 0 and 1 (a fraction of allocatable)",
    test=lambda value: 0.0 <= value <= 1.0,
)
Fraction = Annotated[float, THRESHOLD_RANGE]


class ScaleUpPolicy(ApiModel):
    """How eagerly machines are powered on for pending pods."""

    stabilization_window_seconds: Seconds = 0
    """Pods must have been pending this long before a machine is powered on for them."""
    max_concurrent_operations: Concurrency = 2
    """Power-on operations (the power-on Jobs) in flight at once in this Group. A machine
    whose power-on succeeded and that is booting no longer counts."""


class ScaleDownPolicy(ApiModel):
    """When idle machines are drained and powered off."""

    enabled: bool = True
    """False never powers machines off for being idle."""
    unneeded_seconds: UnneededSeconds = AUTO
    """A machine must be unneeded this long before it is powered off. `auto`: one break-even
    time of the machine (its learned boot plus shutdown time, over which a power cycle costs
    what staying on idle would; until its first shutdown is timed, the shutdown is taken
    to be as long as the boot), or 600 s until the boot is learned."""
    break_even_multiple: BreakEvenMultiple = DEFAULT_BREAK_EVEN_MULTIPLE
    """With `unneededSeconds: auto`: wait this many break-even times instead of one (ignored
    for a number of seconds, and for the 600 s before the boot is learned). Above 1 a machine
    idles longer after each burst and is power-cycled less, so pods that come back within the
    longer wait find it Ready; below 1 it is powered off sooner. 1, the default, is the
    ski-rental rule: never more than twice the energy an oracle would spend on the gap.
    `lightsout simulate TRACE --sweep breakEvenMultiple` shows what each value costs in energy
    and in waiting on a trace."""
    utilization_threshold: Fraction = 0.5
    """A machine whose requested/allocatable CPU and memory are both below this fraction, and
    whose pods fit elsewhere, is unneeded."""
    stabilization_window_seconds: Seconds = 300
    """No power-off within this long after the Group last scaled up."""
    max_concurrent_operations: Concurrency = 1
    """Drains and power-offs in flight at once in this Group."""
    job_grace_seconds: JobGrace = DEFAULT_JOB_GRACE_SECONDS
    """A machine running a pod of a Job is not unneeded until that pod has run this long:
    evicting it would restart the Job's work from zero. Its unneeded time starts once the pod
    is gone or this has passed (the pod then counts as movable). 0: Job pods are movable at
    once, as cluster-autoscaler treats them. Read by the builtin autoscaler only (with
    cluster-autoscaler, annotate such pods `cluster-autoscaler.kubernetes.io/safe-to-evict:
    "false"`)."""


CORRECTION_LIMITS_NEED_CORRECT = Rule(
    cel=(
        "self.driftPolicy == 'Correct' || "
        "(!has(self.maxCorrections) && !has(self.correctionWindowSeconds))"
    ),
    message="maxCorrections and correctionWindowSeconds apply only with driftPolicy Correct",
    field_path=".maxCorrections",
    test=lambda policy: (
        policy.drift_policy is DriftPolicy.CORRECT
        or (policy.max_corrections is None and policy.correction_window_seconds is None)
    ),
)
#: Corrections of one machine within the window before it is left Failed (None in the spec).
DEFAULT_MAX_CORRECTIONS = 3
DEFAULT_CORRECTION_WINDOW_SECONDS = 86_400
DEFAULT_SCHEDULE = "0 * * * *"


class HealthCheckPolicy(ApiModel):
    """The CronJob that checks each machine's BMC and real power state."""

    cel_rules = (CORRECTION_LIMITS_NEED_CORRECT,)

    enabled: bool = True
    """False creates no health-check CronJob."""
    schedule: CronSchedule = DEFAULT_SCHEDULE
    """Cron schedule of the check (hourly by default: a dead BMC is found within the hour,
    long before the autoscaler needs the machine, without a pod per machine every few minutes)."""
    drift_policy: DriftPolicy = DriftPolicy.REPORT
    """What to do with a machine found in the wrong power state: Report (a Drifted condition
    and a Warning event only), Correct (drive it back to its desiredPowerState, at most
    maxCorrections times within correctionWindowSeconds, then Failed), or Adopt (set its
    desiredPowerState to the state it was found in: a machine a person powered on is kept)."""
    max_corrections: int | None = Field(default=None, ge=1, le=100)
    """Correct: corrections of one machine within correctionWindowSeconds before it is left
    Failed instead of fought over (default 3)."""
    correction_window_seconds: int | None = Field(default=None, ge=60, le=2_592_000)
    """Correct: the window maxCorrections counts in (default 86400, a day)."""
    parallelism: int = Field(default=8, ge=1, le=64)
    """Check pods running at once, one machine each (a pod runs Ansible for a few seconds):
    a larger fleet is checked in waves of this many, all within the Job's 900-second deadline.
    Fewer spares a small cluster's nodes; more checks a large fleet sooner."""


class GroupPlaybooks(ApiModel):
    """User playbooks for every machine of the Group."""

    config_map_name: DnsSubdomain
    """ConfigMap whose playbooks replace the shipped ones (same file names)."""


def _ipv4_number(field: str) -> str:
    """CEL for the IPv4 address in `self.<field>` as a number (CEL cannot order addresses)."""
    octets = [f"int(self.{field}.split('.')[{i}])" for i in range(4)]
    return " + ".join(f"{o} * {256 ** (3 - i)}" for i, o in enumerate(octets))


def _in_cidr(pool: AddressPool, *addresses: str) -> bool:
    net = ipaddress.IPv4Network(pool.cidr, strict=False)
    return all(ipaddress.IPv4Address(address) in net for address in addresses)


POOL_RANGE_IN_CIDR = Rule(
    cel="cidr(self.cidr).containsIP(self.start) && cidr(self.cidr).containsIP(self.end)",
    message="start and end must lie in cidr",
    field_path=".start",
    test=lambda pool: _in_cidr(pool, pool.start, pool.end),
)
POOL_RANGE_ORDER = Rule(
    cel=f"{_ipv4_number('start')} <= {_ipv4_number('end')}",
    message="start must not come after end",
    field_path=".end",
    test=lambda pool: ipaddress.IPv4Address(pool.start) <= ipaddress.IPv4Address(pool.end),
)
POOL_GATEWAY_IN_CIDR = Rule(
    cel="!has(self.gateway) || cidr(self.cidr).containsIP(self.gateway)",
    message="gateway must lie in cidr",
    field_path=".gateway",
    test=lambda pool: pool.gateway is None or _in_cidr(pool, pool.gateway),
)


class AddressPool(ApiModel):
    """Static IPv4 addresses for the clones of the Group's Ephemeral Proxmox machines that join
    by themselves (`spec.driver.proxmox.join`).

    Each provision leases the lowest free address of `start`..`end` (a coordination.k8s.io
    Lease named after the Group and the address, in the Group's namespace: creating it is the
    lock, so two provisions never get the same address) and writes it into the clone's
    cloud-init network-config; the lease is deleted when the machine is Off or Failed. With no
    free address the machine is not provisioned (reason AddressPoolExhausted). Without a pool
    clones use DHCP.
    """

    cel_rules = (POOL_RANGE_IN_CIDR, POOL_RANGE_ORDER, POOL_GATEWAY_IN_CIDR)

    cidr: IPv4Cidr
    """The clones' subnet, e.g. `192.168.50.0/24` (its prefix length is the addresses')."""
    start: IPv4
    """First address of the pool."""
    end: IPv4
    """Last address of the pool (inclusive)."""
    gateway: IPv4 | None = None
    """Default route."""
    dns_servers: list[IPv4] | None = Field(default=None, max_length=4)
    """Name servers."""


WINDOW_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
TIME_ZONE = r"^[A-Za-z][-+_/A-Za-z0-9]*$"
WINDOW_MIN_NOT_ABOVE_MAX = Rule(
    cel="!has(self.minNodes) || !has(self.maxNodes) || self.minNodes <= self.maxNodes",
    message="a window's minNodes must be less than or equal to its maxNodes",
    field_path=".minNodes",
    test=lambda w: w.min_nodes is None or w.max_nodes is None or w.min_nodes <= w.max_nodes,
)
WINDOW_SETS_SOMETHING = Rule(
    cel="has(self.minNodes) || has(self.maxNodes) || (has(self.quiet) && self.quiet)",
    message="a window sets minNodes, maxNodes, quiet or several of them",
    test=lambda w: w.min_nodes is not None or w.max_nodes is not None or w.quiet,
)
WINDOW_ONE_FORM = Rule(
    cel=(
        "has(self.schedule) ? has(self.durationSeconds) && !has(self.days) && !has(self.from)"
        " && !has(self.to) : has(self.days) && has(self.from) && has(self.to)"
        " && !has(self.durationSeconds)"
    ),
    message="a window is either schedule + durationSeconds or days + from + to",
    test=lambda w: (
        all(part is None for part in (w.days, w.from_, w.to)) and w.duration_seconds is not None
        if w.schedule is not None
        else all(part is not None for part in (w.days, w.from_, w.to))
        and w.duration_seconds is None
    ),
)
WINDOW_FROM_NOT_TO = Rule(
    cel="!has(self.from) || !has(self.to) || self.from != self.to",
    message="from and to must differ (to before from runs past midnight)",
    field_path=".to",
    test=lambda w: w.from_ is None or w.from_ != w.to,
)
WINDOW_STRICT_NEEDS_QUIET = Rule(
    cel="!has(self.strict) || !self.strict || (has(self.quiet) && self.quiet)",
    message="strict applies only to a quiet window",
    field_path=".strict",
    test=lambda w: not w.strict or w.quiet,
)


CLOCK = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
#: Weekdays as cron numbers them (Sunday 0), for the days + from/to form.
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
Clock = Annotated[str, StringConstraints(min_length=5, max_length=5, pattern=CLOCK)]
"""A time of day, `HH:MM` (24 h)."""
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
EVERY_DAY: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _minutes(clock: str) -> int:
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


def _cron_field(value: str) -> str:
    """One cron field's regular expression: a comma-separated list of `*`, `?`, `V` or `V-V`,
    each with an optional `/step`, where `V` is a number in the field's range (with Go's
    optional `+` and leading zeros, as `strconv.Atoi` reads it) or one of its names."""
    item = rf"(\*|\?|{value}(-{value})?)(/\+?0*[1-9][0-9]*)?"
    return f"{item}(,{item})*"


def _cron_number(pattern: str) -> str:
    return rf"\+?0*({pattern})"


#: A window's schedule with every field in its range, so that the API server refuses
#: `0 25 * * *` (the five-field shape alone lets it through). What a regular expression cannot
#: see, an inverted range (`22-6`), is refused by the model and by the Group webhook.
WINDOW_CRON_PATTERN = (
    r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|"
    + r"\s+".join(
        _cron_field(value)
        for value in (
            _cron_number(r"[1-5]?[0-9]"),
            _cron_number(r"1?[0-9]|2[0-3]"),
            _cron_number(r"[1-9]|[12][0-9]|3[01]"),
            f"({_cron_number(r'[1-9]|1[0-2]')}|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))",
            f"({_cron_number('[0-6]')}|(?i:sun|mon|tue|wed|thu|fri|sat))",
        )
    )
    + r")$"
)
WINDOW_CRON_RULE = Rule(
    cel=f"self.matches(r'{WINDOW_CRON_PATTERN}')",
    message=(
        "must be a cron schedule whose fields are in range: minute 0-59, hour 0-23, day of "
        "month 1-31, month 1-12 or jan-dec, day of week 0-6 or sun-sat"
    ),
    test=re.compile(WINDOW_CRON_PATTERN).fullmatch,
)


def _schedule_parses(value: str) -> str:
    """The schedule as the API server checks a CronJob's (`ParseStandard`), in UTC: the zone
    changes when a schedule fires, never whether it parses."""
    try:
        window_times.parsed(value, "UTC")
    except ValueError as error:
        raise ValueError(f"schedule {value!r} is not a valid cron schedule: {error}") from error
    return value


def _zone_exists(value: str) -> str:
    window_times.zone(value)
    return value


WindowSchedule = Annotated[CronSchedule, WINDOW_CRON_RULE, AfterValidator(_schedule_parses)]
TimeZone = Annotated[
    str,
    StringConstraints(min_length=1, max_length=64, pattern=TIME_ZONE),
    AfterValidator(_zone_exists),
]


class ScheduleWindow(ApiModel):
    """A recurring window: from each run of `schedule` (in `timeZone`) for `durationSeconds`,
    or on each of `days` from `from` to `to`, the Group's limits are these.

    A floor's machines are powered on one boot of the slowest of them (learned, plus a margin)
    before the window opens, so they are Ready at its start; once it closes they are unneeded
    like any other and power off on their usual timers. Windows of one Group must never be open
    at once."""

    cel_rules = (
        WINDOW_MIN_NOT_ABOVE_MAX,
        WINDOW_SETS_SOMETHING,
        WINDOW_STRICT_NEEDS_QUIET,
        WINDOW_ONE_FORM,
        WINDOW_FROM_NOT_TO,
    )

    name: Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=WINDOW_NAME)]
    """Names the window in plans, events and status (`evening`)."""
    schedule: WindowSchedule | None = None
    """When it opens: a five-field cron schedule, read as a CronJob's (`0 18 * * *`); with
    durationSeconds. Or use days, from and to."""
    duration_seconds: int | None = Field(default=None, ge=60, le=604_800)
    """How long it stays open after each opening of `schedule` (at most a week)."""
    days: list[Weekday] | None = Field(
        default=None,
        min_length=1,
        max_length=7,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    """The days it opens on (`[mon, tue, wed, thu, fri]`), with from and to: the same window
    as the schedule `MM HH * * mon,tue,...` for the time between from and to."""
    from_: Clock | None = Field(default=None, alias="from")
    """When it opens on each of `days`, `HH:MM` in timeZone (`18:00`)."""
    to: Clock | None = None
    """When it closes, `HH:MM`; earlier than from runs past midnight into the next day
    (`22:00` to `07:00`: a night that belongs to the day it starts on)."""
    time_zone: TimeZone = "UTC"
    """IANA time zone the schedule is read in (`Europe/Berlin`); daylight saving is followed
    as the CronJob controller follows it."""
    min_nodes: int | None = Field(default=None, ge=0, le=1000)
    """The Group's minNodes while the window is open (its machines Ready at the opening)."""
    max_nodes: int | None = Field(default=None, ge=0, le=1000)
    """The Group's maxNodes while the window is open."""
    quiet: bool = False
    """While open, none of the Group's machines is powered on for a pending pod when another
    Group's machine could be powered on now for the pod: autoscaled, not Failed, not pinned, its
    Group below its maximum (maxNodes, scaleUp.maxConcurrentOperations) and not itself quiet,
    the pod allowed on it and fitting it. Otherwise the pod still wakes one of this Group's,
    unless `strict`. A floor still applies."""
    strict: bool = False
    """With quiet: no power-on for pending pods at all while open, even for a pod no other
    Group's machine could be powered on for (it waits for the window to close)."""

    def times(self) -> window_times.WindowTimes:
        """Its openings as a cron schedule and a length, whichever form it is written in."""
        if self.schedule is not None and self.duration_seconds is not None:
            return window_times.WindowTimes(
                self.name, self.schedule, self.time_zone, self.duration_seconds
            )
        opens, closes = _minutes(self.from_ or "00:00"), _minutes(self.to or "00:00")
        days = ",".join(day for day in WEEKDAYS if day in (self.days or ()))
        schedule = f"{opens % 60} {opens // 60} * * {days}"
        # Wall-clock minutes: across a daylight-saving change the window is an hour longer or
        # shorter in real time that night, as a CronJob-opened window of this length would not be.
        return window_times.WindowTimes(
            self.name, schedule, self.time_zone, (closes - opens) % 1440 * 60
        )


class TariffRate(ApiModel):
    """One rate of a time-of-use tariff: its price on `days` from `from` to `to`."""

    days: list[Weekday] = Field(
        default_factory=lambda: list(EVERY_DAY),
        min_length=1,
        max_length=7,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    """The days it applies on (`[mon, tue, wed, thu, fri]`; default every day)."""
    from_: Clock = Field(default="00:00", alias="from")
    """When it starts on each of `days`, `HH:MM` in the tariff's timeZone (`07:00`)."""
    to: Clock = "00:00"
    """When it ends, `HH:MM`; earlier than from runs past midnight into the next day
    (`22:00` to `06:00`: a night rate that belongs to the day it starts on), and equal to from
    lasts a whole day (the default, `00:00` to `00:00`: `days: [sat, sun]` is the weekend)."""
    price_per_kwh: float = Field(ge=0, le=1000, alias="pricePerKWh")
    """Price of one kWh while it applies."""


#: The label a ConfigMap holding a series carries: the operator caches the contents of those
#: ConfigMaps only (no other ConfigMap's data).
SERIES_LABEL = "lightsout.dev/series"


class ConfigMapKeyRef(ApiModel):
    """One key of a ConfigMap in the Group's namespace."""

    name: DnsSubdomain
    """Name of the ConfigMap; it must carry the label `lightsout.dev/series` (any value)."""
    key: SecretKey
    """Key within the ConfigMap."""


#: The name, `lightsout-prices-<group>`, and key of the ConfigMap the operator writes a
#: Home Assistant price sensor's prices into (`prices_config_map`).
PRICES_PREFIX = "lightsout-prices-"
PRICES_KEY = "prices.csv"
#: An object name's limit (a DNS-1123 subdomain).
NAME_MAX = 253
#: How often a price sensor is read when `pollSeconds` is not set: day-ahead prices change once
#: a day, and tomorrow's are found within a quarter of an hour of their publication.
DEFAULT_PRICE_POLL_SECONDS = 900


class HomeAssistantPrices(HomeAssistantApi):
    """A Home Assistant sensor whose attributes carry today's and tomorrow's prices by interval:
    the Nord Pool integration's `raw_today` and `raw_tomorrow` (lists of `{start, end, value}`),
    or lists `today` and `tomorrow` of `{startsAt, total}` (Tibber's shape; `start`/`value`
    read too). The operator reads it at start and every `pollSeconds` and writes its prices,
    per kWh, into a ConfigMap it owns in the Group's namespace, `lightsout-prices-<group>` (key
    `prices.csv`, labelled `lightsout.dev/series`, owned by the Group), which the Group's series
    is read from like any other. A read that fails leaves that ConfigMap as it was (its prices
    hold until they end) and says why in a `PriceSensorUnreadable` event on the Group."""

    entity: SensorEntity
    """The price sensor, e.g. `sensor.nordpool_kwh_de_eur_3_10_0`. Its `unit_of_measurement`
    says what a value is: `<currency>/kWh` is taken as it is, `<currency>/MWh` divided by 1000;
    any other unit is refused. A price is not converted: the currency must be the Group's
    `currency` (a sensor in cents, `c/kWh`, is refused too)."""
    poll_seconds: int = Field(default=DEFAULT_PRICE_POLL_SECONDS, ge=10, le=86_400)
    """How often the sensor is read (and at once when the operator starts or this block
    changes); after a failed read, every minute at most until it reads again."""


def prices_config_map(group: str) -> str:
    """The name of the ConfigMap holding the prices the operator read for Group `group` from
    its Home Assistant sensor: `lightsout-prices-<group>`; a name too long for that keeps its
    first part and ends in a hash of the whole, so two Groups never share one."""
    name = PRICES_PREFIX + group
    if len(name) <= NAME_MAX:
        return name
    digest = hashlib.sha256(group.encode()).hexdigest()[:8]
    head = name[: NAME_MAX - len(digest) - 1].rstrip("-.")
    return f"{head}-{digest}"


ONE_PRICE_SOURCE = Rule(
    cel="has(self.configMapKeyRef) != has(self.homeAssistant)",
    message="exactly one of configMapKeyRef or homeAssistant must be set",
    test=lambda series: (series.config_map_key_ref is None) != (series.home_assistant is None),
)
UNIT_FROM_THE_SENSOR = Rule(
    cel="!has(self.homeAssistant) || !has(self.unit) || self.unit == 'PerKWh'",
    message=(
        "unit applies to configMapKeyRef only: a Home Assistant sensor's unit_of_measurement "
        "says what its prices are"
    ),
    field_path=".unit",
    test=lambda series: series.home_assistant is None or series.unit == "PerKWh",
)


class PriceSeries(ApiModel):
    """Prices by interval (a day-ahead tariff: hourly or quarter-hourly), from exactly one of:
    a ConfigMap key holding one `start,value` line per interval (`2024-03-11T00:00:00Z,87.5`;
    an optional header line and `#` comments), or a Home Assistant price sensor. Each interval
    lasts until the next starts, the last as long as the one before it. Outside the series
    (before its first interval, after its last) the tariff above applies, and deferrable Jobs
    are not held for hours it does not cover."""

    cel_rules = (ONE_PRICE_SOURCE, UNIT_FROM_THE_SENSOR)

    config_map_key_ref: ConfigMapKeyRef | None = None
    """Where the series is: a ConfigMap key you keep up to date."""
    home_assistant: HomeAssistantPrices | None = None
    """Instead of configMapKeyRef: a Home Assistant price sensor the operator reads and keeps
    the series of (docs/cheap-hours.md)."""
    unit: Literal["PerKWh", "PerMWh"] = "PerKWh"
    """What a value of configMapKeyRef's series is: the price of a kWh, or of a MWh as
    day-ahead markets publish it (a Home Assistant sensor's unit says it for its prices)."""
    markup_per_kwh: float = Field(default=0.0, ge=0, le=1000, alias="markupPerKWh")
    """Added to every interval's price per kWh: grid fees, taxes and the supplier's margin on
    top of a day-ahead price."""


class CarbonSeries(ApiModel):
    """Grid carbon intensity by interval, gCO2eq per kWh, in the same `start,value` form as
    `series`."""

    config_map_key_ref: ConfigMapKeyRef
    """Where the series is."""


#: How often a solar surplus sensor is read when `pollSeconds` is not set.
DEFAULT_SURPLUS_POLL_SECONDS = 60
#: A surplus reading counts for this many poll periods after it was read; older, the Group
#: has no surplus (its machines pay the price in force).
SURPLUS_FRESH_POLLS = 3


class HomeAssistantSurplus(HomeAssistantApi):
    """A Home Assistant sensor whose state is the solar power left over for the Group's
    machines, in W or kW (its `unit_of_measurement`; any other unit is refused). The operator's
    leader reads it at start and every `pollSeconds` into the Group's `status.solarSurplus`;
    a reading counts for three poll periods, then the Group has no surplus until the next."""

    entity: SensorEntity
    """The surplus sensor, e.g. `sensor.solar_surplus`: the solar power the rest of the house
    does not use, these machines' draw not taken out (not the grid export, which has it taken
    out already). A negative state reads as no surplus."""
    poll_seconds: int = Field(default=DEFAULT_SURPLUS_POLL_SECONDS, ge=10, le=3_600)
    """How often the sensor is read (and at once when the operator starts or this block
    changes)."""


ONE_SURPLUS_SOURCE = Rule(
    cel="has(self.configMapKeyRef) != has(self.homeAssistant)",
    message="exactly one of configMapKeyRef or homeAssistant must be set",
    test=lambda surplus: (surplus.config_map_key_ref is None) != (surplus.home_assistant is None),
)


class SolarSurplus(ApiModel):
    """Solar power left over for the Group's machines, which makes their draw free up to its
    level: from a Home Assistant sensor read live, or (for `lightsout simulate` and a record of
    your own) a ConfigMap key of `start,watts` lines in `series`' form. The Group pays for the
    part of its machines' draw above the surplus, shared among them by their draw; a surplus
    has no forecast: a deferrable Job sees it in the current price interval only
    (docs/cheap-hours.md)."""

    cel_rules = (ONE_SURPLUS_SOURCE,)

    home_assistant: HomeAssistantSurplus | None = None
    """A Home Assistant sensor of the surplus in W or kW, read by the operator."""
    config_map_key_ref: ConfigMapKeyRef | None = None
    """Instead of homeAssistant: the surplus in W by interval, in a ConfigMap key labelled
    `lightsout.dev/series` (a recorded day replayed by `lightsout simulate`)."""


class SolarSurplusStatus(ApiModel):
    """The Group's solar surplus sensor as last read."""

    entity: ShortText | None = None
    """The sensor read (`<entity>@host:port`)."""
    watts: float | None = Field(default=None, ge=0)
    """The surplus in W at the last good read (unset while the sensor is unreadable)."""
    read_at: datetime | None = None
    """When it was read; three poll periods later it counts no more."""
    error: ShortText | None = None
    """Why the last read failed (unset after a good one)."""


OBJECTIVE_NEEDS_CARBON = Rule(
    cel="!has(self.objective) || self.objective != 'Carbon' || has(self.carbon)",
    message="objective Carbon needs carbon, a series of grid carbon intensity",
    field_path=".objective",
    test=lambda e: e.objective is not DeferralObjective.CARBON or e.carbon is not None,
)


class Electricity(ApiModel):
    """Electricity price, to report the cost of energy used and saved: one price, or a
    time-of-use tariff (rates by weekday and time of day over that base price), or prices by
    interval from a ConfigMap or a Home Assistant sensor; and what deferrable Jobs wait for
    (docs/cheap-hours.md)."""

    cel_rules = (OBJECTIVE_NEEDS_CARBON,)

    price_per_kwh: float = Field(ge=0, le=1000, alias="pricePerKWh")
    """Price of one kWh; with rates, the price when none of them applies."""
    currency: Currency = "EUR"
    """ISO 4217 currency code."""
    rates: list[TariffRate] | None = Field(default=None, max_length=64)
    """A time-of-use tariff: the first rate that applies at a moment sets its price (so list
    a holiday or weekend rate before a weekday one it overlaps). Energy is counted at the price
    in force each moment: status, metrics and `lightsout status` change price when the tariff
    does."""
    time_zone: TimeZone = "UTC"
    """IANA time zone the rates' days and times are read in (`Europe/Berlin`); daylight saving
    is followed (a rate from 02:00 on the night the clocks skip that hour starts at 03:00)."""
    series: PriceSeries | None = None
    """Prices by interval from a ConfigMap or a Home Assistant sensor (day-ahead prices):
    where it has a price it wins over `rates` and `pricePerKWh`. Missing or unreadable, the
    Group says so in its `PriceSeriesReady` condition, energy is priced by the tariff, and
    deferrable Jobs run at once."""
    carbon: CarbonSeries | None = None
    """Grid carbon intensity by interval from a ConfigMap, for `objective: Carbon`."""
    solar_surplus: SolarSurplus | None = None
    """A solar surplus sensor (W): the Group's draw is free up to its level while it is read,
    priced as usual once its reading is stale or unreadable (`SolarSurplusReady` condition)."""
    objective: DeferralObjective = DeferralObjective.COST
    """What a deferrable Job's start minimises: its electricity's cost, or its emissions (by
    `carbon`)."""
    deferral_margin_seconds: Seconds = DEFAULT_DEFERRAL_MARGIN_SECONDS
    """How long before its deadline a deferrable Job is to finish at the latest: its latest
    start is the deadline less this margin, its machine's boot and its run time, so a larger
    margin gives up late cheap hours for room against a slow boot or a run longer than the last.
    A Job whose machines are in several Groups takes the largest of their margins."""


MIN_NOT_ABOVE_MAX = Rule(
    # has(): the CRD's `spec: {}` default is checked before the fields' own defaults exist.
    cel="!has(self.minNodes) || !has(self.maxNodes) || self.minNodes <= self.maxNodes",
    message="minNodes must be less than or equal to maxNodes",
    field_path=".minNodes",
    test=lambda spec: spec.min_nodes <= spec.max_nodes,
)


class GroupSpec(ApiModel):
    """Limits and policy for the Group's machines."""

    cel_rules = (MIN_NOT_ABOVE_MAX,)

    min_nodes: int = Field(default=0, ge=0, le=1000)
    """Machines kept powered on at least."""
    max_nodes: int = Field(default=10, ge=0, le=1000)
    """Machines powered on at most."""
    autoscaler: Autoscaler = Autoscaler.BUILTIN
    """Who sizes the Group: the built-in planner, cluster-autoscaler (externalgrpc), or none."""
    dry_run: bool = False
    """Decide and explain, but change no desiredPowerState."""
    scale_up: ScaleUpPolicy = default_empty(ScaleUpPolicy)
    """Scale-up policy."""
    scale_down: ScaleDownPolicy = default_empty(ScaleDownPolicy)
    """Scale-down policy."""
    selection_policy: SelectionPolicy = SelectionPolicy.LOWEST_ENERGY
    """How to choose among machines that would all fit the pending pods."""
    labels: LabelMap | None = None
    """Labels applied to every machine's core Node, under the Node's own labels."""
    taints: Taints | None = None
    """Taints applied to every machine's core Node, with the Node's own taints."""
    node_removal_policy: NodeRemovalPolicy = NodeRemovalPolicy.DELETE
    """Delete or keep its machines' core Nodes after power-off (a Node's own setting wins).
    Delete: the next power-on creates the Node afresh, tainted; Keep: it stays, NotReady,
    and gets the startup taint again before the next power-on."""
    health_check: HealthCheckPolicy = default_empty(HealthCheckPolicy)
    """Periodic health check."""
    electricity: Electricity | None = None
    """Electricity price for cost figures."""
    playbooks: GroupPlaybooks | None = None
    """Playbook overrides for all machines."""
    address_pool: AddressPool | None = None
    """Static addresses for clones that join by themselves (else they use DHCP)."""
    battery: BatteryPolicy | None = None
    """The UPS feeding the machines, and what they do when it runs on battery."""
    windows: list[ScheduleWindow] | None = Field(
        default=None,
        max_length=16,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
        },
    )
    """Recurring windows that change minNodes/maxNodes while open (e.g. a warm evening: one
    machine Ready from 18:00 to 23:00). No two may be open at once; the Group's own limits
    apply outside them. The API server checks each schedule's fields; the operator's Group
    webhook refuses a schedule that does not parse as a CronJob's and windows that overlap
    (over the next 400 days); without the webhook the operator reads such a Group with its
    windows ignored, saying so in the plan."""

    @field_validator("windows")
    @classmethod
    def _no_overlap(cls, value: list[ScheduleWindow] | None) -> list[ScheduleWindow] | None:
        names = [window.name for window in value or ()]
        if len(set(names)) != len(names):
            raise ValueError(f"window names must be unique: {', '.join(names)}")
        why = window_times.overlap(tuple(window.times() for window in value or ()))
        if why is not None:
            raise ValueError(why)
        return value


Count = Annotated[int, Field(ge=0)]


class NodeCounts(ApiModel):
    """Machines of the Group by power situation."""

    total: Count = 0
    """All machines of the Group."""
    on: Count = 0
    """Ready machines."""
    off: Count = 0
    """Powered-off machines."""
    transitioning: Count = 0
    """Machines powering on, booting, draining or powering off."""
    failed: Count = 0
    """Failed machines."""


class ScaleEvent(ApiModel):
    """A scaling decision."""

    time: datetime
    """When it was decided."""
    reason: LongText
    """Why, in words (which pods, which policy)."""
    nodes: list[DnsSubdomain] = Field(
        default_factory=list, max_length=1000, json_schema_extra={"x-kubernetes-list-type": "set"}
    )
    """Machines (Node names) it powered on or off."""


class GroupStatus(ApiModel):
    """What the operator observed and decided. Written through the status subresource only."""

    nodes: NodeCounts | None = None
    """Machine counts."""
    target_size: int | None = Field(default=None, ge=0)
    """Machines that should be on, as last decided by the autoscaler."""
    conditions: Conditions | None = None
    """Ready, ScalingLimited."""
    last_scale_up: ScaleEvent | None = None
    """The last power-on decision."""
    last_scale_down: ScaleEvent | None = None
    """The last power-off decision."""
    observed_generation: int | None = Field(default=None, ge=0)
    """metadata.generation this status was computed from."""
    message: ShortText | None = None
    """Human-readable summary of the Group's state."""
    energy: Energy | None = None
    """Energy accounting: the sum of its machines' (counted when they are recounted)."""
    battery: BatteryStatus | None = None
    """The UPS of spec.battery as last read, and the outage in progress."""
    solar_surplus: SolarSurplusStatus | None = None
    """The solar surplus sensor of spec.electricity.solarSurplus as last read."""


class Group(ApiModel):
    """A set of machines (Nodes naming this Group) sized together by one autoscaling policy."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["lightsout.dev/v1alpha1"] = "lightsout.dev/v1alpha1"
    kind: Literal["Group"] = "Group"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: GroupSpec = Field(default_factory=GroupSpec)
    status: GroupStatus | None = None
