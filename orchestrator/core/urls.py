"""Store URLs: the database schemes SQLAlchemy reads, the driver each needs and what to do when
it is missing, and a URL's password masked for messages and tags."""
from __future__ import annotations

from urllib.parse import urlsplit

from .errors import SweepError

RDB_SCHEMES = ("sqlite", "postgresql", "mysql", "oracle", "mssql")  # SQLAlchemy database URLs
# database drivers SQLAlchemy may look for, and how a user gets one
DRIVERS = {"MySQLdb": "write the URL as mysql+pymysql://... and install the project's mysql "
                      "extra (pip install -e '.[mysql]')",
           "pymysql": "install the project's mysql extra (pip install -e '.[mysql]')",
           "psycopg2": "write the URL as postgresql+psycopg://... and install the project's "
                       "postgres extra (pip install -e '.[postgres]')",
           "psycopg": "install the project's postgres extra (pip install -e '.[postgres]')"}


def missing_driver(error: BaseException) -> str | None:
    """What to do when ``error`` says a database driver is not installed; None otherwise."""
    if isinstance(error, ModuleNotFoundError) and error.name in DRIVERS:
        return f"its database driver ({error.name}) is not installed: {DRIVERS[error.name]}"
    return None


def mask(url: str) -> str:
    """``url`` with any password replaced by ***, for messages and tags."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


def check_driver(url: str, option: str) -> None:
    """Refuse a database URL whose driver is not installed, before anything is created (the
    study is made before MLflow is opened). Any other fault of the URL is left to its opening.

    Raises:
        SweepError: SQLAlchemy's driver for that database cannot be imported.
    """
    scheme = urlsplit(url).scheme.split("+")[0]
    if scheme not in RDB_SCHEMES or scheme == "sqlite":  # sqlite's driver is Python's own
        return
    from sqlalchemy.engine import make_url

    try:
        make_url(url).get_dialect().import_dbapi()
    except Exception as e:  # noqa: BLE001 - an unknown dialect or a bad URL: said when opened
        hint = missing_driver(e)
        if hint:
            raise SweepError(f"{option} {mask(url)}: {hint}") from None
