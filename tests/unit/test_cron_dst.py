"""CronJob runs on daylight-saving nights, as kube-controller-manager creates them.

The CronJob controller takes each run from github.com/robfig/cron/v3 `SpecSchedule.Next`
(the controller-manager of the lab, Kubernetes v1.34.9, is built with robfig/cron v3.0.1), on
`ParseStandard("CRON_TZ=<spec.timeZone> <spec.schedule>")`. `RECORDED` was recorded from that
library: a throwaway Go program (Go 1.26.8, robfig/cron v3.0.1, this machine's tzdata 2025b)
parsed each schedule so and printed `Next(after)`, then `Next` of that, and so on, in UTC. Each
row: time zone ("" for none, i.e. the controller's own zone, UTC here), schedule, the instant
to start after, and the runs `Next` gave ("never": no run within five years). The Go program's
source is in the issue 32 report (branch s11-dst); it is not kept here.

What the rows show: on a spring-forward night a run at a local time that does not exist is
skipped (croniter, which Lights-Out used before, moved it to 03:00); on a fall-back night a
run in the repeated hour happens twice, an hour apart. `tests/e2e/test_cron_dst.py` checks the
same against the lab's real controller-manager on a made-up zone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lightsout.state import cron

RECORDED: list[tuple[str, str, str, tuple[str, ...]]] = [
    # New York, spring forward on 8 March 2026: 02:00 EST -> 03:00 EDT (07:00Z)
    (
        "America/New_York",
        "0 2 * * *",
        "2026-03-08T05:00:00Z",
        (
            "2026-03-09T06:00:00Z",
            "2026-03-10T06:00:00Z",
            "2026-03-11T06:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "30 2 * * *",
        "2026-03-08T05:00:00Z",
        (
            "2026-03-09T06:30:00Z",
            "2026-03-10T06:30:00Z",
            "2026-03-11T06:30:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 1 * * *",
        "2026-03-08T05:00:00Z",
        (
            "2026-03-08T06:00:00Z",
            "2026-03-09T05:00:00Z",
            "2026-03-10T05:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 3 * * *",
        "2026-03-08T05:00:00Z",
        (
            "2026-03-08T07:00:00Z",
            "2026-03-09T07:00:00Z",
            "2026-03-10T07:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 1-3 * * *",
        "2026-03-08T05:00:00Z",
        (
            "2026-03-08T06:00:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-09T05:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 */2 * * *",
        "2026-03-08T05:00:00Z",
        (
            "2026-03-08T08:00:00Z",
            "2026-03-08T10:00:00Z",
            "2026-03-08T12:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 2 * * 0",
        "2026-03-08T05:00:00Z",
        (
            "2026-03-15T06:00:00Z",
            "2026-03-22T06:00:00Z",
            "2026-03-29T06:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 2 8 3 *",
        "2026-03-08T05:00:00Z",
        (
            "2027-03-08T07:00:00Z",
            "2028-03-08T07:00:00Z",
            "2029-03-08T07:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "@daily",
        "2026-03-08T05:00:00Z",
        (
            "2026-03-09T04:00:00Z",
            "2026-03-10T04:00:00Z",
            "2026-03-11T04:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "*/15 * * * *",
        "2026-03-08T06:30:00Z",
        (
            "2026-03-08T06:45:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T07:15:00Z",
            "2026-03-08T07:30:00Z",
        ),
    ),
    (
        "America/New_York",
        "@hourly",
        "2026-03-08T06:30:00Z",
        (
            "2026-03-08T07:00:00Z",
            "2026-03-08T08:00:00Z",
            "2026-03-08T09:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "15 1-4/2 * * *",
        "2026-03-08T06:30:00Z",
        (
            "2026-03-08T07:15:00Z",
            "2026-03-09T05:15:00Z",
            "2026-03-09T07:15:00Z",
        ),
    ),
    # New York, fall back on 1 November 2026: 02:00 EDT -> 01:00 EST (06:00Z)
    (
        "America/New_York",
        "0 1 * * *",
        "2026-11-01T04:00:00Z",
        (
            "2026-11-01T05:00:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-02T06:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "30 1 * * *",
        "2026-11-01T04:00:00Z",
        (
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-02T06:30:00Z",
        ),
    ),
    (
        "America/New_York",
        "59 1 * * *",
        "2026-11-01T04:00:00Z",
        (
            "2026-11-01T05:59:00Z",
            "2026-11-01T06:59:00Z",
            "2026-11-02T06:59:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 2 * * *",
        "2026-11-01T04:00:00Z",
        (
            "2026-11-01T07:00:00Z",
            "2026-11-02T07:00:00Z",
            "2026-11-03T07:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 0-3 * * *",
        "2026-11-01T04:00:00Z",
        (
            "2026-11-01T05:00:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T07:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 */2 * * *",
        "2026-11-01T04:00:00Z",
        (
            "2026-11-01T07:00:00Z",
            "2026-11-01T09:00:00Z",
            "2026-11-01T11:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "30 1 1 11 *",
        "2026-11-01T04:00:00Z",
        (
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:30:00Z",
            "2027-11-01T05:30:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 1 * * 0",
        "2026-11-01T04:00:00Z",
        (
            "2026-11-01T05:00:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-08T06:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "*/15 * * * *",
        "2026-11-01T05:30:00Z",
        (
            "2026-11-01T05:45:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:15:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-01T06:45:00Z",
            "2026-11-01T07:00:00Z",
            "2026-11-01T07:15:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 1 * * *",
        "2026-11-01T05:30:00Z",
        (
            "2026-11-01T06:00:00Z",
            "2026-11-02T06:00:00Z",
            "2026-11-03T06:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 2 * * *",
        "2026-11-01T05:30:00Z",
        (
            "2026-11-01T07:00:00Z",
            "2026-11-02T07:00:00Z",
            "2026-11-03T07:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 1 * * *",
        "2026-11-01T06:30:00Z",
        (
            "2026-11-02T06:00:00Z",
            "2026-11-03T06:00:00Z",
            "2026-11-04T06:00:00Z",
        ),
    ),
    (
        "America/New_York",
        "45 1 * * *",
        "2026-11-01T06:30:00Z",
        (
            "2026-11-01T06:45:00Z",
            "2026-11-02T06:45:00Z",
            "2026-11-03T06:45:00Z",
        ),
    ),
    # Berlin, spring forward on 29 March 2026: 02:00 CET -> 03:00 CEST (01:00Z)
    (
        "Europe/Berlin",
        "0 2 * * *",
        "2026-03-28T23:00:00Z",
        (
            "2026-03-30T00:00:00Z",
            "2026-03-31T00:00:00Z",
            "2026-04-01T00:00:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "30 2 * * *",
        "2026-03-28T23:00:00Z",
        (
            "2026-03-30T00:30:00Z",
            "2026-03-31T00:30:00Z",
            "2026-04-01T00:30:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "0 3 * * *",
        "2026-03-28T23:00:00Z",
        (
            "2026-03-29T01:00:00Z",
            "2026-03-30T01:00:00Z",
            "2026-03-31T01:00:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "0 1-4 * * *",
        "2026-03-28T23:00:00Z",
        (
            "2026-03-29T00:00:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T02:00:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "0 */2 * * *",
        "2026-03-28T23:00:00Z",
        (
            "2026-03-29T02:00:00Z",
            "2026-03-29T04:00:00Z",
            "2026-03-29T06:00:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "*/15 * * * *",
        "2026-03-29T00:30:00Z",
        (
            "2026-03-29T00:45:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:15:00Z",
            "2026-03-29T01:30:00Z",
        ),
    ),
    # Berlin, fall back on 25 October 2026: 03:00 CEST -> 02:00 CET (01:00Z)
    (
        "Europe/Berlin",
        "0 2 * * *",
        "2026-10-24T22:00:00Z",
        (
            "2026-10-25T00:00:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-26T01:00:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "30 2 * * *",
        "2026-10-24T22:00:00Z",
        (
            "2026-10-25T00:30:00Z",
            "2026-10-25T01:30:00Z",
            "2026-10-26T01:30:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "0 3 * * *",
        "2026-10-24T22:00:00Z",
        (
            "2026-10-25T02:00:00Z",
            "2026-10-26T02:00:00Z",
            "2026-10-27T02:00:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "0 1-3 * * *",
        "2026-10-24T22:00:00Z",
        (
            "2026-10-24T23:00:00Z",
            "2026-10-25T00:00:00Z",
            "2026-10-25T01:00:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "0 */2 * * *",
        "2026-10-24T22:00:00Z",
        (
            "2026-10-25T00:00:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-25T03:00:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "*/20 * * * *",
        "2026-10-25T00:30:00Z",
        (
            "2026-10-25T00:40:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-25T01:20:00Z",
            "2026-10-25T01:40:00Z",
            "2026-10-25T02:00:00Z",
            "2026-10-25T02:20:00Z",
            "2026-10-25T02:40:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "0 3 * * *",
        "2026-10-25T01:30:00Z",
        (
            "2026-10-25T02:00:00Z",
            "2026-10-26T02:00:00Z",
            "2026-10-27T02:00:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "45 2 * * *",
        "2026-10-25T01:30:00Z",
        (
            "2026-10-25T01:45:00Z",
            "2026-10-26T01:45:00Z",
            "2026-10-27T01:45:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "0 2 * * *",
        "2026-10-25T01:30:00Z",
        (
            "2026-10-26T01:00:00Z",
            "2026-10-27T01:00:00Z",
            "2026-10-28T01:00:00Z",
        ),
    ),
    # Havana: midnight does not exist on 8 March 2026 (00:00 CST -> 01:00 CDT, 05:00Z)
    (
        "America/Havana",
        "0 0 * * *",
        "2026-03-07T17:00:00Z",
        (
            "2026-03-09T04:00:00Z",
            "2026-03-10T04:00:00Z",
            "2026-03-11T04:00:00Z",
        ),
    ),
    (
        "America/Havana",
        "30 0 * * *",
        "2026-03-07T17:00:00Z",
        (
            "2026-03-09T04:30:00Z",
            "2026-03-10T04:30:00Z",
            "2026-03-11T04:30:00Z",
        ),
    ),
    (
        "America/Havana",
        "0 1 * * *",
        "2026-03-07T17:00:00Z",
        (
            "2026-03-08T05:00:00Z",
            "2026-03-09T05:00:00Z",
            "2026-03-10T05:00:00Z",
        ),
    ),
    (
        "America/Havana",
        "0 12 * * 0",
        "2026-03-07T17:00:00Z",
        (
            "2026-03-08T16:00:00Z",
            "2026-03-15T16:00:00Z",
            "2026-03-22T16:00:00Z",
        ),
    ),
    (
        "America/Havana",
        "0 0 8 3 *",
        "2026-03-07T17:00:00Z",
        (
            "2027-03-08T05:00:00Z",
            "2028-03-08T05:00:00Z",
            "2029-03-08T05:00:00Z",
        ),
    ),
    # Santiago: midnight skipped on 6 September 2026 (04:00Z); 23:00-24:00 twice on 4 April (03:00Z)
    (
        "America/Santiago",
        "0 0 * * *",
        "2026-09-05T16:00:00Z",
        (
            "2026-09-07T03:00:00Z",
            "2026-09-08T03:00:00Z",
            "2026-09-09T03:00:00Z",
        ),
    ),
    (
        "America/Santiago",
        "0 12 * * 0",
        "2026-09-05T16:00:00Z",
        (
            "2026-09-06T15:00:00Z",
            "2026-09-13T15:00:00Z",
            "2026-09-20T15:00:00Z",
        ),
    ),
    (
        "America/Santiago",
        "30 23 * * *",
        "2026-09-05T16:00:00Z",
        (
            "2026-09-06T03:30:00Z",
            "2026-09-07T02:30:00Z",
            "2026-09-08T02:30:00Z",
        ),
    ),
    (
        "America/Santiago",
        "30 23 * * *",
        "2026-04-04T16:00:00Z",
        (
            "2026-04-05T02:30:00Z",
            "2026-04-05T03:30:00Z",
            "2026-04-06T03:30:00Z",
        ),
    ),
    (
        "America/Santiago",
        "0 0 * * *",
        "2026-04-04T16:00:00Z",
        (
            "2026-04-05T04:00:00Z",
            "2026-04-06T04:00:00Z",
            "2026-04-07T04:00:00Z",
        ),
    ),
    (
        "America/Santiago",
        "0 12 * * 0",
        "2026-04-04T16:00:00Z",
        (
            "2026-04-05T16:00:00Z",
            "2026-04-12T16:00:00Z",
            "2026-04-19T16:00:00Z",
        ),
    ),
    # Lord Howe: half-hour shifts (4 October 2026 02:00 -> 02:30; 5 April 2026 02:00 -> 01:30)
    (
        "Australia/Lord_Howe",
        "0 2 * * *",
        "2026-10-03T13:30:00Z",
        (
            "2026-10-04T15:00:00Z",
            "2026-10-05T15:00:00Z",
            "2026-10-06T15:00:00Z",
        ),
    ),
    (
        "Australia/Lord_Howe",
        "15 2 * * *",
        "2026-10-03T13:30:00Z",
        (
            "2026-10-04T15:15:00Z",
            "2026-10-05T15:15:00Z",
            "2026-10-06T15:15:00Z",
        ),
    ),
    (
        "Australia/Lord_Howe",
        "45 2 * * *",
        "2026-10-03T13:30:00Z",
        (
            "2026-10-03T15:45:00Z",
            "2026-10-04T15:45:00Z",
            "2026-10-05T15:45:00Z",
        ),
    ),
    (
        "Australia/Lord_Howe",
        "0 3 * * *",
        "2026-10-03T13:30:00Z",
        (
            "2026-10-04T16:00:00Z",
            "2026-10-05T16:00:00Z",
            "2026-10-06T16:00:00Z",
        ),
    ),
    (
        "Australia/Lord_Howe",
        "*/20 * * * *",
        "2026-10-03T15:00:00Z",
        (
            "2026-10-03T15:10:00Z",
            "2026-10-03T15:40:00Z",
            "2026-10-03T16:00:00Z",
            "2026-10-03T16:20:00Z",
        ),
    ),
    (
        "Australia/Lord_Howe",
        "45 1 * * *",
        "2026-04-04T13:30:00Z",
        (
            "2026-04-04T14:45:00Z",
            "2026-04-04T15:15:00Z",
            "2026-04-05T15:15:00Z",
        ),
    ),
    (
        "Australia/Lord_Howe",
        "0 2 * * *",
        "2026-04-04T13:30:00Z",
        (
            "2026-04-05T15:30:00Z",
            "2026-04-06T15:30:00Z",
            "2026-04-07T15:30:00Z",
        ),
    ),
    (
        "Australia/Lord_Howe",
        "15 1 * * *",
        "2026-04-04T13:30:00Z",
        (
            "2026-04-04T14:15:00Z",
            "2026-04-05T14:45:00Z",
            "2026-04-06T14:45:00Z",
        ),
    ),
    # Ordinary days, no transition near
    (
        "",
        "0 2 * * *",
        "2026-06-10T10:17:42Z",
        (
            "2026-06-11T02:00:00Z",
            "2026-06-12T02:00:00Z",
            "2026-06-13T02:00:00Z",
        ),
    ),
    (
        "",
        "*/7 * * * *",
        "2026-06-10T10:17:42Z",
        (
            "2026-06-10T10:21:00Z",
            "2026-06-10T10:28:00Z",
            "2026-06-10T10:35:00Z",
        ),
    ),
    (
        "",
        "5 4 * * 1-5",
        "2026-06-10T10:17:42Z",
        (
            "2026-06-11T04:05:00Z",
            "2026-06-12T04:05:00Z",
            "2026-06-15T04:05:00Z",
        ),
    ),
    (
        "",
        "0 0 29 2 *",
        "2026-06-10T10:17:42Z",
        (
            "2028-02-29T00:00:00Z",
            "2032-02-29T00:00:00Z",
            "2036-02-29T00:00:00Z",
        ),
    ),
    (
        "",
        "0 0 13 * 5",
        "2026-06-10T10:17:42Z",
        (
            "2026-06-12T00:00:00Z",
            "2026-06-13T00:00:00Z",
            "2026-06-19T00:00:00Z",
        ),
    ),
    (
        "",
        "0 0 */2 * 1",
        "2026-06-10T10:17:42Z",
        (
            "2026-06-11T00:00:00Z",
            "2026-06-13T00:00:00Z",
            "2026-06-15T00:00:00Z",
        ),
    ),
    (
        "",
        "15 10 * JAN-MAR MON",
        "2026-06-10T10:17:42Z",
        (
            "2027-01-04T10:15:00Z",
            "2027-01-11T10:15:00Z",
            "2027-01-18T10:15:00Z",
        ),
    ),
    (
        "",
        "@weekly",
        "2026-06-10T10:17:42Z",
        (
            "2026-06-14T00:00:00Z",
            "2026-06-21T00:00:00Z",
            "2026-06-28T00:00:00Z",
        ),
    ),
    (
        "",
        "@monthly",
        "2026-06-10T10:17:42Z",
        (
            "2026-07-01T00:00:00Z",
            "2026-08-01T00:00:00Z",
            "2026-09-01T00:00:00Z",
        ),
    ),
    (
        "",
        "@yearly",
        "2026-06-10T10:17:42Z",
        (
            "2027-01-01T00:00:00Z",
            "2028-01-01T00:00:00Z",
            "2029-01-01T00:00:00Z",
        ),
    ),
    (
        "",
        "0 9 31 * *",
        "2026-06-10T10:17:42Z",
        (
            "2026-07-31T09:00:00Z",
            "2026-08-31T09:00:00Z",
            "2026-10-31T09:00:00Z",
        ),
    ),
    (
        "",
        "5/20 * * * *",
        "2026-06-10T10:17:42Z",
        (
            "2026-06-10T10:25:00Z",
            "2026-06-10T10:45:00Z",
            "2026-06-10T11:05:00Z",
        ),
    ),
    ("", "0 0 30 2 *", "2026-06-10T10:17:42Z", ("never",)),
    (
        "America/New_York",
        "5 4 * * 1-5",
        "2026-06-10T10:17:42Z",
        (
            "2026-06-11T08:05:00Z",
            "2026-06-12T08:05:00Z",
            "2026-06-15T08:05:00Z",
        ),
    ),
    (
        "America/New_York",
        "0 12 * * 1,3",
        "2026-06-10T10:17:42Z",
        (
            "2026-06-10T16:00:00Z",
            "2026-06-15T16:00:00Z",
            "2026-06-17T16:00:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "0 9 1 * *",
        "2026-06-30T21:59:59Z",
        (
            "2026-07-01T07:00:00Z",
            "2026-08-01T07:00:00Z",
            "2026-09-01T07:00:00Z",
        ),
    ),
    (
        "Europe/Berlin",
        "0 0 * * *",
        "2026-06-30T21:59:59Z",
        (
            "2026-06-30T22:00:00Z",
            "2026-07-01T22:00:00Z",
            "2026-07-02T22:00:00Z",
        ),
    ),
    (
        "UTC",
        "0 0 1 1 *",
        "2026-12-31T23:59:00Z",
        (
            "2027-01-01T00:00:00Z",
            "2028-01-01T00:00:00Z",
        ),
    ),
    (
        "UTC",
        "* * * * *",
        "2026-12-31T23:59:00Z",
        (
            "2027-01-01T00:00:00Z",
            "2027-01-01T00:01:00Z",
        ),
    ),
    ("", "0 0 ? * *", "2026-06-10T00:00:00Z", ("2026-06-11T00:00:00Z",)),
    ("", "0-5/2,10 1 * * SUN-SAT", "2026-06-10T00:00:00Z", ("2026-06-10T01:00:00Z",)),
    ("", "0 0 * * sun", "2026-06-10T00:00:00Z", ("2026-06-14T00:00:00Z",)),
]

# ParseStandard refuses these (and so does the API server, which validates with it).
REFUSED = [
    "0 0 * * 7",
    "59 23 L * *",
    "0 0 * * MON#1",
    "0 0 L * *",
    "*/0 * * * *",
    "0 0 0 * *",
    "60 * * * *",
    "0 0 * *",
    "0 0 0 0 0 0",
    "@reboot",
]


def cronjob(schedule: str, zone: str) -> cron.CronSpec:
    spec: dict[str, Any] = {"schedule": schedule, "jobTemplate": {}}
    if zone:
        spec["timeZone"] = zone
    return cron.read({"metadata": {"name": "nightly", "namespace": "ops"}, "spec": spec})


def utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(("zone", "schedule", "after", "runs"), RECORDED)
def test_next_runs_are_the_controllers(
    zone: str, schedule: str, after: str, runs: tuple[str, ...]
) -> None:
    spec = cronjob(schedule, zone)
    got: list[str] = []
    moment: datetime | None = datetime.fromisoformat(after)
    for _ in runs:
        assert moment is not None
        moment = cron.next_run(spec, moment)
        got.append("never" if moment is None else utc(moment))
    assert tuple(got) == runs


@pytest.mark.parametrize(("zone", "schedule", "after", "runs"), RECORDED)
def test_the_replay_expands_the_same_runs(
    zone: str, schedule: str, after: str, runs: tuple[str, ...]
) -> None:
    spec = cronjob(schedule, zone)
    start = datetime.fromisoformat(after) + timedelta(microseconds=1)
    end = datetime.fromisoformat(runs[-1]) + timedelta(seconds=1) if runs[-1] != "never" else start
    expected = [run for run in runs if run != "never"]
    assert [utc(t) for t in cron.fire_times(spec, start, end)] == expected


@pytest.mark.parametrize("schedule", REFUSED)
def test_schedules_the_api_server_refuses_are_refused(schedule: str) -> None:
    with pytest.raises(cron.CronError):
        cron.expression(cronjob(schedule, ""))


def test_the_fall_back_double_run_gets_two_job_names() -> None:
    # The controller names a Job by its scheduled minute since the epoch: both 01:30s are
    # distinct Jobs, so both runs are announced and both are created.
    spec = cronjob("30 1 * * *", "America/New_York")
    night = datetime(2026, 11, 1, 4, tzinfo=UTC)
    runs = cron.fire_times(spec, night, night + timedelta(hours=4))
    assert [cron.job_name(spec, t) for t in runs] == ["nightly-29891850", "nightly-29891910"]


def test_every_is_refused_not_guessed() -> None:
    # The controller accepts `@every 1h`, but its runs count from the CronJob's creation and
    # last run, which the schedule does not say: Lights-Out reports it rather than guess.
    with pytest.raises(cron.CronError, match="@every"):
        cron.expression(cronjob("@every 1h", ""))
