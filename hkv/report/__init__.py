"""What the notebooks and benchmarks show: results files with one provenance schema, and the
tables and figures built from them. Imports only the standard library and numpy at import
time; pandas, matplotlib and seaborn are imported by the functions that draw or tabulate."""

from hkv.report.notebook import quiet_vllm_logging, save_notebook_results
from hkv.report.provenance import (
    PROVENANCE_KEYS,
    machine_info,
    package_versions,
    provenance,
    save_results,
    write_json,
)

__all__ = [
    "PROVENANCE_KEYS",
    "machine_info",
    "package_versions",
    "provenance",
    "quiet_vllm_logging",
    "save_notebook_results",
    "save_results",
    "write_json",
]
