"""Dropping machines a set no longer needs: after `planning.scaleup.choose` has picked machines
greedily, a machine picked early may have become redundant because machines picked later have
room for its pods (say, a quick small machine picked for a small pod before a big machine had to
be started for a big one). `drop_redundant` tries each machine, last chosen first, and moves its
pods onto the others when they all fit.

Cost matters (a thousand chosen machines is possible): the others are bucketed by (Group, node
shape) with each bucket's largest free amount per resource, so a bucket that cannot take a
single pod of a class is skipped without looking at its machines.
"""

from __future__ import annotations

from collections.abc import Hashable

from lightsout.planning.cluster import Bin, Placer, PodClass, count_fit

type _BucketKey = tuple[Hashable, Hashable]


def drop_redundant(placer: Placer, bins: list[Bin], classes: dict[int, PodClass]) -> None:
    """Empty every bin (last first) whose pods all fit on the others; emptied bins are the
    machines not to power on after all. Pods only move onto bins of Groups whose scale-up
    window they are past, as when they were first placed."""
    buckets: dict[_BucketKey, list[Bin]] = {}
    for target in bins:
        buckets.setdefault((target.group_key, target.shape), []).append(target)
    peaks = {key: _peak(members) for key, members in buckets.items()}
    for target in reversed(bins):
        moves = _move_all(placer, target, buckets, peaks, classes)
        if moves is None:
            continue
        touched = {(b.group_key, b.shape) for b, _, _ in moves}
        home = (target.group_key, target.shape)
        buckets[home] = [b for b in buckets[home] if b is not target]
        for key in {*touched, home}:
            peaks[key] = _peak(buckets[key])


def _move_all(
    placer: Placer,
    target: Bin,
    buckets: dict[_BucketKey, list[Bin]],
    peaks: dict[_BucketKey, dict[str, int]],
    classes: dict[int, PodClass],
) -> list[tuple[Bin, PodClass, int]] | None:
    """Move every pod of `target` to other bins and return the moves, or undo and return None."""
    moves: list[tuple[Bin, PodClass, int]] = []
    for cls_id in list(target.placed):
        cls = classes[cls_id]
        left = len(target.placed[cls_id])
        for (group_key, shape), members in buckets.items():
            if group_key not in cls.eligible or not members:
                continue
            peak = peaks[(group_key, shape)]
            if any(peak.get(name, 0) < value for name, value in cls.demand):
                continue  # no bin of this bucket has room for even one of these pods
            if placer.reasons(cls, shape, members[0].view):
                continue
            for other in members:
                if other is target:
                    continue
                count = min(left, count_fit(cls.demand, other.free))
                if count:
                    other.add(cls, target.remove(cls, count))
                    moves.append((other, cls, count))
                    left -= count
                    if not left:
                        break
            if not left:
                break
        if left:
            for other, moved_cls, count in reversed(moves):
                target.add(moved_cls, other.remove(moved_cls, count))
            return None
    return moves


def _peak(members: list[Bin]) -> dict[str, int]:
    peak: dict[str, int] = {}
    for member in members:
        for name, value in member.free.items():
            if value > peak.get(name, -(1 << 62)):
                peak[name] = value
    return peak
