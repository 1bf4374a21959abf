"""Dropping machines a set no longer needs: after `planning.autoscaler.scaleup.choose` has picked
machines greedily, a machine picked early may have become redundant because machines picked later
have room for its pods (say, a quick small machine picked for a small pod before a big machine had
to be started for a big one). `drop_redundant` tries each machine, last chosen first, and moves its
pods onto the others when they all fit.

Cost matters (a thousand chosen machines is possible): the others are bucketed by (Group, node
shape) with each bucket's largest free amount per resource, so a bucket that cannot take a
single pod of a class is skipped without looking at its machines.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from lightsout.planning.autoscaler.cluster import Bin, Filling, Placer, PodClass, count_fit

type _BucketKey = tuple[Hashable, Hashable]


def drop_redundant(
    placer: Placer, bins: Sequence[Bin], classes: Mapping[int, PodClass]
) -> list[Bin]:
    """`bins` with every bin (last first) whose pods all fit on the others emptied onto them;
    emptied bins are the machines not to power on after all. Pods only move onto bins of Groups
    whose scale-up window they are past, as when they were first placed."""
    packing = _Packing(placer, bins, classes)
    for index in reversed(range(len(bins))):
        packing.empty(index)
    return [target.frozen() for target in packing.bins]


class _Packing:
    """Scratch of one `drop_redundant` call: the bins as pods move between them, bucketed."""

    def __init__(
        self, placer: Placer, bins: Sequence[Bin], classes: Mapping[int, PodClass]
    ) -> None:
        self.placer = placer
        self.classes = classes
        self.bins = [Filling(target) for target in bins]
        self.buckets: dict[_BucketKey, list[Filling]] = {}
        for target in self.bins:
            self.buckets.setdefault((target.group_key, target.shape), []).append(target)
        self.peaks = {key: _peak(members) for key, members in self.buckets.items()}

    def empty(self, index: int) -> None:
        """Move every pod of the bin at `index` onto the others, when they all fit."""
        target = self.bins[index]
        moves = self._move_all(index)
        if moves is None:
            return
        touched = {(b.group_key, b.shape) for b, _, _ in moves}
        home = (target.group_key, target.shape)
        self.buckets[home] = [b for b in self.buckets[home] if b is not target]
        for key in {*touched, home}:
            self.peaks[key] = _peak(self.buckets[key])

    def _move_all(self, index: int) -> list[tuple[Filling, PodClass, int]] | None:
        """Move every pod of the bin at `index` to the others and return the moves, or undo and
        return None."""
        target = self.bins[index]
        moves: list[tuple[Filling, PodClass, int]] = []
        for cls_id in list(target.placed):
            cls = self.classes[cls_id]
            left = len(target.placed[cls_id])
            for (group_key, shape), members in self.buckets.items():
                if group_key not in cls.eligible or not members:
                    continue
                peak = self.peaks[(group_key, shape)]
                if any(peak.get(name, 0) < value for name, value in cls.demand):
                    continue  # no bin of this bucket has room for even one of these pods
                if self.placer.reasons(cls, shape, members[0].view):
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


def _peak(members: Sequence[Filling]) -> dict[str, int]:
    peak: dict[str, int] = {}
    for member in members:
        for name, value in member.free.items():
            if value > peak.get(name, -(1 << 62)):
                peak[name] = value
    return peak
