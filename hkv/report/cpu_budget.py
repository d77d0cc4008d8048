"""`bench.shadow_cost --through-vllm` read for notebook 08 and the docs: on one core, what vLLM's
lru's speed leaves `auto` to spend beyond hkv's `lru` (the allowance), what `auto`'s shadows take of
it, and a sentence saying whether anything else `auto` could shed would reach vLLM lru's speed."""

from __future__ import annotations

from typing import Any


def cpu_budget_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """`bench.shadow_cost --through-vllm`: per tier size, each one's least disturbed pass
    (seconds), the allowance (vLLM lru's pass less hkv lru's: what `auto` may spend beyond hkv's
    lru and still run as fast as vLLM's), the shadows' share of it and auto's speed; where the
    run has it (`with_shadows`), what the shadows added to hkv lru's pass when replayed at each
    request's end, between vLLM's calls, as `auto` replays them, and that share of the allowance."""
    rows = []
    for cell in results["cells"]:
        best = cell["pass_s_best"]
        allowance = best["vllm:lru"] - best["lru"]
        row = {
            "tier": f"{100 * cell['capacity_frac']:g} % ({cell['capacity_blocks']} blocks)",
            "vLLM lru s": best["vllm:lru"],
            "hkv lru s": best["lru"],
            "hkv auto s": best["auto"],
            "allowance s": round(allowance, 4),
            "auto's shadows alone s": best["shadows"],
            "shadows / allowance": round(best["shadows"] / allowance, 2) if allowance > 0 else None,
        }
        if "lru+shadows" in best:
            added = best["lru+shadows"] - best["lru"]
            row["shadows added in a pass s"] = round(added, 4)
            row["added / allowance"] = round(added / allowance, 2) if allowance > 0 else None
        row["auto x vLLM lru's speed"] = round(best["vllm:lru"] / best["auto"], 2)
        rows.append(row)
    return rows


def cpu_budget_verdict(rows: list[dict[str, Any]]) -> str:
    """What the rows say of `auto`'s speed against vLLM lru's, in a sentence (by what the
    shadows added to a pass where the rows have it, else by their time alone)."""
    if all("added / allowance" in row for row in rows):
        return _in_pass_verdict(rows)
    shares = [row["shadows / allowance"] for row in rows]
    over = [s for s in shares if s is not None and s >= 1.0]
    speeds = [row["auto x vLLM lru's speed"] for row in rows]
    text = (f"auto ran at {min(speeds):.2f}x to {max(speeds):.2f}x of vLLM lru's speed; its "
            f"shadows alone took ")  # fmt: skip
    if len(over) == len(rows):
        return text + (
            f"{min(over):.2f}x to {max(over):.2f}x of the allowance at every tier size: with "
            "them replayed exactly, nothing else auto could shed would bring it to vLLM lru's "
            "speed here."
        )
    known = [s for s in shares if s is not None]
    if over or len(known) < len(rows):
        return text + (
            f"{min(known):.2f}x to {max(known):.2f}x of the allowance, all of it or more at "
            f"{len(over)} of {len(rows)} tier sizes."
        )
    spare = [row["allowance s"] - row["auto's shadows alone s"] for row in rows]
    rest = [row["hkv auto s"] - row["hkv lru s"] - row["auto's shadows alone s"] for row in rows]
    return text + (
        f"{min(known):.2f}x to {max(known):.2f}x of the allowance, inside it at every tier size; "
        f"the rest of auto's pass beyond hkv lru's took {min(rest):.3f} to {max(rest):.3f} s "
        f"where the shadows left {min(spare):.3f} to {max(spare):.3f} s of the allowance."
    )


def _in_pass_verdict(rows: list[dict[str, Any]]) -> str:
    """`cpu_budget_verdict` of rows with the shadows' cost inside a pass."""
    speeds = [row["auto x vLLM lru's speed"] for row in rows]
    alone = [row["shadows / allowance"] for row in rows]
    shares = [row["added / allowance"] for row in rows]
    text = f"auto ran at {min(speeds):.2f}x to {max(speeds):.2f}x of vLLM lru's speed; "
    if None in shares or None in alone:
        return text + "hkv's lru was no faster than vLLM's here: no allowance to spend."
    text += (f"its shadows alone took {min(alone):.2f}x to {max(alone):.2f}x of the allowance "
             f"replayed back to back, and added {min(shares):.2f}x to {max(shares):.2f}x of it to "
             "hkv lru's pass replayed where auto replays them")  # fmt: skip
    over = [s for s in shares if s >= 1.0]
    if len(over) == len(rows):
        return text + (": with them replayed exactly, nothing else auto could shed would bring "
                       "it to vLLM lru's speed here.")  # fmt: skip
    return text + f", all of it or more at {len(over)} of {len(rows)} tier sizes."
