"""Grouping accuracy (GA) and its F1 (FGA) for judging the template miner against labelled logs.

Re-implemented from the definition in reference/logs-metrics.md §1.3 (the upstream scoring code
is GPL-3.0 and is not used): a line counts as correctly grouped when the set of lines in its
predicted group is exactly the set of lines in its ground-truth group.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence


def grouping_accuracy(predicted: Sequence[Hashable], truth: Sequence[Hashable]) -> float:
    if len(predicted) != len(truth):
        raise ValueError(f"{len(predicted)} predictions for {len(truth)} labelled lines")
    if not truth:
        return 1.0
    truth_sizes = Counter(truth)
    members: dict[Hashable, list[int]] = defaultdict(list)
    for index, group in enumerate(predicted):
        members[group].append(index)
    correct = 0
    for indices in members.values():
        labels = {truth[index] for index in indices}
        if len(labels) == 1 and truth_sizes[truth[indices[0]]] == len(indices):
            correct += len(indices)
    return correct / len(truth)


def grouping_f1(predicted: Sequence[Hashable], truth: Sequence[Hashable]) -> float:
    """FGA: F1 of PGA (correct groups / predicted groups) and RGA (correct groups / truth groups),
    a group being correct when its lines are exactly one truth group's lines (§1.3)."""
    if len(predicted) != len(truth):
        raise ValueError(f"{len(predicted)} predictions for {len(truth)} labelled lines")
    if not truth:
        return 1.0
    truth_sizes = Counter(truth)
    members: dict[Hashable, list[int]] = defaultdict(list)
    for index, group in enumerate(predicted):
        members[group].append(index)
    correct = sum(
        1
        for indices in members.values()
        if len({truth[index] for index in indices}) == 1 and truth_sizes[truth[indices[0]]] == len(indices)
    )
    precision, recall = correct / len(members), correct / len(truth_sizes)
    return 0.0 if correct == 0 else 2 * precision * recall / (precision + recall)
