"""The cross-node pairs: O(log N) rounds that point at a slow node or link.

Round ``r`` (``r = 0 .. ceil(log2 N) - 1``) joins node ``i`` with node ``(i + 2**r) mod N``: each
node meets about two new partners per round, at distances 1, 2, 4, ...; a round's pairs are split
into steps of disjoint pairs that run at the same time (at most three steps a round). That is
``N * ceil(log2 N)`` pairs at most, never the ``N^2 / 2`` of every pair, in ``ceil(log2 N)`` rounds.

A pair's all-reduce runs at the speed of its slower end. So a node's own speed is at least the
fastest pair it was in (``node_scores``: the maximum over its pairs): a slow node or a bad NIC makes
every one of its pairs slow and keeps a low score, while a healthy node has at least one healthy
partner among its ``2 log N`` and scores high. Two nodes alone form one pair, which cannot say which
end is slow: both get its figure (the per-node GEMM, memory and transport checks still separate them).
"""

from __future__ import annotations

import math


def rounds(n: int) -> list[list[list[tuple[int, int]]]]:
    """Rounds of steps of disjoint node pairs (node indices, smaller first), for ``n`` nodes."""
    if n < 2:
        return []
    out = []
    for r in range(max(1, math.ceil(math.log2(n)))):
        distance = 2**r
        pairs = sorted(
            {tuple(sorted((i, (i + distance) % n))) for i in range(n)} - {(i, i) for i in range(n)}
        )
        steps: list[list[tuple[int, int]]] = []
        for pair in pairs:  # greedy: the first step this pair's nodes are both free in
            for step in steps:
                if not any(set(pair) & set(other) for other in step):
                    step.append(pair)
                    break
            else:
                steps.append([pair])
        out.append(steps)
    return out


def schedule(n: int) -> list[list[tuple[int, int]]]:
    """The steps to run, round after round, each pair once (a small N meets a pair again in a later
    round: it is measured once)."""
    seen: set[tuple[int, int]] = set()
    out = []
    for steps in rounds(n):
        for step in steps:
            fresh = [pair for pair in step if pair not in seen]
            seen.update(fresh)
            if fresh:
                out.append(fresh)
    return out


def node_scores(n: int, pair_figures: dict[tuple[int, int], float]) -> list[float | None]:
    """Each node's cross-node figure: the best of the pairs it was in (None: in no measured pair)."""
    scores: list[float | None] = [None] * n
    for (a, b), value in pair_figures.items():
        for node in (a, b):
            if scores[node] is None or value > scores[node]:
                scores[node] = value
    return scores
