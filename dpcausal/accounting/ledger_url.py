"""Database ledger URLs: recognise them, refuse credentials in them, redact them for receipts.

No I/O and no driver import: the spec checks a ``ledger.url`` with these functions at load time, so a
URL holding a password is refused (exit 2) before anything connects, and the URL itself is never
quoted in a message (it may hold the very secret being refused).

Credentials come only from libpq's own sources: ``PGPASSWORD``/``PGUSER`` and the other ``PG*``
environment variables, the password file (``~/.pgpass`` or ``PGPASSFILE``) and the service file
(``~/.pg_service.conf`` or ``PGSERVICEFILE``, selected with ``?service=NAME``).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

SCHEMES = ("postgresql://", "postgres://")

SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
"""libpq URL parameters that carry a secret: refused in a ledger URL."""

PUBLIC_PARAMETERS = ("host", "hostaddr", "port", "dbname", "service")
"""The only URL parameters a redacted URL keeps (where the ledger is; not who connects, or how)."""

CREDENTIALS_HELP = (
    "give the password through libpq instead: the PGPASSWORD environment variable, the password "
    "file (~/.pgpass or PGPASSFILE) or a service file (?service=NAME with ~/.pg_service.conf or "
    "PGSERVICEFILE)")


def is_database_url(location: str | Path) -> bool:
    """True when ``location`` names a PostgreSQL ledger (a ``postgresql://`` URL), not a file."""
    return isinstance(location, str) and location.lower().startswith(SCHEMES)


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot name a ledger database, or None. Never quotes the URL."""
    if not is_database_url(url):
        return "a ledger URL must start with postgresql:// (or postgres://)"
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    if ":" in userinfo:
        return ("the URL holds a password; a ledger URL never carries credentials (specs, "
                f"receipts and messages are not secret): remove it and {CREDENTIALS_HELP}")
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        if name.lower() in SECRET_PARAMETERS:
            return (f"the URL holds a '{name}' parameter; a ledger URL never carries credentials: "
                    f"remove it and {CREDENTIALS_HELP}")
    if parts.fragment:
        return "a PostgreSQL URL has no '#' fragment; remove it"
    return None


def redact_url(url: str) -> str:
    """``url`` without user, password or any parameter but host, port, dbname and service.

    This is the form receipts and messages carry: it says which database holds the ledger, not who
    connects to it or how.
    """
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if k.lower() in PUBLIC_PARAMETERS]
    query = f"?{urlencode(kept, safe='/', quote_via=quote)}" if kept else ""
    return f"{parts.scheme}://{host}{parts.path}{query}"
