"""hkv's disk tier behind the served CPU tier (`run --disk-gib G`): the options, the
`--kv-transfer-config` the server starts with, and what a run records of the tier.

The connector config is not written here: it is what `hkv flags` prints for the same tiers
(`hkv.planning.flags.translate` with `hkv.planning.offload_spec.disk_tier`, the two calls behind
the CLI), the calibrated H200 profile of the offline disk bench (`bench.vllm_gpu.disk.PROFILE`)
in the tier's entry; the server's environment takes `hkv flags`' environment prefix
(`PYTHONHASHSEED=0`: block hashes stable across processes, so that a restarted server finds what
the last one wrote). The run records the `hkv flags` line that prints the same config, the
tier's lines of the server log ("hkv disk tier at ... chunks found", "hkv disk tier: loads take
..."), its `HkvDiskTier.stats()` before and after the workload (read inside the engine by
`hook/sitecustomize.py`) and the bytes of the files in `--disk-dir` before the server starts,
after the workload and after the server stopped, against the bound.

`--disk-dir` must be the tier's own directory: without `--keep-dir` the tier's files in it are
removed before each server starts; with it the server starts on what the last one left (the
restart check). A directory holding anything else is refused either way.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.vllm_gpu.disk import PROFILE, VARIANTS
from hkv.errors import HkvError
from hkv.planning.flags import Translation, translate
from hkv.planning.offload_spec import disk_tier
from hkv.sim.anchor import Workload

DEFAULT_MAX_MODEL_LEN = 32768
MAX_MODEL_LEN = {"long": 131072}
"""`--max-model-len` per variant: the long sessions' 110-120K-token prompts need 128K."""
TIER_FILE_PREFIX = "hkv_tier"
"""What the tier keeps in its directory: `hkv_tier.bin`, its sidecar `hkv_tier.json`, the
measured load speed `hkv_tier_speed.json` (and their temporary `.hkv_tier*.tmp` while written)."""
TIER_LOG_MARK = "hkv disk tier"
"""What the tier's (and its store's) lines in the server log say."""
MAX_LOG_LINES = 40


def add_arguments(run: argparse.ArgumentParser) -> None:
    """`run`'s disk-tier options (none given: no disk tier, the server as before)."""
    run.add_argument(
        "--disk-gib", type=float, default=None, help="hkv's disk tier behind the CPU tier: GiB"
    )
    run.add_argument("--disk-dir", type=Path, default=Path("/tmp/hkv_serve_disk"))
    run.add_argument("--disk-admission", choices=("cost", "all"), default="cost")
    run.add_argument(
        "--keep-dir",
        action="store_true",
        help="start on what --disk-dir holds (the restart check), instead of emptying it",
    )


def check_options(args: argparse.Namespace) -> None:
    if args.keep_dir and args.disk_gib is None:
        raise HkvError("--keep-dir: only with a disk tier; add --disk-gib")


def workload(variant: str) -> Workload:
    """The anchor sessions (`mm`: with their image spans), or the long-context ones."""
    if variant == "long":
        return VARIANTS["long"]
    return Workload(images=variant == "mm")


def max_model_len(variant: str) -> int:
    return MAX_MODEL_LEN.get(variant, DEFAULT_MAX_MODEL_LEN)


def seed_flags(args: argparse.Namespace, policy: str) -> list[str]:
    """The article-style `vllm serve` flags for this server's CPU tier, as `hkv flags` reads
    them (`hkv_<name>` is hkv's policy `<name>`; `lru` and `arc` are vLLM's own)."""
    return [
        *("--model", str(args.model), "--enable-hybrid-kv-cache"),
        *("--hybrid-kv-cache-cpu-offload-size", str(args.cpu_gib)),
        *("--hybrid-kv-cache-policy", policy.removeprefix("hkv_")),
    ]


def disk_options(args: argparse.Namespace) -> dict[str, str]:
    """`hkv flags`' disk-tier options, by the name of `disk_tier`'s parameters."""
    return {
        "size": str(args.disk_gib),
        "dir": str(args.disk_dir),
        "admission": args.disk_admission,
        "profile": str(PROFILE),
    }


def hkv_flags_argv(args: argparse.Namespace, policy: str) -> list[str]:
    """The `hkv flags` command line that prints this server's `--kv-transfer-config`."""
    disk = [(f"--disk-{name}", value) for name, value in disk_options(args).items()]
    return [
        "hkv",
        "flags",
        *(part for pair in disk for part in pair),
        "--",
        *seed_flags(args, policy),
    ]


def tier_flags(args: argparse.Namespace, policy: str) -> Translation | None:
    """What `hkv flags` gives for this server's tiers (None without `--disk-gib`); `HkvError`
    when it refuses them or would serve another policy than `policy`."""
    if getattr(args, "disk_gib", None) is None:
        return None
    size, folder, admission, profile = disk_options(args).values()
    try:
        disk = disk_tier(size, folder, admission=admission, profile=profile)
        flags = translate(seed_flags(args, policy), disk=disk)
    except HkvError as exc:
        raise HkvError(f"--policy {policy} with --disk-gib: hkv flags refuses it: {exc}") from None
    served = json.loads(transfer_json(flags))["kv_connector_extra_config"]["eviction_policy"]
    if served != policy:
        raise HkvError(
            f"--policy {policy}: with a disk tier `hkv flags` would serve {served!r} instead; "
            "name vLLM's lru or arc, or an hkv policy as hkv_<name>"
        )
    return flags


def transfer_json(flags: Translation) -> str:
    """The `--kv-transfer-config` value among `hkv flags`' vLLM arguments."""
    if "--kv-transfer-config" not in flags.vllm_args:
        raise HkvError(f"hkv flags gave no --kv-transfer-config (only {flags.vllm_args})")
    return flags.vllm_args[flags.vllm_args.index("--kv-transfer-config") + 1]


def prepare_dir(args: argparse.Namespace) -> None:
    """Empty `--disk-dir` of the tier's files (not with `--keep-dir`); refuse a directory that
    holds anything else (it is the tier's alone, and its bytes are measured)."""
    folder = Path(args.disk_dir)
    if not folder.exists():
        return
    if not folder.is_dir():
        raise HkvError(f"--disk-dir {folder}: not a directory; give the tier's own directory")
    entries = list(folder.iterdir())
    others = sorted(p.name for p in entries if not _tier_file(p))
    if others:
        raise HkvError(
            f"--disk-dir {folder}: holds {', '.join(others[:3])}, not hkv's tier files; "
            "give a directory of the tier's own"
        )
    if not args.keep_dir:
        for path in entries:
            path.unlink(missing_ok=True)


def _tier_file(path: Path) -> bool:
    return path.name.lstrip(".").startswith(TIER_FILE_PREFIX) and path.is_file()


def dir_usage(folder: Path) -> dict[str, int]:
    """Files under `folder`, their bytes (sizes) and the bytes the disk gave them."""
    out = {"files": 0, "file_bytes": 0, "allocated_bytes": 0}
    for path in Path(folder).rglob("*") if Path(folder).is_dir() else ():
        try:
            stat = path.stat()
        except OSError:  # a temporary file gone meanwhile
            continue
        if path.is_file():
            out["files"] += 1
            out["file_bytes"] += stat.st_size
            out["allocated_bytes"] += stat.st_blocks * 512
    return out


def tier_setup(args: argparse.Namespace, policy: str, flags: Translation) -> dict[str, Any]:
    """What the run records before the server starts: the `hkv flags` line and what else it
    said, the bound and the directory's bytes."""
    (tier,) = json.loads(transfer_json(flags))["kv_connector_extra_config"]["secondary_tiers"]
    return {
        "hkv_flags": {
            "argv": hkv_flags_argv(args, policy),
            "env": flags.env,
            "warnings": flags.warnings,
            "notes": flags.notes,
        },
        "disk_tier": {
            "dir": tier["path"],
            "bound_bytes": tier["disk_bytes"],
            "keep_dir": args.keep_dir,
            "dir_before": dir_usage(Path(tier["path"])),
        },
    }


PRIMARY_TIER_COUNTS = ("cascade_read_blocks", "promoted_blocks", "failed_promotions")
"""The CPU tier's rows read for the disk tier and written back from it (the engine hook)."""


def note_workload(record: dict[str, Any], before: dict, after: dict) -> None:
    """The tier's `stats()` (from the engine hook) around the workload, the CPU tier's traffic
    with it during the workload, and the directory."""
    record["stats_before_workload"] = before.get("secondary_tiers")
    record["stats_after_workload"] = after.get("secondary_tiers")
    record["cpu_tier_counts"] = {
        k: after[k] - before.get(k, 0) for k in PRIMARY_TIER_COUNTS if k in after
    }
    record["late_stores_guarded"] = after.get("late_stores_guarded")
    record["dir_after_workload"] = dir_usage(Path(record["dir"]))


def note_stopped(record: dict[str, Any], log_text: str) -> None:
    """The tier's lines of the server log, the directory after the server stopped, and whether
    every measure of the directory stayed within the bound."""
    lines = [line.strip()[-400:] for line in log_text.splitlines() if TIER_LOG_MARK in line]
    record["log_lines"] = lines[:MAX_LOG_LINES]
    record["log_lines_total"] = len(lines)
    record["dir_after_stop"] = dir_usage(Path(record["dir"]))
    measured = [v for k, v in record.items() if k.startswith("dir_") and isinstance(v, dict)]
    record["within_bound"] = all(m["file_bytes"] <= record["bound_bytes"] for m in measured)
