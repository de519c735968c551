"""Where a ledger's HMAC key lives, and reading and creating it.

- **File ledger**: ``LEDGER.key`` beside the ledger (mode 0600), created with the ledger.
- **Database ledger**: never in the database (whoever can write the tables must not be able to
  recompute a MAC). Every job that uses the ledger is given the key from outside, like any other
  CI secret: ``DPCAUSAL_LEDGER_KEY_FILE`` names a key file (mode 0600, 64 hex digits), or
  ``DPCAUSAL_LEDGER_KEY`` holds the 64 hex digits themselves (a masked CI variable). ``dpcausal
  ledger init`` creates the file ``DPCAUSAL_LEDGER_KEY_FILE`` names when it does not exist yet;
  ``ledger import`` writes the source ledger's key there, so the copied MACs stay valid.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from dpcausal.accounting import chain
from dpcausal.errors import OutputError, SpecError
from dpcausal.io.durable import fsync_dir, write_all

KEY_FILE_ENV = "DPCAUSAL_LEDGER_KEY_FILE"
KEY_ENV = "DPCAUSAL_LEDGER_KEY"


def read_key_file(path: Path) -> tuple[bytes | None, str | None]:
    """The ledger key in ``path`` (hex), or why it cannot be used; (None, None) when absent.

    A key that other users may read or write is refused: whoever holds it can rewrite the ledger.
    """
    try:
        st = os.stat(path)
        if st.st_mode & 0o077:
            return None, (f"{path}: the ledger key may be read or written by other users (mode "
                          f"{stat.S_IMODE(st.st_mode):o}); run 'chmod 600 {path}'")
        key = bytes.fromhex(Path(path).read_text().strip())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"{path}: cannot read the ledger key ({exc})"
    if len(key) != chain.KEY_BYTES:
        return None, f"{path}: not a dpcausal ledger key"
    return key, None


def write_key_file(path: Path, key: bytes) -> None:
    """Create ``path`` (never replacing a file) holding ``key`` in hex, mode 0600, synced."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        write_all(fd, (key.hex() + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class EnvKey:
    """A database ledger's key as the environment gives it.

    ``key`` is None when ``path`` names a key file that does not exist yet (``ledger init`` or
    ``import`` creates it).
    """

    key: bytes | None
    path: Path | None

    @property
    def where(self) -> str:
        """Where the key comes from, for messages (never the key)."""
        return f"{KEY_FILE_ENV}={self.path}" if self.path is not None else f"${KEY_ENV}"


def env_key(location: str, *, may_be_missing: bool = False) -> EnvKey:
    """Read a database ledger's key from the environment (before anything connects).

    ``may_be_missing`` allows a key file that does not exist yet (creating a ledger).
    """
    path_text = os.environ.get(KEY_FILE_ENV, "").strip()
    hex_text = os.environ.get(KEY_ENV, "").strip()
    if path_text and hex_text:
        raise SpecError(f"{location}: both {KEY_FILE_ENV} and {KEY_ENV} are set; set only one "
                        "(the ledger's key)")
    if hex_text:
        try:
            key = bytes.fromhex(hex_text)
        except ValueError:
            key = b""
        if len(key) != chain.KEY_BYTES:
            raise SpecError(f"{location}: {KEY_ENV} is not a ledger key ({2 * chain.KEY_BYTES} "
                            "hex digits)")
        return EnvKey(key, None)
    if not path_text:
        raise SpecError(
            f"{location}: a database ledger's HMAC key is never stored in the database; give it "
            f"to every job: set {KEY_FILE_ENV} to the key file 'dpcausal ledger init' created "
            f"(mode 0600), or {KEY_ENV} to its {2 * chain.KEY_BYTES} hex digits")
    path = Path(path_text).expanduser()
    from_file, problem = read_key_file(path)
    if problem:
        raise OutputError(f"{location}: {problem}")
    env = EnvKey(from_file, path)
    if from_file is None and not may_be_missing:
        raise missing_key_error(location, env)
    return env


def missing_key_error(location: str, env: EnvKey) -> OutputError:
    """The error for a key file that does not exist where a ledger does."""
    return OutputError(f"{location}: the ledger key file {env.path} ({KEY_FILE_ENV}) does not "
                       "exist; give this job the ledger's key file (created by 'dpcausal ledger "
                       "init'); nothing was spent")


def key_for_new_ledger(env: EnvKey, wanted: bytes | None, location: str) -> tuple[bytes, bool]:
    """The key of a database ledger being created, and whether its key file was created now.

    ``wanted`` is the key the ledger must have (an imported ledger's), None for a new one. An
    existing key in the environment must equal it; a key file that does not exist yet is created
    holding it (or a fresh key).
    """
    if env.key is not None:
        if wanted is not None and env.key != wanted:
            raise OutputError(
                f"{location}: the key in {env.where} is not the imported ledger's key (its MACs "
                f"would not verify); point {KEY_FILE_ENV} at the source ledger's key file, or at "
                "a new path where the source's key will be written")
        return env.key, False
    assert env.path is not None
    key = wanted if wanted is not None else chain.new_key()
    if not env.path.parent.is_dir():
        raise OutputError(f"{location}: the directory of the key file {env.path} "
                          f"({KEY_FILE_ENV}) does not exist")
    try:
        write_key_file(env.path, key)
        fsync_dir(env.path.parent)
    except OSError as exc:
        raise OutputError(f"{location}: cannot create the ledger key file {env.path}: "
                          f"{exc.strerror}; nothing was written") from exc
    return key, True
