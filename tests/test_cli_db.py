"""``fleetmind db``: the schema revision shown, upgraded and rolled back.

A downgrade must leave the schema an older release made itself (the same tables, columns and
indexes as a database upgraded only that far), under the migration lock a start takes, and refuse
bad revisions with one line and status 2.
"""

from __future__ import annotations

import fcntl
import io
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, text

from fleetmind import cli
from fleetmind.data.errors import ConfigError
from fleetmind.serving import migrations
from fleetmind.serving.db import Database


def _schema(url: str) -> dict[str, Any]:
    """Tables -> (columns, indexes) of the database at ``url``, and its revision."""
    db = Database(url)
    try:
        with db.engine.connect() as conn:
            insp = inspect(conn)
            out: dict[str, Any] = {"revision": migrations.current(conn)}
            for table in sorted(insp.get_table_names()):
                if table == "alembic_version":
                    continue
                cols = sorted((c["name"], bool(c["nullable"])) for c in insp.get_columns(table))
                idx = sorted(i["name"] for i in insp.get_indexes(table))
                out[table] = (cols, idx)
        return out
    finally:
        db.dispose()


def _upgrade_to(url: str, rev: str) -> None:
    """Upgrade the database at ``url`` to ``rev`` only, as the start does (same lock, same
    connection), to see the schema the release whose newest is ``rev`` made."""
    from alembic import command

    db = Database(url)
    try:
        with migrations._migration_lock(db.engine) as conn:
            command.upgrade(migrations._config(conn), rev)
            conn.commit()
    finally:
        db.dispose()


def _db(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["db", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _current(capsys: pytest.CaptureFixture[str], url: str) -> dict[str, Any]:
    rc, out, _ = _db(capsys, "current", "--database-url", url, "--json")
    assert rc == 0
    return json.loads(out)


def test_downgrade_restores_older_schemas_and_upgrade_returns(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _upgrade_to(db_url, "0004")  # release 0.2.0's newest
    at_0004 = _schema(db_url)
    _upgrade_to(db_url, "0011")
    at_0011 = _schema(db_url)
    rc, out, _ = _db(capsys, "upgrade", "--database-url", db_url)
    assert rc == 0 and f"from 0011 to {migrations.head()}" in out
    assert _current(capsys, db_url)["up_to_date"] is True

    rc, out, _ = _db(capsys, "downgrade", "--to", "0011", "--yes", "--database-url", db_url)
    assert rc == 0 and "downgraded from 0012 to 0011" in out
    assert _schema(db_url) == at_0011
    rc, out, _ = _db(capsys, "downgrade", "--to", "0004", "--yes", "--database-url", db_url)
    assert rc == 0 and "downgraded from 0011 to 0004" in out
    assert _schema(db_url) == at_0004
    state = _current(capsys, db_url)
    assert state["revision"] == "0004" and state["up_to_date"] is False and state["known"]

    rc, out, _ = _db(capsys, "upgrade", "--database-url", db_url)
    assert rc == 0 and f"from 0004 to {migrations.head()}" in out
    assert _current(capsys, db_url)["revision"] == migrations.head()


def _one_line_refusal(err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fleetmind: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/fleetmind.db"
    _upgrade_to(url, "0004")
    return url


@pytest.mark.parametrize(
    ("to", "needles"),
    [
        ("9999", ("--to '9999' is not a schema revision", "0001 to")),
        ("base", ("--to 'base' is not a schema revision",)),
        ("0011", ("revision 0011 is above the database's revision 0004",)),
    ],
)
def test_bad_revisions_are_refused_with_one_line(
    sqlite_url: str, to: str, needles: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = _db(capsys, "downgrade", "--to", to, "--yes", "--database-url", sqlite_url)
    assert rc == 2 and out == ""
    _one_line_refusal(err, *needles)
    assert _schema(sqlite_url)["revision"] == "0004"


def _stamp(url: str, rev: str) -> None:
    db = Database(url)
    try:
        with db.engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": rev})
    finally:
        db.dispose()


def test_a_newer_schema_is_refused_naming_the_rollback(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _stamp(sqlite_url, "0099")  # written by a release newer than this one
    head = migrations.head()
    rc, _, err = _db(capsys, "downgrade", "--to", "0004", "--yes", "--database-url", sqlite_url)
    assert rc == 2
    _one_line_refusal(
        err,
        "revision 0099, which this release does not know",
        f"`fleetmind db downgrade --to {head}` with that newer release first",
        "docs/serving/operations.md#rolling-back",
    )
    assert _current(capsys, sqlite_url)["known"] is False
    db = Database(sqlite_url)  # the start refuses with the same pointer
    try:
        with pytest.raises(ConfigError, match=rf"fleetmind db downgrade --to {head}`"):
            db.migrate()
    finally:
        db.dispose()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_downgrade_asks_and_needs_yes_without_a_terminal(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # a Job, a pipe: no terminal
    rc, _, err = _db(capsys, "downgrade", "--to", "0003", "--database-url", sqlite_url)
    assert rc == 2
    _one_line_refusal(err, "drops", "0004: the table reservations", "pass --yes")
    assert _schema(sqlite_url)["revision"] == "0004"

    monkeypatch.setattr(sys, "stdin", _Tty("n\n"))
    rc, _, err = _db(capsys, "downgrade", "--to", "0003", "--database-url", sqlite_url)
    assert rc == 1 and "not confirmed; nothing changed" in err
    assert _schema(sqlite_url)["revision"] == "0004"

    monkeypatch.setattr(sys, "stdin", _Tty("y\n"))
    rc, out, _ = _db(capsys, "downgrade", "--to", "0003", "--database-url", sqlite_url)
    assert rc == 0 and "downgraded from 0004 to 0003" in out
    assert "reservations" not in _schema(sqlite_url)


def test_downgrade_waits_for_the_migration_lock(sqlite_url: str, tmp_path: Path) -> None:
    """A start migrating (it holds the lock) and a downgrade never run at once."""
    fd = open(tmp_path / "fleetmind.db.migrate.lock", "w")  # noqa: SIM115 - held across threads
    fcntl.flock(fd, fcntl.LOCK_EX)
    db = Database(sqlite_url)
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(migrations.downgrade(db.engine, "0003")))
    try:
        worker.start()
        time.sleep(0.5)
        assert worker.is_alive() and not done
        assert _schema(sqlite_url)["revision"] == "0004"
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        fd.close()
        worker.join(30)
        db.dispose()
    assert done == ["0004"] and _schema(sqlite_url)["revision"] == "0003"


def test_current_reports_without_creating_a_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "missing.db"
    rc, out, err = _db(capsys, "current", "--database-url", f"sqlite:///{path}")
    assert rc == 2 and out == ""
    _one_line_refusal(err, f"no SQLite database at {path}")
    assert not path.exists()


def test_every_revision_says_what_its_downgrade_drops() -> None:
    assert set(migrations.DOWNGRADE_DROPS) == migrations.known_revisions()
    assert migrations.revisions()[0] == migrations.BASELINE
    assert migrations.revisions()[-1] == migrations.head()


def test_downgrade_refuses_while_a_server_runs_on_the_sqlite_file(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server's incident worker holds ``<db>.worker.lock`` (``LeaderLock``, the same class
    ``fleetmind serve`` uses) for as long as it runs: the downgrade refuses without waiting."""
    from fleetmind.serving.db import LeaderLock

    server_db = Database(sqlite_url)
    leader = LeaderLock(server_db)
    assert leader.acquire()
    try:
        started = time.monotonic()
        rc, out, err = _db(
            capsys, "downgrade", "--to", "0003", "--yes", "--database-url", sqlite_url
        )
        assert time.monotonic() - started < 10  # a probe, not a wait
        assert rc == 2 and out == ""
        _one_line_refusal(
            err,
            "a server still runs on",
            "fleetmind.db.worker.lock is locked by its incident worker",
            "stop every replica first",
        )
        assert _schema(sqlite_url)["revision"] == "0004"
        assert leader.check()  # the probe took nothing from the server
    finally:
        leader.release()
        server_db.dispose()
    rc, out, _ = _db(capsys, "downgrade", "--to", "0003", "--yes", "--database-url", sqlite_url)
    assert rc == 0 and "downgraded from 0004 to 0003" in out


def test_downgrade_probe_leaves_no_lock_file_behind(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not (tmp_path / "fleetmind.db.worker.lock").exists()
    rc, out, _ = _db(capsys, "downgrade", "--to", "0003", "--yes", "--database-url", sqlite_url)
    assert rc == 0 and "downgraded from 0004 to 0003" in out
    assert not (tmp_path / "fleetmind.db.worker.lock").exists()


ROOT = Path(__file__).resolve().parents[1]


def _rolling_back_section() -> str:
    text_ = (ROOT / "docs/serving/operations.md").read_text(encoding="utf-8")
    start = text_.index("## Rolling back")
    return text_[start : text_.index("\n## ", start + 1)]


def _runbook_job() -> dict[str, Any]:
    """The downgrade Job of the rollback runbook (its ```yaml block)."""
    import textwrap

    import yaml

    section = _rolling_back_section()
    body = section[section.index("```yaml") + len("```yaml") :]
    job = yaml.safe_load(textwrap.dedent(body[: body.index("```")]))
    assert job["kind"] == "Job" and job["metadata"]["name"] == "fleetmind-db-downgrade"
    return job


def test_rollback_job_passes_the_deployments_security_checks() -> None:
    """The runbook's Job runs where the server's pods run: the base Deployment's pod security
    without the fixed ids (which deploy/kubernetes/openshift removes for restricted-v2), and its
    container's. Pod Security "restricted" requires runAsNonRoot, a RuntimeDefault seccomp
    profile, allowPrivilegeEscalation false and capabilities drop ALL
    (https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted)."""
    import yaml

    deployment = yaml.safe_load((ROOT / "deploy/kubernetes/base/deployment.yaml").read_text())
    dep_pod = deployment["spec"]["template"]["spec"]
    (server,) = [c for c in dep_pod["containers"] if c["name"] == "fleetmind"]
    pod = _runbook_job()["spec"]["template"]["spec"]
    (container,) = pod["containers"]

    fixed_ids = {"runAsUser", "runAsGroup", "fsGroup"}
    assert not fixed_ids & set(pod["securityContext"])  # OpenShift's SCC assigns them
    expected = {k: v for k, v in dep_pod["securityContext"].items() if k not in fixed_ids}
    assert pod["securityContext"] == expected
    assert expected == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert container["securityContext"] == server["securityContext"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}

    # the same database on the same volume, and a writable /tmp under the read-only root
    assert container["volumeMounts"] == server["volumeMounts"]
    assert pod["volumes"] == [
        {"name": v["name"], **{k: v[k] for k in v if k != "name"}} for v in dep_pod["volumes"]
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    server_env = {e["name"]: e.get("value") for e in server["env"]}
    assert env["FLEETMIND_DATABASE_URL"] == server_env["FLEETMIND_DATABASE_URL"]
    assert container["command"][:3] == ["fleetmind", "db", "downgrade"]
    assert "--yes" in container["command"]  # a Job has no terminal on stdin


def test_rollback_runbook_does_not_wait_on_completion_alone() -> None:
    """A failed Job (a refusal exits 2; ``backoffLimit: 0``) never becomes ``Complete``: the
    runbook follows its log, which ends when the downgrade does, instead of a long
    ``kubectl wait --for=condition=complete``."""
    import re

    section = " ".join(_rolling_back_section().split())
    assert "logs -f job/fleetmind-db-downgrade" in section
    assert _runbook_job()["spec"]["backoffLimit"] == 0
    for wait in re.findall(r"`kubectl[^`]* wait [^`]*`", section):
        timeout = re.search(r"--timeout=(\d+)(s|m)", wait)
        assert timeout is None or int(timeout[1]) * (60 if timeout[2] == "m" else 1) <= 60, wait
