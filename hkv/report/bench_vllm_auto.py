"""Tables from `vllm_h200_auto.json`: `auto` and `predictive` against vLLM's lru and arc in real
vLLM on the H200 (`python -m bench.vllm_gpu run ... --popularity`, folded with `fold`)."""

from __future__ import annotations

from typing import Any

POLICIES = ("lru", "arc", "hkv_auto", "hkv_predictive")


def _workload(run: dict[str, Any]) -> str:
    """The run's workload: the anchor, or its skewed variant (Zipf exponent), ", images" where
    its prompts marked their image tokens (`--variant mm`), ", seed N" where it was drawn with
    another seed than the engines' own (`--seed`)."""
    popularity = run.get("popularity", 0.0)
    name = "anchor" if not popularity else f"skewed (Zipf {popularity:g})"
    name = f"{name}, images" if run.get("variant") == "mm" else name
    return f"{name}, seed {run['seed']}" if run.get("seed") else name


def runs_by_cell(results: dict[str, Any]) -> dict[tuple[str, float], dict[str, dict]]:
    """(workload, CPU tier GiB) -> policy -> its run's summary (the first repeat)."""
    cells: dict[tuple[str, float], dict[str, dict]] = {}
    for run in results["runs"]:
        cell = cells.setdefault((_workload(run), run["cpu_gib"]), {})
        cell.setdefault(run["policy"], run)
    return dict(sorted(cells.items(), key=lambda item: (item[0][0] != "anchor", item[0])))


def cached_table(results: dict[str, Any]) -> str:
    """Markdown: cached share of prompt tokens per policy (failed stores noted)."""
    lines = [
        "| workload | CPU tier | " + " | ".join(POLICIES) + " |",
        "|---|---|" + "---|" * len(POLICIES),
    ]
    for (workload, gib), runs in runs_by_cell(results).items():
        cells = []
        for name in POLICIES:
            run = runs[name]
            text = f"{100 * run['cached_frac']:.1f} %"
            if run["failed_stores"]:
                text += f" ({run['failed_stores']} failed stores)"
            cells.append(text)
        lines.append(f"| {workload} | {gib:g} GiB | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def policy_ms_per_step(results: dict[str, Any], workload: str, gib: float) -> dict[str, float]:
    """Each policy's own time per scheduler step, ms (net of the timer's cost)."""
    runs = runs_by_cell(results)[(workload, gib)]
    return {name: 1000 * runs[name]["policy_s_per_step_net"] for name in POLICIES}


def policy_time_table(results: dict[str, Any]) -> str:
    """Markdown: each policy's own time over the whole run (net of the timer) per engine, as a
    multiple of vLLM's lru in the same engine, and how often `auto` changed its leader (where
    the run recorded it)."""
    others = [name for name in POLICIES if name != "lru"]
    lines = [
        "| workload | CPU tier | lru (s) | "
        + " | ".join(f"{n} / lru" for n in others)
        + " | auto's switches |",
        "|---|---|---|" + "---|" * len(others) + "---|",
    ]
    for (workload, gib), runs in runs_by_cell(results).items():
        lru = runs["lru"]["policy_s_net"]
        ratios = [f"{runs[name]['policy_s_net'] / lru:.1f}x" for name in others]
        switches = runs["hkv_auto"].get("policy_switches")
        lines.append(
            f"| {workload} | {gib:g} GiB | {lru:.2f} | "
            + " | ".join(ratios)
            + f" | {'-' if switches is None else switches} |"
        )
    return "\n".join(lines)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def time_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per engine (workload, CPU tier) and policy, over its alternated repeats: the median
    workload wall time, the median of the runs' mean TTFT, the median policy time, the cached
    share, and the first two as a change against vLLM's lru in the same engine (negative is
    faster). `vllm_h200_time.json`: each engine's policies took turns, three repeats each."""
    cells: dict[tuple[str, float], dict[str, list[dict]]] = {}
    for run in results["runs"]:
        cell = cells.setdefault((_workload(run), run["cpu_gib"]), {})
        cell.setdefault(run["policy"], []).append(run)
    rows = []
    for (workload, gib), policies in cells.items():
        medians = {
            name: {
                "wall_s": _median([r["wall_s"] for r in runs]),
                "ttft_mean_s": _median([r["ttft_mean_s"] for r in runs]),
                "policy_s": _median([r["policy_s"] for r in runs]),
                "cached_frac": _median([r["cached_frac"] for r in runs]),
                "repeats": len(runs),
            }
            for name, runs in policies.items()
        }
        lru = medians.get("lru")
        for name, m in medians.items():
            row = {"workload": workload, "cpu_gib": gib, "policy": name, **m}
            if lru is not None:
                row["wall_vs_lru"] = m["wall_s"] / lru["wall_s"] - 1
                row["ttft_vs_lru"] = m["ttft_mean_s"] / lru["ttft_mean_s"] - 1
                row["policy_x_lru"] = m["policy_s"] / lru["policy_s"]
            rows.append(row)
    return rows


def time_table(results: dict[str, Any]) -> str:
    """Markdown of `time_rows`: what each policy makes a user wait, engine by engine."""
    lines = [
        "| workload | CPU tier | policy | cached | wall (s) | vs lru | mean TTFT (s) | vs lru "
        "| policy time (s) | x lru |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in time_rows(results):
        lines.append(
            f"| {row['workload']} | {row['cpu_gib']:g} GiB | {row['policy']} "
            f"| {100 * row['cached_frac']:.1f} % | {row['wall_s']:.2f} "
            f"| {100 * row.get('wall_vs_lru', 0):+z.1f} % | {row['ttft_mean_s']:.3f} "
            f"| {100 * row.get('ttft_vs_lru', 0):+z.1f} % | {row['policy_s']:.2f} "
            f"| {row.get('policy_x_lru', 1):.1f}x |"
        )
    return "\n".join(lines)


DIAGNOSIS_KEYS = (
    ("steps", "steps"),
    ("idle_steps", "idle steps"),
    ("idle_s", "idle s"),
    ("prefill_s", "prefill-step s"),
    ("decode_s", "decode-step s"),
    ("load_jobs", "load jobs"),
    ("load_blocks_per_job_median", "blocks/job (median)"),
    ("partial_chain_hits", "partial-chain hits"),
    ("load_wait_steps_mean", "load wait (steps)"),
    ("policy_s", "policy s"),
    ("policy_s_max_step", "policy s, worst step"),
)


def diagnosis_table(traced: dict[str, Any]) -> str:
    """Markdown: `bench.vllm_gpu.steps.diagnose` of each traced run (`vllm_h200_steps.json`),
    with the wall time and cached share beside it."""
    runs = traced["runs"]
    lines = [
        "| | " + " | ".join(r["policy"] for r in runs) + " |",
        "|---|" + "---|" * len(runs),
        "| wall (s) | " + " | ".join(f"{r['wall_s']:.2f}" for r in runs) + " |",
        "| cached | " + " | ".join(f"{100 * r['cached_frac']:.1f} %" for r in runs) + " |",
    ]
    for key, label in DIAGNOSIS_KEYS:
        cells = []
        for r in runs:
            value = r["diagnosis"].get(key)
            whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
            cells.append(f"{value:.0f}" if whole else f"{value:.2f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def time_findings(timed: dict[str, Any], traced: dict[str, Any]) -> list[str]:
    """Sentences computed from `vllm_h200_time.json` (`time_rows`) and the traced engine
    (`vllm_h200_steps.json`): where `auto` stands in time against lru and the fastest hkv
    policy, and what its extra seconds are made of against that policy's."""
    rows = time_rows(timed)
    lines = []
    for workload, gib in dict.fromkeys((r["workload"], r["cpu_gib"]) for r in rows):
        cell = {r["policy"]: r for r in rows if (r["workload"], r["cpu_gib"]) == (workload, gib)}
        auto = cell.get("hkv_auto")
        if auto is None or "wall_vs_lru" not in auto:
            continue
        others = [r for name, r in cell.items() if name not in ("lru", "hkv_auto")]
        best = min(others, key=lambda r: r["wall_s"]) if others else None
        text = (
            f"{workload} at {gib:g} GiB: hkv_auto's median wall time is "
            f"{100 * auto['wall_vs_lru']:+z.1f} % against lru's and its mean TTFT "
            f"{100 * auto['ttft_vs_lru']:+z.1f} %, "
            f"its policy time {auto['policy_x_lru']:.1f}x lru's"
        )
        if best is not None:
            gap = auto["wall_s"] / best["wall_s"] - 1
            name = best["policy"]
            text += f"; its wall time is {100 * gap:+z.1f} % against {name}'s, the fastest other"
        lines.append(text + ".")
    by_policy = {r["policy"]: r for r in traced["runs"]}
    auto, bip = by_policy.get("hkv_auto"), by_policy.get("hkv_bip")
    if auto is not None and bip is not None:
        lines += _traced_findings(auto, bip)
    return lines


def _traced_findings(auto: dict[str, Any], bip: dict[str, Any]) -> list[str]:
    """Two sentences on the traced engine: where `auto`'s seconds differ from `bip`'s, and what
    its partial-chain hits and extra (or fewer) steps say about it."""
    a, b = auto["diagnosis"], bip["diagnosis"]
    more = auto["wall_s"] - bip["wall_s"]
    partial, partial_bip = a["partial_chain_hits"], b["partial_chain_hits"]
    why = (
        ": it keeps the heads of every session, so what it recomputes sits deep in the prompt, "
        "where a token costs the most (attention over everything before it), while hkv_bip "
        "keeps whole chains of fewer sessions."
        if partial > 1.5 * partial_bip
        else ", about as often: like hkv_bip it keeps whole chains of fewer sessions."
    )
    first = (
        f"Traced engine ({auto['cpu_gib']:g} GiB): hkv_auto caches "
        f"{100 * auto['cached_frac']:.1f} % against hkv_bip's {100 * bip['cached_frac']:.1f} % "
        f"{'yet' if more > 0 else 'and'} takes {abs(more):.2f} s "
        f"{'longer' if more > 0 else 'less'}: "
        f"{a['prefill_s'] - b['prefill_s']:+z.2f} s in prefill steps, "
        f"{a['decode_s'] - b['decode_s']:+z.2f} s in decode-only steps and "
        f"{a['idle_s'] - b['idle_s']:+z.2f} s in idle steps, of which its own policy time is "
        f"{a['policy_s'] - b['policy_s']:+z.2f} s. Its hits stop short of the session's last "
        f"chain in {partial} requests against {partial_bip}{why}"
    )
    extra, idle = a["steps"] - b["steps"], a["idle_steps"] - b["idle_steps"]
    if extra <= 0:
        return [
            first,
            f"It ran {-extra} steps fewer than hkv_bip ({a['steps']} against "
            f"{b['steps']}), {a['idle_steps']} of them idle polls while loads finish.",
        ]
    return [
        first,
        (
            f"Of its {extra} steps more than hkv_bip's ({a['steps']} against {b['steps']}), "
            f"{idle} are idle polls while loads finish ({a['idle_s']:.2f} s in its "
            f"{a['idle_steps']} idle steps, the worst of its steps holding "
            f"{a['policy_s_max_step']:.2f} s of policy time): the extra steps are a symptom of "
            "its partial hits (every request of a wave loading at once), not the cost."
        ),
    ]


def method_lines(results: dict[str, Any]) -> list[str]:
    """One line a run: its policy seconds, the seconds of vLLM 0.26's `touch` (where a request
    is reported) and `evict`, and where the policy records them (`auto`), its `after_request`
    inside that touch and each switch after the first leader (request, expert, seconds)."""
    lines = []
    for run in results["runs"]:
        methods = run["policy_by_method"]
        parts: dict[str, Any] = {m: round(methods[m]["s"], 3) for m in ("touch", "evict")}
        if run.get("policy_inner"):
            parts["after_request"] = round(run["policy_inner"]["after_request"]["s"], 3)
        switches = [(at, label, round(s, 3)) for at, label, s in run.get("policy_leaders", [])[1:]]
        if switches:
            parts["switches"] = switches
        lines.append(
            f"{run['policy']}, popularity {run['popularity']:g}, {run['cpu_gib']:g} GiB, "
            f"repeat {run['repeat']}: policy {run['policy_s']:.3f} s, {parts}"
        )
    return lines


def engine_report(results: dict[str, Any]) -> str:
    """An engine file as a notebook prints it: hkv's commit, `time_table`, `time_findings` and
    `method_lines`."""
    findings = time_findings(results, {"runs": []})
    parts = [f"hkv {results['versions']['hkv']}", time_table(results), *findings]
    return "\n".join([*parts, *method_lines(results)])


def against_lru(results: dict[str, Any], policy: str = "hkv_auto") -> list[dict[str, Any]]:
    """Per engine, `policy` beside vLLM's lru in what a user waits (`time_rows`' medians): the
    cached share, the wall time and the mean TTFT of both, `policy`'s change against lru, and
    the seconds each policy's own code took (`policy_s`)."""
    rows = time_rows(results)
    lru = {(r["workload"], r["cpu_gib"]): r for r in rows if r["policy"] == "lru"}
    out = []
    for row in rows:
        base = lru.get((row["workload"], row["cpu_gib"]))
        if row["policy"] != policy or base is None:
            continue
        out.append({
            "engine": f"{row['workload']}, {row['cpu_gib']:g} GiB CPU tier",
            "cached, lru": base["cached_frac"], f"cached, {policy}": row["cached_frac"],
            "wall s, lru": base["wall_s"], f"wall s, {policy}": row["wall_s"],
            "wall vs lru": row["wall_vs_lru"],
            "mean TTFT s, lru": base["ttft_mean_s"], f"mean TTFT s, {policy}": row["ttft_mean_s"],
            "TTFT vs lru": row["ttft_vs_lru"],
            "policy s, lru": base["policy_s"],
            f"policy s, {policy}": row["policy_s"],
        })  # fmt: skip
    return out


def noise_band(results: dict[str, Any], twin: str = "hkv_lru") -> dict[str, float] | None:
    """How far these engines move between runs, read off `twin`, a policy that decides as lru
    does (hkv's lru behind hkv's adapter): the lowest and highest of its median wall-time
    changes against lru's over the engines, `half_width` the largest of them either way (which
    of two policies deciding alike comes out ahead is chance, so the band is that much either
    side of lru's), and the largest gap between the two's cached shares (points, which says how
    alike they decided). None where `twin` did not run."""
    rows = [r for r in time_rows(results) if r["policy"] == twin and "wall_vs_lru" in r]
    if not rows:
        return None
    lru = {(r["workload"], r["cpu_gib"]): r for r in time_rows(results) if r["policy"] == "lru"}
    gaps = [abs(r["cached_frac"] - lru[(r["workload"], r["cpu_gib"])]["cached_frac"]) for r in rows]
    walls = [r["wall_vs_lru"] for r in rows]
    return {"low": min(walls), "high": max(walls), "half_width": max(map(abs, walls)),
            "cached_gap_points": 100 * max(gaps), "engines": len(rows)}  # fmt: skip


def band_sentence(band: dict[str, float] | None, twin: str = "hkv_lru") -> str:
    """`noise_band`'s reading in one sentence, or that `twin` did not run (no band to read)."""
    if band is None:
        return f"{twin} did not run in these engines: no band of noise to read the others against"
    return (f"{twin} against lru over {band['engines']} engines: cached shares within "
            f"{band['cached_gap_points']:.2f} points, median wall time {band['low']:+.1%} to "
            f"{band['high']:+.1%}: {band['half_width']:.1%} either way is noise here")  # fmt: skip


def verdicts(results: dict[str, Any], policy: str = "hkv_auto", twin: str = "hkv_lru") -> list[str]:
    """A sentence per engine: `policy`'s median wall time against lru's, and its policy time,
    read against the noise band of `twin` (`noise_band`, `half_width` either side of lru's):
    faster or slower beyond it, or within it."""
    band = noise_band(results, twin)
    lines = []
    for row in against_lru(results, policy):
        change, ttft = row["wall vs lru"], row["TTFT vs lru"]
        text = (f"{row['engine']}: {policy} {row[f'wall s, {policy}']:.2f} s of wall time against "
                f"lru's {row['wall s, lru']:.2f} s ({100 * change:+z.1f} %), mean TTFT "
                f"{100 * ttft:+z.1f} %, its own code {row[f'policy s, {policy}']:.2f} s against "
                f"lru's {row['policy s, lru']:.2f} s")  # fmt: skip
        if band is not None:
            width = band["half_width"]
            where = "faster than lru beyond" if change < -width else "within"
            where = "slower than lru beyond" if change > width else where
            text += (f"; {where} the {100 * width:.1f} % either way that {twin}, deciding as lru "
                     f"does, moved from it ({100 * band['low']:+z.1f} % to "
                     f"{100 * band['high']:+z.1f} %)")  # fmt: skip
        lines.append(text + ".")
    return lines


def stand_in_table(results: dict[str, Any]) -> str:
    """`bench.adapter_cells`: at each of the engine's cells, lru026's policy time per request
    (median over the rounds) and each hkv policy's as a multiple of it in the same run (median
    ratio), for this hkv and the checkout it ran against, and whether every policy's evictions
    were the same in both (the same decisions)."""
    lines = []
    for cell in results["cells"]:
        this, other = cell["this"], cell.get("against")
        name = "anchor" if not cell["popularity"] else f"skewed ({cell['popularity']:g})"
        base = _median(this["lru026"]["us_per_request_net"])
        parts = [f"lru026 {base:.0f} us a request"]
        for policy, row in this.items():
            if policy == "lru026":
                continue
            then = f" (was {other[policy]['median_ratio_to_lru026']:.2f}x)" if other else ""
            parts.append(f"{policy} {row['median_ratio_to_lru026']:.2f}x{then}")
        same = other is not None and all(
            this[p]["evictions_sha256"] == other[p]["evictions_sha256"] for p in this
        )
        tail = "; the same evictions as before" if same else ""
        lines.append(f"{name} at {cell['cpu_gib']:g} GiB: " + ", ".join(parts) + tail)
    return "\n".join(lines)


def wave_split(runs: list[dict], policy: str, baseline: str = "lru") -> dict:
    """Where `policy`'s TTFT differs from `baseline`'s in one engine's folded `runs` (those
    with `by_wave`, as `bench.vllm_gpu.summary.fold` keeps them), each wave's sums averaged
    over its repeats: the total difference of the requests' TTFT (seconds), the part in waves
    where both cached the same tokens (what the policy's own time costs: nothing else differs
    there) and the part in the other waves (what its decisions cost), the cached tokens'
    difference, and the wave of alike caching where the policy's TTFT grew the most, with that
    growth (a switch's stall shows there)."""

    def mean_waves(name: str) -> tuple[list[float], list[float]]:
        mine = [r["by_wave"] for r in runs if r["policy"] == name and r.get("by_wave")]
        if not mine:
            raise ValueError(f"wave_split: no run of {name!r} with per-wave sums")
        n = len(mine)
        ttft = [sum(col) / n for col in zip(*(w["ttft_s"] for w in mine), strict=True)]
        cached = [sum(col) / n for col in zip(*(w["cached_tokens"] for w in mine), strict=True)]
        return ttft, cached

    ttft, cached = mean_waves(policy)
    base_ttft, base_cached = mean_waves(baseline)
    alike = [abs(a - b) < 0.5 for a, b in zip(cached, base_cached, strict=True)]
    delta = [a - b for a, b in zip(ttft, base_ttft, strict=True)]
    return {
        "waves": len(delta),
        "alike_waves": sum(alike),
        "ttft_delta_s": sum(delta),
        "ttft_delta_alike_s": sum(d for d, same in zip(delta, alike, strict=True) if same),
        "ttft_delta_differ_s": sum(d for d, same in zip(delta, alike, strict=True) if not same),
        "cached_delta_tokens": sum(cached) - sum(base_cached),
        "largest_alike_wave": max(
            ((d, w) for w, (d, same) in enumerate(zip(delta, alike, strict=True)) if same),
            default=(0.0, None),
        )[::-1],
    }
