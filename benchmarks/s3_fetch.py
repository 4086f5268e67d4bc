"""How fast `stackcurate ingest` fetches a Software Heritage-style content store over S3 at real latency (issue 17).

All on loopback. The content store is `stackcurate sample` of this machine's installed code, plus the C headers of
/usr/include, the JavaScript of /usr/lib/node_modules and Debian's /usr/lib/python3 (the Python installation alone
has fewer than 100,000 files), built once into `<work>/store/swh`: The Stack v2 metadata Parquet and
`content/<sha1>` gzip objects. `rclone serve s3 <work>/store` serves it as bucket `swh`, anonymously. A proxy
(asyncio, in its own process) sits in front of rclone and holds every HTTP request for a fixed delay before
forwarding it, as a store one such round trip away would; a new connection costs one more delay (the TCP
handshake; no TLS), and responses stream back at once. (The kernel here has no netem.)
The metadata the clients get (`<work>/metadata-<n>/00000.parquet`) lists each object once, only objects ingest
fetches (`length_bytes` within its 1 MB cap), the first `--max-objects` of them.

Per latency (default 0, 20 and 50 ms) it measures, on the same objects:
- `s5cmd`, the anchor: `s5cmd --no-sign-request --numworkers 64 run <file>`, one `cp` per object; its rate per
  core divides by this machine's cores (it uses them all);
- `stackcurate ingest` as a user runs it (`--content s3://swh --s3-endpoint <proxy> --workers 2`): wall time of
  the CLI, and the stage's own time from its summary line (`ingest: N in, ... in X s`), which the per-core
  rates use (objects / stage seconds / workers).
At 0 ms both also run straight against rclone (`direct`), to show what the proxy costs. The CPU floor is what a
worker pays per object once it has the bytes: `gunzip_bounded` + `sha1_hex` + `decode` (ingest's own functions)
of the same objects from memory, in this process, on one core. The proxy counts the requests and connections it
forwards, so each row through it also says how many of each a client makes per object.

    python benchmarks/s3_fetch.py --label before --src /work/before_s3
    python benchmarks/s3_fetch.py --label after
    python benchmarks/s3_fetch.py --label smoke --max-objects 5000 --results work/bench_s3/smoke.json

`--src DIR` runs another source tree's stackcurate (PYTHONPATH=DIR, DIR as the working folder; the floor and the
corpus build import it from DIR too), as pipeline_e2e.py. Results merge into benchmarks/results/s3_fetch.json by
label; the script refuses to merge runs on another set of objects into one file. Keep the machine otherwise idle:
rclone, the proxy and the client share its cores.
"""

import argparse
import asyncio
import datetime
import json
import multiprocessing as mp
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections import deque
from multiprocessing.sharedctypes import Synchronized, SynchronizedArray
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "swh"
EXTRA_ROOTS = (  # real code beyond the Python installation, named like stackcurate.sample's roots
    ("usr-include", Path("/usr/include")),
    ("node-modules", Path("/usr/lib/node_modules")),
    ("debian-python3", Path("/usr/lib/python3")),
)
MAX_BYTES, BOMB_RATIO = 1_000_000, 100.0  # ingest's defaults: larger files are dropped from metadata, not fetched
MB = 1e6
CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
STAGE_LINE = re.compile(r"^ingest: ([\d,]+) in, .* in ([\d.]+) s$", re.MULTILINE)


# ---------------------------------------------------------------------------------------------------------
# Corpus


def build_store(store: Path) -> Path:
    """`<store>/swh`: `stackcurate sample` over the Python installation and EXTRA_ROOTS, built once."""
    bucket = store / BUCKET
    if not (bucket / "metadata" / "00000.parquet").exists():
        from stackcurate import sample  # the --src tree's, on sys.path by now

        python_roots = sample._roots
        sample._roots = lambda: [*python_roots(), *EXTRA_ROOTS]
        info = sample.build_sample(bucket, max_bytes=10**12, max_files=10**7)
        print(f"built {bucket}: {info.files:,} files, {info.bytes / MB:.0f} MB", flush=True)
    return bucket


def select_objects(bucket: Path, work: Path, max_objects: int | None) -> tuple[Path, list[str], dict]:
    """Metadata listing each fetchable object once (the first `max_objects`), their blob ids and sizes."""
    table = pq.read_table(bucket / "metadata")
    table = table.filter(pc.less_equal(table["length_bytes"], MAX_BYTES))
    seen: set[str] = set()
    keep = []
    for i, blob in enumerate(table["blob_id"].to_pylist()):
        if blob not in seen:
            seen.add(blob)
            keep.append(i)
    table = table.take(keep[:max_objects])
    folder = work / f"metadata-{table.num_rows}"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / "00000.parquet")
    blobs = table["blob_id"].to_pylist()
    size = {
        "objects": len(blobs),
        "compressed_bytes": sum((bucket / "content" / blob).stat().st_size for blob in blobs),
        "raw_bytes": pc.sum(table["length_bytes"]).as_py(),
    }
    return folder, blobs, size


# ---------------------------------------------------------------------------------------------------------
# The latency proxy (its own process)


class Pipe(asyncio.Protocol):
    """One direction of a proxied connection: what it receives goes to `peer`, with back-pressure both ways."""

    def __init__(self, peer: "Pipe | None" = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer = peer

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        if self.peer is not None:
            self.peer.peer = self

    def data_received(self, data: bytes) -> None:
        self.peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    def pause_writing(self) -> None:
        self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        self.peer.transport.resume_reading()


class DelayedRequests(Pipe):
    """The client's side: forwards each HTTP request `delay` seconds after its head arrived, in order.

    Requests are framed by their head (up to the blank line) and a Content-Length body; the clients here send
    no chunked bodies. Protocols rather than streams: less CPU per request, so the proxy keeps up.
    """

    def __init__(self, target: int, delay: float, count: SynchronizedArray) -> None:
        super().__init__()
        self.target, self.delay, self.count = target, delay, count
        self.buffer, self.body_left = b"", 0
        self.queue: deque[tuple[float, bytes]] = deque()

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        transport.pause_reading()
        self.connecting = asyncio.ensure_future(self.connect())  # referenced, so the task is not collected

    async def connect(self) -> None:
        """Open the upstream connection one `delay` later: a new connection costs the handshake's round trip."""
        self.count[1] += 1
        await asyncio.sleep(self.delay)
        loop = asyncio.get_running_loop()
        try:
            upstream, _ = await loop.create_connection(lambda: Pipe(peer=self), "127.0.0.1", self.target)
        except OSError:
            self.transport.close()
            return
        if self.transport.is_closing():  # the client left first
            upstream.close()
        else:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        ready = b""
        while self.buffer:
            if self.body_left:
                body, self.buffer = self.buffer[: self.body_left], self.buffer[self.body_left :]
                ready, self.body_left = ready + body, self.body_left - len(body)
                continue
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head, self.buffer = self.buffer[: end + 4], self.buffer[end + 4 :]
            length = CONTENT_LENGTH.search(head)
            ready, self.body_left = ready + head, int(length[1]) if length else 0
            self.count[0] += 1
        if ready:
            loop = asyncio.get_running_loop()
            self.queue.append((loop.time() + self.delay, ready))
            if len(self.queue) == 1:
                loop.call_at(self.queue[0][0], self.flush)

    def flush(self) -> None:
        """Send what is due, then wait for the next (so requests stay in order)."""
        loop = asyncio.get_running_loop()
        while self.queue and self.queue[0][0] <= loop.time():
            self.peer.transport.write(self.queue.popleft()[1])
        if self.queue:
            loop.call_at(self.queue[0][0], self.flush)


async def serve_proxy(target: int, delay: float, port: Synchronized, count: SynchronizedArray) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: DelayedRequests(target, delay, count), "127.0.0.1", 0, backlog=4096)
    port.value = server.sockets[0].getsockname()[1]
    await server.serve_forever()


def run_proxy(target: int, delay_ms: float, port: Synchronized, count: SynchronizedArray) -> None:
    asyncio.run(serve_proxy(target, delay_ms / 1000, port, count))


class Proxy:
    """The proxy process in front of rclone at `target`; `count` holds the requests and connections it forwarded."""

    def __init__(self, target: int, delay_ms: float) -> None:
        self.port, self.count = mp.Value("q", 0), mp.Array("q", 2)
        self.process = mp.Process(target=run_proxy, args=(target, delay_ms, self.port, self.count), daemon=True)
        self.process.start()
        while not self.port.value:
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.port.value}"

    def stop(self) -> None:
        self.process.terminate()
        self.process.join()


# ---------------------------------------------------------------------------------------------------------
# Clients


def start_rclone(store: Path, probe: str) -> tuple[subprocess.Popen, str]:
    """`rclone serve s3` of `store` (anonymous, read-only, no ETag hashing) on a free port, once it answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = ["rclone", "serve", "s3", str(store), "--addr", f"127.0.0.1:{port}", "--read-only"]
    server = subprocess.Popen([*command, "--etag-hash", "", "--dir-cache-time", "1h", "--log-level", "ERROR"])
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"{url}/{BUCKET}/content/{probe}", timeout=30):
                return server, url
        except OSError:
            time.sleep(0.1)
    server.kill()
    sys.exit(f"rclone serve s3 did not answer at {url}")


def floor(content: Path, blobs: list[str]) -> dict:
    """gunzip + sha1 + decode of every object from memory, one core (ingest's own functions)."""
    from stackcurate.sources.fetch import gunzip_bounded
    from stackcurate.stages.ingest.content import decode, sha1_hex

    objects = [(content / blob).read_bytes() for blob in blobs]
    started = time.perf_counter()
    for compressed in objects:
        data = gunzip_bounded(compressed, MAX_BYTES, BOMB_RATIO).data or b""
        sha1_hex(data)
        decode(data)
    return {"seconds": time.perf_counter() - started, "cores": 1}


def s5cmd(endpoint: str, blobs: list[str], work: Path, numworkers: int) -> dict:
    """`s5cmd run` of one `cp` per object into a fresh folder."""
    dest = work / "s5cmd-out"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    commands = work / "s5cmd-commands.txt"
    commands.write_text("".join(f"cp s3://{BUCKET}/content/{blob} {dest}/\n" for blob in blobs))
    command = ["s5cmd", "--endpoint-url", endpoint, "--no-sign-request", "--numworkers", str(numworkers)]
    env = {**os.environ, "AWS_REGION": "us-east-1"}
    started = time.perf_counter()
    done = subprocess.run([*command, "run", str(commands)], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    copied = sum(1 for _ in dest.iterdir())
    shutil.rmtree(dest)
    if done.returncode != 0 or copied != len(blobs):
        sys.exit(f"s5cmd copied {copied} of {len(blobs)} objects ({done.returncode}):\n{done.stderr[-2000:]}")
    return {"seconds": seconds, "cores": os.cpu_count(), "command": " ".join([*command, "run", "<file>"])}


def ingest(endpoint: str, metadata: Path, work: Path, src: Path, workers: int, objects: int) -> dict:
    """The `stackcurate ingest` CLI of `src` on the store at `endpoint`; timed by its own summary line."""
    out = work / "out-ingest"
    command = [sys.executable, "-m", "stackcurate.cli", "ingest", "--out", str(out)]
    command += ["--metadata", str(metadata / "*.parquet"), "--content", f"s3://{BUCKET}", "--s3-endpoint", endpoint]
    command += ["--runner", "ray", "--workers", str(workers), "--no-progress", "--overwrite"]
    env = {**os.environ, "PYTHONPATH": str(src), "RAY_USAGE_STATS_ENABLED": "0", "AWS_EC2_METADATA_DISABLED": "true"}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=src, capture_output=True, text=True)
    wall = time.perf_counter() - started
    found = STAGE_LINE.search(done.stdout)
    if done.returncode != 0 or found is None or int(found[1].replace(",", "")) != objects:
        sys.exit(f"ingest failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    shutil.rmtree(out)
    summary = found[0]
    return {"seconds": float(found[2]), "wall_s": round(wall, 2), "cores": workers, "summary": summary}


# ---------------------------------------------------------------------------------------------------------
# Runs and results


def rates(entry: dict, size: dict, counted: list[int] | None = None) -> dict:
    """Objects/s and MB/s (compressed, raw), overall and per core, from `entry`'s seconds and cores."""
    seconds, cores, objects = entry["seconds"], entry["cores"], size["objects"]
    entry = {**entry, "seconds": round(seconds, 2), "load_average_1m": round(os.getloadavg()[0], 2)}
    entry["objects_per_s"] = round(objects / seconds, 1)
    entry["objects_per_s_per_core"] = round(objects / seconds / cores, 1)
    entry["compressed_mb_per_s_per_core"] = round(size["compressed_bytes"] / MB / seconds / cores, 2)
    entry["raw_mb_per_s_per_core"] = round(size["raw_bytes"] / MB / seconds / cores, 2)
    if counted is not None:  # through the proxy
        entry["requests_per_object"] = round(counted[0] / objects, 2)
        entry["connections_per_object"] = round(counted[1] / objects, 3)
    return entry


def measure(args: argparse.Namespace, store: Path, metadata: Path, blobs: list[str], size: dict) -> dict:
    """The floor, then s5cmd and ingest at each latency (and straight to rclone at 0 ms), one after the other."""
    result: dict = {"floor": rates(floor(store / BUCKET / "content", blobs), size), "latency": {}}
    print(f"floor: {result['floor']['objects_per_s_per_core']:,.0f} objects/s/core", flush=True)
    rclone, direct = start_rclone(store, blobs[0])
    try:
        targets: list[tuple[str, float | None]] = [(f"{ms:g} ms", ms) for ms in args.latencies]
        if 0 in args.latencies:
            targets.insert(0, ("direct", None))
        for name, delay in targets:
            proxy = Proxy(int(direct.rsplit(":", 1)[1]), delay) if delay is not None else None
            try:
                endpoint = proxy.url if proxy else direct
                runs = {}
                for client in ("s5cmd", "ingest"):
                    before = proxy.count[:] if proxy else [0, 0]
                    if client == "s5cmd":
                        entry = s5cmd(endpoint, blobs, args.work, args.s5cmd_workers)
                    else:
                        entry = ingest(endpoint, metadata, args.work, args.src, args.workers, len(blobs))
                    counted = [now - then for now, then in zip(proxy.count[:], before, strict=True)] if proxy else None
                    runs[client] = rates(entry, size, counted)
                    print(f"{name} {client}: {runs[client]['objects_per_s']:,.0f} objects/s", flush=True)
                result["latency"][name] = runs
            finally:
                if proxy:
                    proxy.stop()
    finally:
        rclone.terminate()
        rclone.wait()
    return result


def machine() -> dict:
    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def merge(path: Path, size: dict, label: str, entry: dict) -> dict:
    """Put `entry` at results["runs"][label]; refuse a file whose runs fetched other objects."""
    results = json.loads(path.read_text()) if path.exists() else {}
    if results.get("input", size) != size:
        sys.exit(f"{path} holds runs on other objects ({results['input']}); pass --results for this one")
    results["input"] = size
    results.setdefault("runs", {})[label] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return results


def table(results: dict) -> str:
    """Every run of the results file as a Markdown table."""
    lines = [
        "| label | latency | client | cores | s | objects/s | objects/s/core | MB/s/core compressed | MB/s/core raw "
        "| requests/object | connections/object |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, run in results["runs"].items():
        rows = [("-", "floor (gunzip+sha1+decode)", run["floor"])]
        rows += [(name, client, e) for name, clients in run["latency"].items() for client, e in clients.items()]
        for latency, client, e in rows:
            lines.append(
                f"| {label} | {latency} | {client} | {e['cores']} | {e['seconds']:.1f} | {e['objects_per_s']:,.0f} "
                f"| {e['objects_per_s_per_core']:,.0f} | {e['compressed_mb_per_s_per_core']:.2f} "
                f"| {e['raw_mb_per_s_per_core']:.2f} | {e.get('requests_per_object', '')} "
                f"| {e.get('connections_per_object', '')} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="name of the result, e.g. before or after")
    parser.add_argument("--src", type=Path, default=ROOT, help="source tree whose stackcurate runs (default: this)")
    parser.add_argument("--latencies", type=float, nargs="+", default=[0, 20, 50], help="ms added per request")
    parser.add_argument("--max-objects", type=int, help="fetch only the first N objects (default: all)")
    parser.add_argument("--workers", type=int, default=2, help="ingest --workers")
    parser.add_argument("--s5cmd-workers", type=int, default=64, help="s5cmd --numworkers")
    parser.add_argument("--work", type=Path, default=ROOT / "work" / "bench_s3")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "s3_fetch.json")
    args = parser.parse_args()
    args.src, args.work = args.src.resolve(), args.work.resolve()
    sys.path.insert(0, str(args.src))  # the floor and the corpus build use the --src tree's code

    bucket = build_store(args.work / "store")
    metadata, blobs, size = select_objects(bucket, args.work, args.max_objects)
    compressed, raw = size["compressed_bytes"] / MB, size["raw_bytes"] / MB
    print(f"{size['objects']:,} objects, {compressed:.1f} MB compressed, {raw:.1f} MB raw", flush=True)
    entry = {"src": str(args.src), "machine": machine(), **measure(args, args.work / "store", metadata, blobs, size)}
    results = merge(args.results, size, args.label, entry)
    print(table(results))
    print(f"results: {args.results}")


if __name__ == "__main__":
    main()
