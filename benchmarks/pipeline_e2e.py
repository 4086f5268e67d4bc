"""The whole pipeline end to end, as a user runs it: time, bytes written and memory, overall and per stage.

One `stackcurate run` of every stage (ingest, license, language, filter, decontaminate, dedup, pii, format,
tokenize) on `stackcurate sample` of this machine's installed code (420 MB by default, built once into
`<work>/sample`), with a pipeline YAML written into `<work>` that mirrors `pipelines/demo.yaml` (its keys
only, plus `pii.model`: `none` for the "patterns" variant, `auto`, the demo's default, for "model").
Meant to compare the code before and after a refactor, one run after the other on the same machine.

Per run it measures:
- wall time of the CLI process (process start, Ray start and shutdown included);
- bytes written, twice: (a) the size of the output folder at the end (sum of file sizes, per top-level
  folder and in total); (b) the sum of `write_bytes` (/proc/<pid>/io) over the run's process tree, i.e.
  the CLI and every descendant (the embedded Ray's GCS, raylet and workers), the last value seen per process,
  so temporary files deleted during the run count too;
- peak memory: the peak of the summed RSS of the tree, and the largest single process's RSS.
The tree is sampled every 0.2 s with psutil. Each sample belongs to the stage running at that moment: the
first stage, in pipeline order, whose output folder has no `_SUCCESS` yet ("(exit)" once all have one).
A stage's wall time runs from its first sample as the current stage to the first sample that sees its
`_SUCCESS`; a stage finished together with an earlier one (fused, or within 0.2 s) gets 0 s and no peak.

`--src DIR` runs the CLI of another source tree: `python -m stackcurate.cli` with `PYTHONPATH=DIR` and DIR as
the working directory (Python puts the working directory before PYTHONPATH, and Ray workers take the driver's
`sys.path`). Each invocation first checks that the CLI and a Ray worker both import `stackcurate` from DIR.
The before tree:
    mkdir -p /work/before_src && git -C /work/main archive 25b4e11 | tar -x -C /work/before_src

Full benchmark (420 MB; run one after the other, nothing else on the machine):
    python benchmarks/pipeline_e2e.py --label before --variant patterns --src /work/before_src
    python benchmarks/pipeline_e2e.py --label after --variant patterns
    python benchmarks/pipeline_e2e.py --label before --variant model --src /work/before_src
    python benchmarks/pipeline_e2e.py --label after --variant model
Fixed cost of one stage (its own CLI command, `--runner local`, then the embedded Ray with `--workers 2`), on
the input a completed run kept (`<work>/run-<label>-<variant>/<previous stage>`; a version that fuses the
previous stage needs that run made with `--keep-intermediate`):
    python benchmarks/pipeline_e2e.py --label before --fixed-cost dedup --src /work/before_src
    python benchmarks/pipeline_e2e.py --label after --fixed-cost dedup
The first run from a tree also writes its bytecode and numba caches (a 20 MB run took 91 s the first time,
51 s the next), so warm each tree first with the small smoke test (20 MB, results kept out of
benchmarks/results); the `--label after` one warms this tree:
    python benchmarks/pipeline_e2e.py --mb 20 --work work/bench_e2e_small \\
        --results work/bench_e2e_small/pipeline_e2e.json --label before --src /work/before_src

Other options: `--extra-args "--workers 2"` passes flags to the CLI command; `--keep-intermediate` adds that
flag to `stackcurate run` (a version that has it). Results merge into `benchmarks/results/pipeline_e2e.json`
under runs/<label>/<variant> and fixed_cost/<label>/<stage>; the script refuses to merge runs on a
different input into one file.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("ingest", "license", "language", "filter", "decontaminate", "dedup", "pii", "format", "tokenize")
EXIT = "(exit)"  # samples taken after the last stage's _SUCCESS: Ray shutdown, process exit
INTERVAL_S = 0.2
MB = 1e6
TAIL_LINES = 40
PII_MODEL = {"patterns": "none", "model": "auto"}  # "auto": the model shipped with stackcurate (the demo's)

# A Ray worker reports where it imports stackcurate from, under the CLI's environment.
WHERE_SNIPPET = """
import ray, stackcurate
ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
where = ray.remote(lambda: __import__("stackcurate").__file__)
print(stackcurate.__file__)
print(ray.get(where.remote()))
"""


# ---------------------------------------------------------------------------------------------------------
# The CLI of a source tree


def cli_env(src: Path) -> dict[str, str]:
    """The environment every CLI run gets: the source tree on PYTHONPATH, no telemetry, no downloads."""
    return {
        **os.environ,
        "PYTHONPATH": str(src),
        "RAY_USAGE_STATS_ENABLED": "0",
        "TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS": "",
    }


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "stackcurate.cli", *args]


def check_src(src: Path) -> dict[str, str]:
    """Where the CLI's process and a Ray worker import stackcurate from; fail unless both are under `src`."""
    done = subprocess.run(
        [sys.executable, "-c", WHERE_SNIPPET],
        env=cli_env(src),
        cwd=src,
        capture_output=True,
        text=True,
        check=True,
    )
    driver, worker = done.stdout.split()[-2:]
    for name, file in (("CLI", driver), ("Ray worker", worker)):
        if not Path(file).resolve().is_relative_to(src.resolve()):
            sys.exit(f"the {name} imports stackcurate from {file}, not from {src}")
    return {"cli": driver, "ray_worker": worker}


# ---------------------------------------------------------------------------------------------------------
# Input and pipeline


def build_sample(work: Path, mb: float, src: Path) -> Path:
    """`<work>/sample`: `stackcurate sample` of about `mb` MB, built once (by the `src` tree's CLI)."""
    folder = work / "sample"
    if not (folder / "metadata" / "00000.parquet").exists():
        args = ("sample", str(folder), "--max-mb", str(mb), "--max-files", "1000000")
        subprocess.run(cli_command(*args), env=cli_env(src), cwd=src, check=True)
    return folder


def sample_size(folder: Path) -> dict[str, float | int | str]:
    """Files and raw (uncompressed) MB of the sample, from its Stack v2 metadata."""
    table = pq.read_table(folder / "metadata", columns=["length_bytes"])
    raw = sum(table.column("length_bytes").to_pylist())
    return {"folder": str(folder), "files": table.num_rows, "raw_mb": round(raw / MB, 1)}


def pipeline_blocks(sample: Path, src: Path, variant: str) -> dict[str, dict]:
    """demo.yaml's stage blocks, same keys, on the benchmark sample; filter tables from the `src` tree."""
    return {
        "ingest": {
            "metadata": [str(sample / "metadata" / "*.parquet")],
            "content": str(sample),
            "bundles": [str(sample / "vault" / "*")],
        },
        "license": {},
        "language": {"languages": str(src / "filters" / "languages" / "starcoder2_smol_v1.txt")},
        "filter": {"rules": str(src / "filters" / "starcoder2_v1.yaml")},
        "decontaminate": {"benchmarks": ["humaneval"]},
        "dedup": {"verify": True},
        "pii": {
            "entities": ["EMAIL", "IP_ADDRESS", "KEY", "PASSWORD", "NAME", "USERNAME"],
            "redact": ["EMAIL", "IP_ADDRESS", "KEY", "PASSWORD", "NAME"],
            "model": PII_MODEL[variant],
        },
        "format": {},
        "tokenize": {},
    }


def write_yaml(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ---------------------------------------------------------------------------------------------------------
# Measuring a process tree


@dataclass
class StageSpan:
    """One stage's samples: from the first where it is current to the first that sees its _SUCCESS."""

    start: float | None = None
    end: float | None = None
    peak_rss_total: int = 0

    def summary(self, exit_time: float) -> dict:
        if self.start is None:  # finished with an earlier stage: never the current one
            return {"wall_s": 0.0, "peak_rss_total_mb": None}
        end = self.end if self.end is not None else exit_time
        return {"wall_s": round(end - self.start, 2), "peak_rss_total_mb": round(self.peak_rss_total / MB, 1)}


def process_tree(root: psutil.Process, seen: dict[tuple[int, float], psutil.Process]) -> list[psutil.Process]:
    """`root` and its descendants now, plus every process in `seen` (updated) that still runs: a worker
    reparented away from the tree still counts."""
    try:
        found = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        found = []
    for proc in found:
        try:
            seen.setdefault((proc.pid, proc.create_time()), proc)
        except psutil.NoSuchProcess:
            pass
    return [proc for proc in seen.values() if proc.is_running()]


@dataclass
class TreeMonitor:
    """Samples the process tree of `root` and attributes each sample to the stage running in `out`."""

    root: psutil.Process
    out: Path
    stages: tuple[str, ...]
    started: float = field(default_factory=time.perf_counter)
    procs: dict[tuple[int, float], psutil.Process] = field(default_factory=dict)
    write_bytes: dict[tuple[int, float], int] = field(default_factory=dict)
    cancelled_bytes: dict[tuple[int, float], int] = field(default_factory=dict)
    peak_rss_total: int = 0
    peak_rss_largest: int = 0
    largest_name: str = ""
    samples: int = 0
    spans: dict[str, StageSpan] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.spans = {stage: StageSpan() for stage in (*self.stages, EXIT)}

    def sample(self) -> None:
        now = time.perf_counter() - self.started
        total, largest, largest_name = 0, 0, ""
        for proc in process_tree(self.root, self.procs):
            try:
                with proc.oneshot():
                    key = (proc.pid, proc.create_time())
                    rss = proc.memory_info().rss
                    io = proc.io_counters()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            self.write_bytes[key] = io.write_bytes
            self.cancelled_bytes[key] = getattr(io, "cancelled_write_bytes", 0)
            total += rss
            if rss > largest:
                largest, largest_name = rss, process_name(proc)
        self.samples += 1
        self.peak_rss_total = max(self.peak_rss_total, total)
        if largest > self.peak_rss_largest:
            self.peak_rss_largest, self.largest_name = largest, largest_name
        self.attribute(now, total)

    def attribute(self, now: float, rss_total: int) -> None:
        done = {stage: (self.out / "_state" / stage / "SUCCESS").exists() for stage in self.stages}
        for stage, finished in done.items():
            if finished and self.spans[stage].end is None:
                self.spans[stage].end = now
        current = next((stage for stage in self.stages if not done[stage]), EXIT)
        span = self.spans[current]
        if span.start is None:
            span.start = now
        span.peak_rss_total = max(span.peak_rss_total, rss_total)

    def summary(self, wall: float) -> dict:
        return {
            "bytes_written_io": sum(self.write_bytes.values()),
            "bytes_cancelled_io": sum(self.cancelled_bytes.values()),
            "peak_rss_total_mb": round(self.peak_rss_total / MB, 1),
            "peak_rss_largest_mb": round(self.peak_rss_largest / MB, 1),
            "largest_process": self.largest_name,
            "processes_seen": len(self.procs),
            "samples": self.samples,
            "stages": {stage: span.summary(wall) for stage, span in self.spans.items()},
        }


def process_name(proc: psutil.Process) -> str:
    """The program's name as its command line shows it now: Ray workers retitle themselves `ray::<task>`."""
    try:
        command = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        command = []
    return Path(command[0]).name if command else proc.name()


def measure(command: list[str], *, src: Path, out: Path, stages: tuple[str, ...], log: Path) -> dict:
    """Run `command` (the CLI of `src`), sampling its process tree every INTERVAL_S until it exits."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        started = time.perf_counter()
        proc = subprocess.Popen(command, env=cli_env(src), cwd=src, stdout=sink, stderr=subprocess.STDOUT)
        monitor = TreeMonitor(psutil.Process(proc.pid), out, stages, started=started)
        while proc.poll() is None:
            monitor.sample()
            time.sleep(INTERVAL_S)
        wall = time.perf_counter() - started
    monitor.attribute(wall, 0)  # markers written between the last sample and the exit
    if proc.returncode != 0:
        sys.exit(f"{shlex.join(command)} failed ({proc.returncode}); see {log}\n" + "\n".join(tail(log)))
    lines = tail(log, lines=None)
    return {
        "wall_s": round(wall, 2),
        **monitor.summary(wall),
        "stage_lines": [line for line in lines if is_stage_line(line, stages)],
        "output_tail": lines[-TAIL_LINES:],
    }


def is_stage_line(line: str, stages: tuple[str, ...]) -> bool:
    """A stage's summary line, `<stage>: ...` (not a progress bar, not a bare config header)."""
    stage, _, rest = line.partition(":")
    return stage in stages and bool(rest.strip()) and "%|" not in rest


def tail(log: Path, lines: int | None = TAIL_LINES) -> list[str]:
    """The last lines the CLI printed, each as last shown (progress bars redraw with carriage returns)."""
    shown = [line.split("\r")[-1].rstrip() for line in log.read_text(errors="replace").splitlines()]
    shown = [line for line in shown if line]
    return shown if lines is None else shown[-lines:]


def disk_bytes(out: Path) -> dict:
    """Sizes of the files under `out` (bytes), per top-level entry and in total."""
    per_entry = {}
    for entry in sorted(out.iterdir()):
        files = entry.rglob("*") if entry.is_dir() else [entry]
        per_entry[entry.name] = sum(path.stat().st_size for path in files if path.is_file())
    return {"total": sum(per_entry.values()), "per_folder": per_entry}


# ---------------------------------------------------------------------------------------------------------
# The two modes


def run_pipeline(args: argparse.Namespace, sample: Path) -> dict:
    """One whole-pipeline run on a clean output folder."""
    name = f"run-{args.label}-{args.variant}"
    out = args.work / name
    blocks = pipeline_blocks(sample, args.src, args.variant)
    config = write_yaml(args.work / f"{name}.yaml", {"out": str(out), "stages": blocks})
    shutil.rmtree(out, ignore_errors=True)
    flags = ["--keep-intermediate"] if args.keep_intermediate else []
    command = cli_command("run", str(config), "--overwrite", *flags, *shlex.split(args.extra_args))
    result = measure(command, src=args.src, out=out, stages=tuple(blocks), log=args.work / f"{name}.log")
    disk = disk_bytes(out)
    return {
        "command": shlex.join(command),
        "wall_s": result.pop("wall_s"),
        "bytes_written_disk": disk,
        **result,
    }


def run_fixed_cost(args: argparse.Namespace, sample: Path) -> dict:
    """The stage's own CLI command on a completed run's kept rows: local runner, then Ray with 2 workers."""
    stage = args.fixed_cost
    from_run = args.from_run or args.work / f"run-{args.label}-{args.variant}"
    source = from_run / STAGES[STAGES.index(stage) - 1]
    shards = sorted(source.glob("*.parquet"))
    if not shards:
        sys.exit(f"{source} holds no kept rows: run the pipeline with --keep-intermediate first")
    block = pipeline_blocks(sample, args.src, args.variant)[stage]
    config = write_yaml(args.work / f"fixed-{stage}-{args.label}.yaml", block)
    result = {
        "from_run": str(from_run),
        "input": str(source),
        "input_mb": round(sum(path.stat().st_size for path in shards) / MB, 1),
        "input_rows": sum(pq.ParquetFile(path).metadata.num_rows for path in shards),
    }
    for runner, flags in (("local", ["--runner", "local"]), ("ray_2_workers", ["--workers", "2"])):
        out = args.work / f"fixed-{stage}-{args.label}-{runner}"
        shutil.rmtree(out, ignore_errors=True)
        command = cli_command(stage, "--out", str(out), "--input", str(source), "--config", str(config))
        command += ["--overwrite", *flags, *shlex.split(args.extra_args)]
        measured = measure(command, src=args.src, out=out, stages=(stage,), log=out.with_suffix(".log"))
        result[runner] = {
            "command": shlex.join(command),
            "wall_s": measured["wall_s"],
            "peak_rss_total_mb": measured["peak_rss_total_mb"],
            "stage_lines": measured["stage_lines"],
            "output_tail": measured["output_tail"],
        }
        print(f"fixed cost {stage} {runner}: {measured['wall_s']:.1f} s", flush=True)
    return result


# ---------------------------------------------------------------------------------------------------------
# Results


def machine() -> dict:
    return {
        "cores": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def merge(path: Path, size: dict, section: str, label: str, key: str, entry: dict) -> None:
    """Put `entry` at results[section][label][key]; refuse a file whose runs used another input."""
    results = json.loads(path.read_text()) if path.exists() else {}
    known = results.get("input")
    if known and (known["files"], known["raw_mb"]) != (size["files"], size["raw_mb"]):
        sys.exit(f"{path} holds runs on another input ({known}); pass --results for this one")
    results["input"] = size
    results.setdefault(section, {}).setdefault(label, {})[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")


def report(entry: dict) -> None:
    """A short summary of one pipeline run on stdout."""
    print(
        f"wall {entry['wall_s']:.1f} s, disk {entry['bytes_written_disk']['total'] / MB:.1f} MB, "
        f"io {entry['bytes_written_io'] / MB:.1f} MB, peak RSS {entry['peak_rss_total_mb']:.0f} MB "
        f"(largest process {entry['peak_rss_largest_mb']:.0f} MB, {entry['largest_process']})"
    )
    for stage, span in entry["stages"].items():
        peak = "-" if span["peak_rss_total_mb"] is None else f"{span['peak_rss_total_mb']:.0f} MB"
        print(f"  {stage:<14} {span['wall_s']:7.1f} s  peak RSS {peak}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="name of the result, e.g. before or after")
    parser.add_argument("--variant", choices=sorted(PII_MODEL), default="patterns", help="pii: model none / auto")
    parser.add_argument("--src", type=Path, default=ROOT, help="source tree whose CLI runs (default: this one)")
    parser.add_argument("--mb", type=float, default=420.0, help="size of the sample, built once")
    parser.add_argument("--work", type=Path, default=ROOT / "work" / "bench_e2e")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "pipeline_e2e.json")
    parser.add_argument("--extra-args", default="", help='flags for the CLI command, e.g. "--workers 2"')
    parser.add_argument("--keep-intermediate", action="store_true", help="pass --keep-intermediate to run")
    parser.add_argument("--fixed-cost", choices=STAGES[1:], help="time this stage alone, local and Ray")
    parser.add_argument("--from-run", type=Path, help="completed run for --fixed-cost (default: this label's)")
    args = parser.parse_args()
    args.src, args.work = args.src.resolve(), args.work.resolve()

    imported_from = check_src(args.src)
    print(f"stackcurate from {imported_from['cli']} (CLI) and {imported_from['ray_worker']} (Ray worker)")
    sample = build_sample(args.work, args.mb, args.src)
    size = sample_size(sample)
    print(f"input: {size['files']:,} files, {size['raw_mb']:.1f} MB raw", flush=True)
    common = {"src": str(args.src), "imported_from": imported_from, "machine": machine()}
    if args.fixed_cost:
        entry = {**common, **run_fixed_cost(args, sample)}
        merge(args.results, size, "fixed_cost", args.label, args.fixed_cost, entry)
    else:
        entry = {**common, "variant": args.variant, **run_pipeline(args, sample)}
        merge(args.results, size, "runs", args.label, args.variant, entry)
        report(entry)
    print(f"results: {args.results}")


if __name__ == "__main__":
    main()
