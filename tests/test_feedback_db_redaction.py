"""The feedback database's errors keep its password out and stay one line.

OWASP Logging Cheat Sheet ("Data to exclude": passwords, database connection strings): an error
that quotes the URL shows ``***`` for its credentials; SQLAlchemy appends "(Background on this
error at: https://sqlalche.me/...)" on a line of its own (``sqlalchemy.exc.StatementError``'s
``__str__``), which a CLI's one-line error leaves out.
"""

from __future__ import annotations

import pytest

from fleetmind.data.errors import NotAvailableError
from fleetmind.serving.feedback import feedback_incidents


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://fm:secretpw@127.0.0.1:1/nodb",
        "postgresql+psycopg://fm@127.0.0.1:1/nodb?password=secretpw",
    ],
)
def test_unreachable_feedback_db_error_masks_password_and_is_one_line(url: str) -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(NotAvailableError) as info:
        feedback_incidents(url)  # port 1: nothing listens, refused at once
    msg = str(info.value)
    assert "secretpw" not in msg
    assert "***" in msg
    assert msg.startswith("cannot read the feedback database 'postgresql+psycopg://")
    assert "\n" not in msg and "sqlalche.me" not in msg
