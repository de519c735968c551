"""Whole releases: every output is staged, then published at once by swapping a symlink.

``--out DIR`` keeps its meaning: the release's files are at ``DIR/rule.json``, ``DIR/receipt.json``
and so on. ``DIR`` is a symlink to a complete version directory in the sibling ``.DIR.releases/``:

1. :meth:`ReleaseDir.preflight` (before any row is read) refuses a ``DIR`` that cannot be replaced
   whole: a file, or a directory holding anything but a previous release.
2. :meth:`ReleaseDir.stage` writes every output into a private staging directory
   ``.DIR.releases/.staging-<pid>-*`` (mode 0700) and ``fsync``\\ s it, *before* the charge: a full
   disk is found while nothing is spent.
3. After the charge, :meth:`Staged.add` writes ``receipt.json`` and :meth:`Staged.publish` renames
   the staging directory to a version directory and atomically replaces the ``DIR`` symlink
   (``os.replace``). Readers see the previous release or the new one, whole, never a mix. The
   previous version is kept (readers may still hold it open) until the next publication; older
   ones and the staging directories of dead runs are removed then.

A ``DIR`` that is a real directory holding a release of an earlier version (or nothing) is moved into
``.DIR.releases/`` at the first publication and replaced by the symlink (``DIR`` is absent for the
instant between the two renames). A ``DIR`` that is a symlink dpcausal did not make is followed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path

from dpcausal.errors import OutputError
from dpcausal.io.durable import fsync_dir, write_all

RECEIPT = "receipt.json"
PUBLISH_LOCK_SECONDS = 60.0
"""How long a publication waits for another one into the same directory."""


def write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` (which must not exist) with ``data``, fsynced; the usual mode (umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ReleaseDir:
    """The output directory of a release command (see the module docstring)."""

    def __init__(self, out: Path) -> None:
        self.given = Path(out)
        path = Path(os.path.abspath(out))
        if path.is_symlink() and not self._ours(path):
            path = Path(os.path.realpath(path))
        self.out = path
        self.store = path.parent / f".{path.name}.releases"

    @staticmethod
    def _ours(link: Path) -> bool:
        head, _, tail = os.readlink(link).partition("/")
        return head == f".{link.name}.releases" and bool(tail) and "/" not in tail

    def _previous_release(self) -> set[str] | None:
        """Names in the real directory ``out`` if it holds one earlier release (or nothing)."""
        names = set(os.listdir(self.out))
        if not names:
            return names
        try:
            receipt = json.loads((self.out / RECEIPT).read_text())
            listed = {str(o["path"]) for o in receipt["outputs"]} | {RECEIPT}
        except (OSError, ValueError, KeyError, TypeError):
            return None
        leftovers = {n for n in names if n.startswith(".") and n.endswith(".tmp")}
        return names if names - leftovers <= listed else None

    def preflight(self) -> None:
        """Refuse, before any row is read, an output directory a release cannot replace whole."""
        out = self.out
        if out.is_symlink():
            if not self.store.is_dir():
                raise OutputError(f"{out}: a link to a release whose store {self.store} is missing; "
                                  "remove the link or choose another --out")
        elif out.exists():
            if not out.is_dir():
                raise OutputError(f"{out}: exists and is not a directory; fix output.dir or pass "
                                  "--out DIR")
            if self._previous_release() is None:
                raise OutputError(
                    f"{out}: the directory holds files that are not one dpcausal release; a "
                    "release replaces its output directory whole, so choose an empty or new "
                    "directory (fix output.dir or pass --out DIR)")
        probe = out.parent
        while not probe.exists():
            probe = probe.parent
        if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
            raise OutputError(f"{out}: cannot create or replace the output directory ({probe} is "
                              "not a writable directory); fix output.dir or pass --out DIR")
        if self.store.exists() and not self.store.is_dir():
            raise OutputError(f"{self.store}: exists and is not a directory; remove it")

    def stage(self, files: dict[str, bytes]) -> Staged:
        """Write every file into a new private staging directory (raises OutputError)."""
        created: list[Path] = []
        staging = None
        try:
            for d in [*reversed(self.store.parents), self.store]:
                if not d.exists():
                    d.mkdir()
                    created.append(d)
            staging = Path(tempfile.mkdtemp(prefix=f".staging-{os.getpid()}-", dir=self.store))
            staged = Staged(self, staging, created)
            for name, data in files.items():
                staged.add(name, data)
            return staged
        except OSError as exc:
            Staged(self, staging, created).discard()
            raise OutputError(f"{self.out}: cannot write the release ({exc.strerror}); nothing "
                              "was published") from exc


class Staged:
    """A release being staged; published whole or discarded."""

    def __init__(self, target: ReleaseDir, path: Path | None, created: list[Path]) -> None:
        self.target = target
        self.path = path
        self.names: list[str] = []
        self._created = created

    def add(self, name: str, data: bytes) -> None:
        """Write one output (raises OSError)."""
        assert self.path is not None
        if "/" in name or name.startswith("."):
            raise ValueError(f"not an output file name: {name!r}")
        write_new_file(self.path / name, data)
        self.names.append(name)

    def discard(self) -> None:
        """Remove the staging directory and any directory staging created (best effort)."""
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
        for d in reversed(self._created):
            with contextlib.suppress(OSError):
                d.rmdir()

    def publish(self, version: str) -> list[Path]:
        """Make the staged files the release at ``DIR``, atomically; return their paths there.

        On failure before the swap nothing is published (the caller discards the staging); the
        previous release stays in place.
        """
        assert self.path is not None
        target = self.target
        umask = os.umask(0)
        os.umask(umask)
        final: Path | None = None
        published = False
        try:
            fsync_dir(self.path)
            os.chmod(self.path, 0o777 & ~umask)
            import filelock  # lazy (issue 24): only a publish takes this lock

            with filelock.FileLock(str(target.store / ".lock"), timeout=PUBLISH_LOCK_SECONDS):
                final = target.store / version
                if final.exists():
                    final = target.store / f"{version}-{secrets.token_hex(3)}"
                os.rename(self.path, final)
                self.path = None
                fsync_dir(target.store)
                previous = self._swap(final)
                published = True
                fsync_dir(target.out.parent)
                with contextlib.suppress(OSError):
                    self._prune({final.name, previous})
        except (OSError, OutputError) as exc:  # filelock.Timeout is an OSError
            why = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
            if published:
                raise OutputError(f"{target.out}: the release was published but its directory "
                                  f"could not be synced to disk ({why})") from exc
            if final is not None:
                shutil.rmtree(final, ignore_errors=True)
            raise OutputError(f"{target.out}: cannot publish the release ({why})") from exc
        return [target.given / n for n in self.names]

    def _swap(self, final: Path) -> str | None:
        """Point ``DIR`` at ``final``; return the name of the version it replaced, if any."""
        out = self.target.out
        link = out.parent / f".{out.name}.link-{os.getpid()}-{secrets.token_hex(4)}"
        os.symlink(f"{self.target.store.name}/{final.name}", link)
        previous = None
        try:
            if out.is_symlink():
                previous = os.path.basename(os.readlink(out))
            elif out.is_dir():
                if self.target._previous_release() is None:
                    raise OutputError(f"{out}: files that are not a release appeared in the output "
                                      "directory during the run; the release was not published")
                if os.listdir(out):
                    previous = f"earlier-{secrets.token_hex(4)}"
                    os.rename(out, self.target.store / previous)
                else:
                    out.rmdir()
            os.replace(link, out)
        except BaseException:
            link.unlink(missing_ok=True)
            raise
        return previous

    def _prune(self, keep: set[str | None]) -> None:
        """Remove older versions and what dead runs left: staging directories, temp links."""
        for entry in os.scandir(self.target.store):
            name = entry.name
            if name in keep or name == ".lock" or _live_temp(name, ".staging-"):
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
        link = f".{self.target.out.name}.link-"
        for entry in os.scandir(self.target.out.parent):
            if entry.name.startswith(link) and not _live_temp(entry.name, link):
                os.unlink(entry.path)


def _live_temp(name: str, prefix: str) -> bool:
    """Whether ``name`` is ``<prefix><pid>-...`` of a process that is still running."""
    if not name.startswith(prefix):
        return False
    pid = name[len(prefix):].split("-")[0]
    return pid.isdigit() and _pid_alive(int(pid))
