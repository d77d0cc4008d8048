"""Tables from `bench/transfer.py`'s results: host <-> GPU copies (batched, bulk, per block)
and the disk tier against sequential file I/O. `transfer` is the loaded results dict
(`hkv.report.bench_results.load_result`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

DIRECTIONS = {"gpu_to_host": "GPU → host", "host_to_gpu": "host → GPU"}
METHODS = {
    "hkv_gbps": "batched (hkv)",
    "bulk_gbps": "bulk (one copy)",
    "per_block_gbps": "per block",
}
DISK_COLUMNS = [
    "block_bytes",
    "seq_write_gbps",
    "tier_write_gbps",
    "write_vs_sequential",
    "seq_read_gbps",
    "tier_read_gbps",
    "read_vs_sequential",
]


def gpu_of(transfer: Mapping[str, Any]) -> str:
    """The GPU a transfer run measured; `HkvError` for a run without one (its file has no
    GPU to host link to show)."""
    name = transfer.get("machine", {}).get("gpu_name")
    if not name:
        from hkv.errors import HkvError

        run = transfer.get("generated_by", "this run")
        raise HkvError(f"TRANSFER: {run!r} ran without a GPU; this section reads a GPU run's "
                       "file, such as transfer_h200.json")  # fmt: skip
    return name


def transfer_facts(transfer: Mapping[str, Any]) -> str:
    """One line: the bytes per batch and the block sizes (tokens) the run used."""
    params = transfer["parameters"]
    tokens = params["block_tokens"]
    return (
        f"{params['batch_bytes'] / 2**20:g} MiB per batch, blocks of {min(tokens)} to "
        f"{max(tokens)} tokens ({len(tokens)} sizes), on {gpu_of(transfer)}"
    )


def transfer_links(transfer: Mapping[str, Any]) -> pd.DataFrame:
    """Long table, one row per block size x direction x method: block (label), block_bytes,
    direction, method, GB/s."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "block": f"{link['block_bytes'] // 1024} KiB\n{link['block_tokens']} tokens",
                "block_bytes": link["block_bytes"],
                "direction": label,
                "method": METHODS[key],
                "GB/s": link[direction][key],
            }
            for link in transfer["links"]
            for direction, label in DIRECTIONS.items()
            for key in METHODS
        ]
    )


def transfer_ratios(transfer: Mapping[str, Any]) -> pd.DataFrame:
    """Batched / bulk and batched / per block, indexed by (block bytes, direction)."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "block bytes": link["block_bytes"],
                "direction": label,
                "batched / bulk": link[direction]["hkv_vs_bulk"],
                "batched / per block": link[direction]["hkv_vs_per_block"],
            }
            for link in transfer["links"]
            for direction, label in DIRECTIONS.items()
        ]
    ).set_index(["block bytes", "direction"])


def worst_batched_vs_bulk(ratios: pd.DataFrame) -> dict[str, float]:
    """Per direction label, the smallest batched / bulk ratio over block sizes."""
    return {
        label: float(ratios.xs(label, level="direction")["batched / bulk"].min())
        for label in DIRECTIONS.values()
    }


def disk_table(transfer: Mapping[str, Any]) -> pd.DataFrame:
    """The disk tier against sequential writes and reads, indexed by block_tokens."""
    import pandas as pd

    return pd.DataFrame(transfer["disk"]).set_index("block_tokens")[DISK_COLUMNS]


def disk_worst(disk: pd.DataFrame) -> float:
    """The disk tier's worst ratio to sequential I/O, writes and reads together."""
    return float(disk[["write_vs_sequential", "read_vs_sequential"]].min().min())


def transfer_summary(transfer: Mapping[str, Any]) -> dict[str, Any]:
    """The notebook's `transfer` results: the worst ratios computed here beside the file's own
    summary of them, and batched / per block at the smallest block."""
    ratios = transfer_ratios(transfer)
    return {
        "machine": gpu_of(transfer),
        "worst_batched_vs_bulk": worst_batched_vs_bulk(ratios),
        "file_worst_batched_vs_bulk": transfer["summary"]["batched_vs_bulk_worst_at_64KiB_plus"],
        "batched_vs_per_block_smallest_block": {
            label: float(ratios.xs(label, level="direction")["batched / per block"].iloc[0])
            for label in DIRECTIONS.values()
        },
        "disk_vs_sequential_worst": disk_worst(disk_table(transfer)),
        "file_disk_vs_sequential_worst": transfer["summary"]["disk_vs_sequential_worst"],
    }
