"""The registry URL's password never reaches a message, and a password pasted as it is connects.

SQLAlchemy's URL parser ends a password at its first `@`, `/`, `#` or `?`; capplan takes the
userinfo up to the last `@` (as the Prometheus URL does) and masks it with the one redaction
(`models_registry.redact`). The PostgreSQL case creates a role whose password holds every
reserved character and connects with the URL written the way a user pastes it.
"""

from __future__ import annotations

import uuid
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from models_registry import db
from pipelines.cli import app
from tests.conftest import pg_scratch

RESERVED = ":/?#[]@!$&'()*+,;=% "
# a closed port on this machine: the driver fails at once, after the URL was parsed
CLOSED = "127.0.0.1:1"


@pytest.mark.parametrize("char", [*list(RESERVED), "é", "://"])
def test_a_password_with_any_reserved_character_never_reaches_the_output(
    char: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"S3KR{char}ET{char}"
    url = f"postgresql+psycopg://capplan:{secret}@{CLOSED}/db"
    assert secret not in db.safe_url(url)
    monkeypatch.setenv(db.URL_ENV, url)
    for command in (["registry", "list"], ["registry", "ingest"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        assert "S3KR" not in result.output and f"ET{char}" not in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output


def test_the_userinfo_runs_to_the_last_at_sign() -> None:
    parsed = db._parse("postgresql+psycopg://capplan:p@ss/w#o?r:d@db.example:5433/registry")
    assert (parsed.username, parsed.password) == ("capplan", "p@ss/w#o?r:d")
    assert (parsed.host, parsed.port, parsed.database) == ("db.example", 5433, "registry")
    encoded = db._parse("postgresql+psycopg://capplan:p%40ss@db.example/registry")
    assert encoded.password == "p@ss"  # percent-encoded, as SQLAlchemy documents it, still works
    assert db._parse("sqlite:////tmp/a@b/registry.db").database == "/tmp/a@b/registry.db"
    assert db.safe_url("sqlite:////tmp/a@b/registry.db") == "sqlite:////tmp/a@b/registry.db"


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=40).filter(lambda s: "\x00" not in s))
def test_safe_url_masks_any_password(password: str) -> None:
    secret = "Zq9" + password
    shown = db.safe_url(f"postgresql://user:{secret}@host.example:5432/registry")
    assert secret not in shown
    assert shown.endswith("@host.example:5432/registry")


@pytest.mark.postgres
def test_a_raw_password_connects(pg_admin_url: str) -> None:
    role = f"capplan_secret_{uuid.uuid4().hex[:8]}"
    password = "p@ss/w#o?r:d %[]!$&'()*+,;="
    quoted = password.replace("'", "''")
    admin = make_url(pg_admin_url)
    with pg_scratch(pg_admin_url, f"CREATE ROLE {role} LOGIN PASSWORD '{quoted}'", f"DROP ROLE {role}"):
        host = f"{admin.host}:{admin.port}" if admin.port else str(admin.host)
        for written in (password, quote(password, safe="")):
            url = f"{admin.drivername}://{role}:{written}@{host}/{admin.database}"
            engine = db.make_engine(url)
            try:
                with engine.connect() as connection:
                    assert connection.execute(text("SELECT current_user")).scalar() == role
            finally:
                engine.dispose()
