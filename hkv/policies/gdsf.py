"""GreedyDual-Size-Frequency."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hkv.errors import HkvError
from hkv.policies.priority import PriorityEntry, PriorityPolicy, inflated


@dataclass(eq=False)
class GDSFPolicy(PriorityPolicy):
    """Priority `L + frequency x cost / size`; `L` rises to each victim's priority (aging).

    Cherkasova, "Improving WWW Proxies Performance with Greedy-Dual-Size-Frequency Caching
    Policy", HP Labs TR 1998. `frequency` counts references while resident (1 on insert), `size`
    is the block's tokens, and `cost` is 1 (`cost="unit"`, which maximises hits) or the seconds a
    hit saves in the block's tier, recompute minus load (`cost="recompute"`, from `cost_model`).
    The inflation value `L` makes blocks referenced long ago fall behind new ones without a clock.
    Admits everything.
    """

    cost: str = "unit"
    cost_model: Any = field(default=None, repr=False)
    name = "gdsf"
    context_fields = ("cost_model",)

    def validate(self) -> None:
        if self.cost not in ("unit", "recompute"):
            raise HkvError(f"gdsf.cost: got {self.cost!r}; expected unit or recompute")
        if self.cost == "recompute" and self.cost_model is None:
            from hkv.cost import CostModel

            self.cost_model = CostModel.default()

    def reset(self) -> None:
        super().reset()
        self.inflation = 0.0

    def priority(self, entry: PriorityEntry) -> float:
        meta = entry.meta
        value = 1.0 if self.cost == "unit" else self.cost_model.decide(meta).saved_s
        return self.inflation + (entry.hits + 1) * value / max(meta.tokens, 1)

    def _on_evicted(self, entries: list[PriorityEntry]) -> None:
        self.inflation = inflated(self.inflation, entries)
