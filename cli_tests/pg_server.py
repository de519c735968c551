"""A throwaway PostgreSQL server for the database-ledger tests (named without ``test``).

The tests use the server ``DPCAUSAL_TEST_PG_URL`` names (``.ci/run`` starts one: a URL of a role
that may create databases, e.g. ``postgresql://dpcausal@/postgres?host=/tmp/dir``); without it
they start their own cluster from the PostgreSQL binaries on this machine (``initdb`` on PATH or
Debian's ``/usr/lib/postgresql/*/bin``), on a Unix socket in a temporary directory: no TCP port,
nothing shared with any other server. As root the server runs as the ``postgres`` user (or
``nobody``): PostgreSQL refuses to run as root.

With ``DPCAUSAL_TEST_PG_REQUIRED=1`` (CI) a missing server or driver fails the tests instead of
skipping them.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

URL_ENV = "DPCAUSAL_TEST_PG_URL"
REQUIRED_ENV = "DPCAUSAL_TEST_PG_REQUIRED"
SUPERUSER = "dpcausal"


def bin_dir() -> Path | None:
    """The directory of ``initdb``/``pg_ctl``, or None when PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent  # a symlink on PATH: the real bin directory
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                    key=lambda p: [int(x) for x in re.findall(r"\d+", p.parent.parent.name)])
    return debian[-1].parent if debian else None


def _run_as() -> str | None:
    """The user the server runs as when we are root (None: ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and there is no 'postgres' or 'nobody' user to run "
                       "PostgreSQL as")


class Cluster:
    """A PostgreSQL cluster in a new temporary directory, listening on a Unix socket only."""

    def __init__(self, bins: Path) -> None:
        self.bins = bins
        self.user = _run_as()
        self.root = Path(tempfile.mkdtemp(prefix="dpcausal-pg-"))
        self.data = self.root / "data"
        self.tcp_port: int | None = None
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._pg("initdb", "-D", str(self.data), "-A", "trust", "-U", SUPERUSER, "-E", "UTF8",
                 "--no-sync", "--locale=C")

    def _pg(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bins / tool), *args]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)

    def start(self, tcp_port: int | None = None) -> None:
        """Start the server (fsync off: a test server; every commit still waits for its WAL).

        ``tcp_port``: also listen on 127.0.0.1 at that port (the benchmark; tests use the socket).
        """
        listen = "" if tcp_port is None else f"127.0.0.1 -p {tcp_port}"
        self.tcp_port = tcp_port
        self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w",
                 "-o", f"-k {self.root} -c listen_addresses={listen} -F", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate``: like a crash, no checkpoint)."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def url(self, dbname: str = "postgres", *, tcp: bool = False) -> str:
        """The URL of ``dbname`` as the superuser, over the socket (or TCP on 127.0.0.1)."""
        if tcp:
            return f"postgresql://{SUPERUSER}@127.0.0.1:{self.tcp_port}/{dbname}"
        port = "" if self.tcp_port is None else f"&port={self.tcp_port}"
        return f"postgresql://{SUPERUSER}@/{dbname}?host={self.root}{port}"

    def remove(self) -> None:
        """Stop the server and delete everything."""
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
