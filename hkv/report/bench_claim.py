"""The article's "68 % VRAM saved for 24 % speed" next to what hkv measured on an H200
(`bench/e2e.py`), and the bound the host link puts on streaming cold KV every decode step."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hkv.errors import HkvError, is_number

if TYPE_CHECKING:
    import pandas as pd

    from hkv.models.model_spec import ModelSpec


@dataclass(frozen=True)
class ArticleClaim:
    """What the article reports: `vram_saved` of the KV's VRAM for `speed_lost` of the speed,
    on `hardware` (fractions in [0, 1])."""

    hardware: str
    vram_saved: float
    speed_lost: float

    def __post_init__(self) -> None:
        for name in ("vram_saved", "speed_lost"):
            value = getattr(self, name)
            ok = is_number(value)
            if not ok or not 0.0 <= value <= 1.0:
                raise HkvError(f"ArticleClaim.{name}: got {value!r}; expected a fraction in [0, 1]")

    @property
    def hot_fraction(self) -> float:
        """The share of the KV left on the GPU, rounded to hundredths."""
        return round(1 - self.vram_saved, 2)

    @property
    def speed_kept(self) -> float:
        """The share of the all-on-GPU speed the article keeps."""
        return 1 - self.speed_lost


def describe_claim(claim: ArticleClaim) -> str:
    """The claim in one line: the VRAM saved, the share kept on the GPU, the speed kept."""
    return (
        f"{claim.vram_saved:.0%} of the KV's VRAM saved keeps {claim.hot_fraction:.0%} on the "
        f"GPU; the article keeps {claim.speed_kept:.0%} of the speed"
    )


def speed_at_hot_fraction(decode: pd.DataFrame, hot_fraction: float) -> dict[str, float]:
    """`{context: tokens/s against DynamicCache}` for hkv's decode at `hot_fraction`."""
    at = _rows_at(decode, hot_fraction, "decode").set_index("context")
    return at["tokens_per_s_vs_dynamic"].to_dict()


def _rows_at(table: pd.DataFrame, hot_fraction: float, what: str) -> pd.DataFrame:
    """The rows of `table` measured at `hot_fraction`; one HkvError naming the fractions it has
    where there are none (a claim whose share kept on the GPU was not measured)."""
    import numpy as np

    rows = table[np.isclose(table["hot_fraction"], hot_fraction)]
    if rows.empty:
        measured = ", ".join(f"{f:.0%}" for f in sorted(set(table["hot_fraction"])))
        raise HkvError(f"the claim keeps {hot_fraction:.0%} of the KV on the GPU, which the {what} "
                       f"runs did not measure (they kept {measured}): give a VRAM share saved "
                       "that leaves one of those (ARTICLE_VRAM_SAVED = 1 - it)")  # fmt: skip
    return rows


def sessions_at_hot_fraction(lockstep: pd.DataFrame, hot_fraction: float) -> dict[str, float]:
    """The sessions' lock-step row at `hot_fraction`: `kv_vram_saved` (resident KV) and
    `speed_kept` (1 / (1 + slowdown against the faster of DynamicCache and StaticCache))."""
    row = _rows_at(lockstep, hot_fraction, "sessions'").iloc[0]
    return {
        "kv_vram_saved": float(row["kv_resident_saved"]),
        "speed_kept": float(1 / (1 + row["slowdown"])),
    }


def claim_table(
    claim: ArticleClaim, decode: pd.DataFrame, lockstep: pd.DataFrame, device: str
) -> pd.DataFrame:
    """Per source (index): KV VRAM saved, speed vs all on GPU and what was measured, the
    article's row first, then hkv's single sequences per context and its parked sessions."""
    import pandas as pd

    at = _rows_at(decode, claim.hot_fraction, "decode").set_index("context")
    sessions = sessions_at_hot_fraction(lockstep, claim.hot_fraction)
    article = {
        "source": f"article ({claim.hardware})",
        "KV VRAM saved": claim.vram_saved,
        "speed vs all on GPU": claim.speed_kept,
        "what": "not stated; not reproducible",
    }
    singles = [
        {
            "source": f"hkv, {device}, {context} context",
            "KV VRAM saved": at.loc[context, "KV VRAM saved"],
            "speed vs all on GPU": speed,
            "what": "one sequence, cold KV streamed every decode step",
        }
        for context, speed in speed_at_hot_fraction(decode, claim.hot_fraction).items()
    ]
    parked = {
        "source": f"hkv, {device}, 16 sessions × 8K",
        "KV VRAM saved": sessions["kv_vram_saved"],
        "speed vs all on GPU": sessions["speed_kept"],
        "what": "sessions parked in host RAM between turns (lock-step timing)",
    }
    return pd.DataFrame([article, *singles, parked]).set_index("source")


def link_bound(
    spec: ModelSpec, contexts: list[int], hot_fraction: float, link_gbps: float
) -> pd.DataFrame:
    """Per context (index, "8K"): the cold KV of `spec` crossing the host link per generated
    token at `hot_fraction` (GB), the link's time for it (ms) and the tokens/s the link alone
    allows."""
    import pandas as pd

    cold_bytes = {n: (1 - hot_fraction) * n * spec.kv_bytes_per_token() for n in sorted(contexts)}
    bound = pd.DataFrame(
        [
            {
                "context": f"{n // 1024}K",
                "cold KV per token, GB": cold / 1e9,
                "link time per token, ms": cold / (link_gbps * 1e9) * 1e3,
            }
            for n, cold in cold_bytes.items()
        ]
    ).set_index("context")
    bound["tokens/s at most, link alone"] = 1e3 / bound["link time per token, ms"]
    return bound


def claim_verdict(claim: ArticleClaim, speed_at_claim: Mapping[str, float], bound) -> str:
    """Whether one sequence streaming its cold KV every decode step kept the claimed speed at the
    claim's hot fraction (`speed_at_hot_fraction`), and what the host link alone allows there
    (`link_bound`), in one sentence."""
    speeds = list(speed_at_claim.values())
    low, high = min(speeds), max(speeds)
    kept = f"{low:.0%}" if round(low, 2) == round(high, 2) else f"{low:.0%} to {high:.0%}"
    limits = bound["tokens/s at most, link alone"]
    verdict = "falls short of" if high < claim.speed_kept else "reaches"
    link = (f"the host link alone allows at most {limits.min():.1f} to {limits.max():.1f} tokens/s "
            "at the contexts measured, whatever the GPU does")  # fmt: skip
    if not math.isfinite(limits.min()):  # (all of the KV on the GPU: nothing crosses the link)
        link = "with no KV off the GPU nothing crosses the host link"
    return (
        f"Streaming its cold KV every decode step, one sequence with {claim.hot_fraction:.0%} of "
        f"its KV on the GPU kept {kept} of the all-on-GPU speed, which {verdict} the article's "
        f"{claim.speed_kept:.0%}; {link}."
    )


def article_summary(
    claim: ArticleClaim, decode: pd.DataFrame, lockstep: pd.DataFrame, bound: pd.DataFrame
) -> dict[str, Any]:
    """The notebook's `article` results: the claim, hkv's speed kept at its hot fraction per
    context, the parked sessions at that fraction, and the link's bound in tokens/s."""
    return {
        "hardware": claim.hardware,
        "vram_saved": claim.vram_saved,
        "speed_kept": claim.speed_kept,
        "hot_fraction": claim.hot_fraction,
        "hkv_speed_kept": speed_at_hot_fraction(decode, claim.hot_fraction),
        "hkv_sessions_at_claim": sessions_at_hot_fraction(lockstep, claim.hot_fraction),
        "link_bound_tokens_per_s": bound["tokens/s at most, link alone"].to_dict(),
    }


def decode_contexts(e2e: Mapping[str, Any]) -> list[int]:
    """The decode benchmark's context lengths in tokens, ascending."""
    return sorted({row["context"] for row in e2e["decode"]})
