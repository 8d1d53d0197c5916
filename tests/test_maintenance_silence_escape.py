"""A literal ``.`` in the maintenance silence's ``cause_node`` regex (docs/operators.md, "Planned
maintenance"): ``\\\\.`` inside the double quotes, which both Alertmanager matcher parsers read as
the regex ``\\.``.

Upstream behaviour modelled (prometheus/alertmanager):

* Alertmanager 0.27 and later parse a matcher with ``matcher/parse`` (``parse.go``), which reads
  a quoted value with Go's ``strconv.Unquote``: only Go's escapes (``\\a \\b \\f \\n \\r \\t \\v
  \\\\ \\' \\"``, ``\\x``, ``\\u``, ``\\U``, octal) pass; ``\\.`` is a syntax error, so in
  ``utf8-strict`` mode the silence is refused (``fallback`` mode, the default, retries the classic
  parser and logs a warning).
* The classic parser (``pkg/labels/parse.go``, Alertmanager 0.25, the ``amtool`` installed here)
  reads ``\\\\`` as ``\\``, ``\\"`` as ``"``, ``\\n`` as a newline and keeps any other ``\\x``
  as both characters.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from alertmanager_helpers import running_alertmanager

from fleetmind.data.paths import REPO_ROOT

GO_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
              "\\": "\\", "'": "'", '"': '"'}  # fmt: skip
DOC_MATCHER = re.compile(r'`cause_node=~"([^"`]*\\\\\.[^"`]*)"`')


def go_unquote(quoted: str) -> str:
    """Go's ``strconv.Unquote`` of a double-quoted string, for the escapes a regex needs
    (single-character ones; ``\\x``/``\\u``/octal are not used here): ValueError on any other."""
    assert quoted[0] == quoted[-1] == '"'
    out, body, i = [], quoted[1:-1], 0
    while i < len(body):
        if body[i] == "\\":
            if i + 1 >= len(body) or body[i + 1] not in GO_ESCAPES:
                raise ValueError(f"invalid syntax: {quoted}")
            out.append(GO_ESCAPES[body[i + 1]])
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def classic_unquote(quoted: str) -> str:
    """Alertmanager 0.25's ``pkg/labels/parse.go`` reading of a double-quoted value."""
    out, body, i = [], quoted[1:-1], 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append({"n": "\n", '"': '"', "\\": "\\"}.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def _documented_value() -> str:
    text = (REPO_ROOT / "docs" / "operators.md").read_text()
    found = DOC_MATCHER.search(text)
    assert found, "docs/operators.md gives no cause_node matcher with a literal dot (\\\\.)"
    return f'"{found.group(1)}"'


def test_the_docs_advise_a_double_backslash() -> None:
    text = (REPO_ROOT / "docs" / "operators.md").read_text()
    assert "(write `\\.` for a literal one)" not in text
    assert "write `\\\\.` for a literal one" in text


def test_both_parsers_read_the_documented_dot_as_a_literal_one() -> None:
    value = _documented_value()
    strict, classic = go_unquote(value), classic_unquote(value)
    assert strict == classic and "gpu\\.a100-1" in strict
    regex = re.compile(f"^(?:{strict})$")  # anchored as Alertmanager anchors it
    assert regex.match("prod-eu/host/gpu.a100-1")
    assert regex.match("prod-eu/gpu/gpu.a100-1/3")
    assert not regex.match("prod-eu/host/gpuxa100-1")  # the dot is literal
    assert not regex.match("prod-eu/host/gpu.a100-10")


def test_a_single_backslash_is_rejected_by_the_utf8_parser() -> None:
    """The old advice: ``\\.`` passes the classic parser but not ``strconv.Unquote``."""
    old = '"prod-eu/(host|gpu|link)/gpu\\.a100-1(/.*)?"'
    assert classic_unquote(old) == old[1:-1]
    with pytest.raises(ValueError):
        go_unquote(old)


def test_amtool_0_25_silences_the_literal_dot(tmp_path: Path) -> None:
    """The documented matcher with a real Alertmanager and ``amtool`` (0.25, classic parser)."""
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager)")
    config = tmp_path / "am.yml"
    config.write_text('route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n')
    matchers = ['alertname="FleetMindRootCause"', f"cause_node=~{_documented_value()}"]
    causes = ["prod-eu/host/gpu.a100-1", "prod-eu/host/gpuxa100-1"]
    with running_alertmanager(config, tmp_path / "data") as url:
        add = [amtool, f"--alertmanager.url={url}", "silence", "add", "--duration=2h",
               "--author=ops", "--comment=drain", *matchers]  # fmt: skip
        done = subprocess.run(add, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        alerts = [{"labels": {"alertname": "FleetMindRootCause", "incident": str(i),
                              "cause_node": c}} for i, c in enumerate(causes)]  # fmt: skip
        httpx.post(f"{url}/api/v2/alerts", json=alerts, timeout=10).raise_for_status()
        got = httpx.get(f"{url}/api/v2/alerts", timeout=10).json()
    state = {a["labels"]["cause_node"]: a["status"]["state"] for a in got}
    assert state == {"prod-eu/host/gpu.a100-1": "suppressed", "prod-eu/host/gpuxa100-1": "active"}
