"""How far to trust the VLM's success proposals: a confusion matrix against authoritative labels."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Confusion:
    """Rows: the VLM's proposal; columns: the operator's (or simulator's) label."""

    true_pos: int = 0  # VLM success, label success
    false_pos: int = 0  # VLM success, label failure: the dangerous kind
    false_neg: int = 0
    true_neg: int = 0
    unlabelled: int = 0  # proposals still awaiting a label
    no_proposal: int = 0  # labelled episodes the VLM did not judge

    @property
    def n(self) -> int:
        return self.true_pos + self.false_pos + self.false_neg + self.true_neg

    @property
    def agreement(self) -> float | None:
        return (self.true_pos + self.true_neg) / self.n if self.n else None

    @property
    def precision(self) -> float | None:
        d = self.true_pos + self.false_pos
        return self.true_pos / d if d else None

    @property
    def recall(self) -> float | None:
        d = self.true_pos + self.false_neg
        return self.true_pos / d if d else None

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            **asdict(self),
            "n": self.n,
            "agreement": self.agreement,
            "precision": self.precision,
            "recall": self.recall,
        }


def confusion(pairs: Iterable[tuple[bool | None, bool | None]]) -> Confusion:
    """From (vlm_proposal, authoritative_label) pairs, one per episode."""
    tp = fp = fn = tn = unl = nop = 0
    for proposal, label in pairs:
        if proposal is None:
            nop += label is not None
        elif label is None:
            unl += 1
        elif proposal and label:
            tp += 1
        elif proposal:
            fp += 1
        elif label:
            fn += 1
        else:
            tn += 1
    return Confusion(tp, fp, fn, tn, unl, nop)
