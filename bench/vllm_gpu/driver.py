"""`drive`: a plan's configurations, one subprocess each, on free GPUs, until a deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.vllm_gpu import ROOT
from bench.vllm_gpu.capacity import plan_check
from bench.vllm_gpu.plans import Config, config_key, plan
from hkv.report import provenance, write_json
from hkv.sim.anchor import Workload, workload_summary


def measure_link() -> dict:
    """Pinned host<->GPU copy bandwidth (GB/s, 1e9 bytes) of this machine, 256 MiB copies."""
    import torch

    n = 256 << 20
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    out = {"gpu_name": torch.cuda.get_device_name(0), "torch": torch.__version__}
    out["gpus"] = torch.cuda.device_count()
    for label, copy in (
        ("h2d_gbps", lambda: dev.copy_(host)),
        ("d2h_gbps", lambda: host.copy_(dev)),
    ):
        copy()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(10):
            copy()
        torch.cuda.synchronize()
        out[label] = round(10 * n / (time.perf_counter() - start) / 1e9, 1)
    return out


MODULE = ("-m", "bench.vllm_gpu")
"""Children run as `python -m bench.vllm_gpu <mode>` in the repository's root."""


def command_for(config: Config, out: Path, model: Path) -> list[str]:
    """The child command of one configuration (`capacity` or `run`), writing to `out`."""
    if config.kind == "capacity":
        return [
            *(sys.executable, *MODULE, "capacity", "--tp", str(config.tp)),
            *("--cpu-gib", str(config.cpu_gib), "--out", str(out), "--model", str(model)),
        ]
    return [
        *(sys.executable, *MODULE, "run", "--policy", ",".join(config.policies)),
        *("--cpu-gib", str(config.cpu_gib), "--variant", config.variant),
        *("--repeats", str(config.repeats), "--tp", str(config.tp)),
        *("--gpu-kv-gib", str(config.gpu_kv_gib), "--out", str(out), "--model", str(model)),
    ]


@dataclass
class Running:
    index: int
    config: Config
    proc: subprocess.Popen
    devices: list[str]
    started: float


def drive(args) -> dict:
    """Run a plan's configurations in subprocesses, each on its own GPUs, until `deadline_s`.

    Configurations start in plan order, each as soon as enough of `--devices` are free (one per
    tensor-parallel rank). The results JSON is rewritten atomically after each. With `--resume`,
    the configurations already done in `--out` are kept and not run again.
    """
    from hkv.policies import policy_names

    deadline = time.time() + args.deadline_s
    configs = plan(args.plan, args.best, policy_names(online_only=True))
    if args.only:
        configs = configs[: args.only]
    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if args.resume and Path(args.out).exists():
        result, done = resumed(json.loads(Path(args.out).read_text()), configs)
    else:  # measures the link: only for a new results file
        result, done = fresh_result(args, configs), set()
    free = [d.strip() for d in args.devices.split(",") if d.strip()]
    queue = queued(configs, done, len(free), result)
    running: list[Running] = []
    while queue or running:
        free = start_ready(queue, free, running, args, (work, deadline, result))
        time.sleep(1.0)
        free = free + reap(running, work, deadline, result, args.out)
        if queue and time.time() > deadline:
            for _, config in queue:
                result["configs"].append({**asdict(config), "status": "skipped: deadline"})
            queue.clear()
    write_json(args.out, result)
    return result


def queued(configs: list[Config], done: set[str], num_devices: int, result: dict) -> list:
    """`(index, config)` of the configurations to run; those needing more GPUs than
    `--devices` gives are recorded as skipped."""
    queue = []
    for index, config in enumerate(configs):
        if config.tp > num_devices:  # would wait for GPUs that --devices does not give
            status = f"skipped: needs {config.tp} GPUs, --devices gives {num_devices}"
            result["configs"].append({**asdict(config), "status": status})
        elif config_key(config) not in done:
            queue.append((index, config))
    return queue


def start_ready(queue: list, free: list[str], running: list[Running], args, state) -> list[str]:
    """Start queued configurations, in order, while enough devices are free (or skip them when
    too little time is left); returns the devices still free."""
    work, deadline, result = state
    while queue and len(free) >= queue[0][1].tp:
        index, config = queue.pop(0)
        if deadline - time.time() < args.min_config_s:
            result["configs"].append({**asdict(config), "status": "skipped: deadline"})
            continue
        devices, free = free[: config.tp], free[config.tp :]
        command = command_for(config, work / f"run{index:02d}.json", args.model)
        env = os.environ | {"CUDA_VISIBLE_DEVICES": ",".join(devices)}
        with open(work / f"run{index:02d}.log", "w") as log:  # the child keeps its own copy
            proc = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=ROOT,
                start_new_session=True,
            )
        running.append(Running(index, config, proc, devices, time.time()))
    return free


def reap(running: list[Running], work: Path, deadline: float, result: dict, out) -> list[str]:
    """Collect the finished children (and kill the late ones); returns their devices."""
    freed: list[str] = []
    for job in list(running):
        code = job.proc.poll()
        late = time.time() > deadline
        if code is None and not late:
            continue
        if code is None:
            os.killpg(job.proc.pid, signal.SIGKILL)
            job.proc.wait()
        status = "killed: deadline" if code is None else "done" if code == 0 else f"exit {code}"
        running.remove(job)
        freed += job.devices
        seconds = time.time() - job.started
        run_out = work / f"run{job.index:02d}.json"
        collect(result, job.config, run_out, work / f"run{job.index:02d}.log", status, seconds)
        write_json(out, result)
    return freed


def fresh_result(args, configs: list[Config]) -> dict:
    """A new results file: provenance (the link measured by a `link` child), the workloads,
    the plan, and empty `configs` and `runs`."""
    link = subprocess.run(
        [sys.executable, *MODULE, "link"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    measured = json.loads(link.stdout.strip().splitlines()[-1]) if link.returncode == 0 else {}
    command = f"python -m bench.vllm_gpu drive --plan {args.plan} --devices {args.devices}"
    parameters = {
        "plan": args.plan,
        "best": args.best,
        "devices": args.devices,
        "deadline_s": args.deadline_s,
        "model": str(args.model),
    }
    head = provenance(command, parameters, packages=("hkv", "vllm", "torch"), machine=measured)
    return head | {
        "workload": {
            "text": workload_summary(Workload()),
            "mm": workload_summary(Workload(images=True)),
        },
        "plan": [asdict(c) for c in configs],
        "configs": [],
        "runs": [],
    }


def resumed(old: dict, configs: list[Config]) -> tuple[dict, set[str]]:
    """`old` results kept for the configurations of `configs` that finished; their keys."""
    wanted = {config_key(c) for c in configs}
    done = set()
    for entry in old.get("configs", []):
        fields = {k: entry[k] for k in Config.__dataclass_fields__ if k in entry}
        fields["policies"] = tuple(fields.get("policies", ()))
        try:
            key = config_key(Config(**fields))
        except TypeError:
            continue
        if entry.get("status") == "done" and key in wanted:
            done.add(key)
    keep = [e for e in old.get("configs", []) if e.get("status") == "done"]
    old["configs"] = keep
    old["runs"] = [r for r in old.get("runs", []) if r.get("config_key") in done]
    return old, done


CONFIG_FIELDS = (
    *("t_import_s", "t_engine_init_s", "t_warmup_s", "cpu_blocks", "gpu_blocks", "block_bytes"),
    *("policy_info", "timer_overhead", "error"),
)


def collect(result: dict, config: Config, out: Path, log: Path, status: str, seconds: float):
    """Fold one configuration's file into the results (`configs`, and a `runs` row a run)."""
    data = json.loads(out.read_text()) if out.exists() else {}
    if status == "done" and data.get("status") != "done":
        status = "incomplete"
    key = config_key(config)
    entry = {**asdict(config), "status": status, "process_s": round(seconds, 1)}
    entry |= {k: data[k] for k in CONFIG_FIELDS if k in data}
    result["configs"].append(entry)
    if "vllm_version" in data:
        result["versions"]["vllm"] = data["vllm_version"]
    if config.kind == "capacity" and data.get("status") == "done":
        result["plan_check"] = plan_check(data, log.read_text() if log.exists() else "")
    for one in data.get("repeats", []):
        rows = one["requests"]  # submission order, the same as `request_sequence`
        result["runs"].append(
            {
                "policy": one.get("policy", config.policies[0]),
                "cpu_gib": config.cpu_gib,
                "variant": config.variant,
                "tp": config.tp,
                "repeat": one["repeat"],
                "config_key": key,
                **one["summary"],
                "cached_tokens": [r["cached_tokens"] for r in rows],
                "ttft_s": [None if r["ttft_s"] is None else round(r["ttft_s"], 5) for r in rows],
            }
        )
