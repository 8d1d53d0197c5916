"""Text from outside (node ids, cluster names, label values) measured and cut as it is shown.

A CJK character takes two terminal columns (Unicode UAX #11, East Asian Width ``W``/``F``), a
combining mark or ZWJ none; an emoji ZWJ sequence (Unicode UTS #51) and a letter with its accent
are one character as shown (UAX #29), so a cut never goes between them. Incident-page boxes,
``fleet show`` columns and the Google Chat cut use this; and a U+202E in an outside value is
kept inside a bidi isolate (Unicode TR9, U+2068 FSI ... U+2069 PDI) in the annotations sent to
Alertmanager and in chat text, so it reverses none of FleetMind's own words.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleetmind.cli import main
from fleetmind.data.graph import DependencyGraph, GraphEdge, GraphNode
from fleetmind.redact import (
    can_cut,
    display_width,
    head_in_width,
    pad,
    tail_in_width,
    terminal_safe,
)
from fleetmind.serving.notify import (
    PATH_IDS,
    TRUNCATED,
    Notifier,
    _fit_text,
    chat_body,
    code_span,
)
from fleetmind.serving.ui.svg import (
    _CHAR_W,
    _cut_middle,
    _cut_words,
    propagation_tree,
    short_id,
    text_width,
    tree_svg,
)

FAMILY = "\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # one emoji, 7 code points
CJK = "训练集群东区/推理/大模型服务网关主节点"  # 19 characters, 36 columns
RLO, FSI, PDI = "\u202e", "\u2068", "\u2069"


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")


def test_display_width_counts_columns() -> None:
    assert display_width("gpu-0") == 5
    assert display_width("节点") == 4
    assert display_width("東南アジア") == 10
    assert display_width("e\u0301") == 1  # a combining accent takes no column
    assert display_width(f"a{RLO}b\u200d") == 2  # format characters take none
    assert pad("节点", 6) == "节点  " and pad("7", 3, ">") == "  7"


def test_cuts_keep_emoji_sequences_and_accents_whole() -> None:
    text = "ab" + FAMILY + "e\u0301\u2764\ufe0f" + "\U0001f1e9\U0001f1ea"
    for i in range(3, 2 + len(FAMILY)):  # inside the family emoji
        assert not can_cut(text, i)
    assert can_cut(text, 2) and can_cut(text, 2 + len(FAMILY))
    accent = text.index("\u0301")
    assert not can_cut(text, accent)  # before the combining mark
    assert not can_cut(text, text.index("\ufe0f"))  # before the variation selector
    assert not can_cut(text, len(text) - 1)  # inside the flag
    for columns in range(12):
        head, tail = head_in_width(text, columns), tail_in_width(text, columns)
        assert display_width(head) <= columns and display_width(tail) <= columns
        assert can_cut(text, len(head)) and can_cut(text, len(text) - len(tail))


# Expected columns as a terminal draws them (Unicode UAX #11 East Asian Width; UTS #51 emoji
# presentation: U+FE0F after a text-style character, a keycap sequence and an emoji modifier
# sequence are one wide emoji; UAX #29 Hangul syllable sequences: V and T jamo join the L before).
WIDTHS = [
    ("\u2764\ufe0f", 2),  # HEAVY BLACK HEART + VS16
    ("\u2764", 1),  # the same character, text style (East Asian Width N)
    ("1\ufe0f\u20e3", 2),  # keycap 1
    ("#\u20e3", 2),  # keycap without VS16
    ("\U0001f44d\U0001f3fd", 2),  # thumbs up + medium skin tone
    ("\U0001f3fd", 2),  # a modifier on its own
    ("\u1100\u1161\u11a8", 2),  # conjoining jamo L V T: one syllable
    ("\u1100\ud7b0", 2),  # L + an extended-B vowel
    ("\uac01", 2),  # the precomposed syllable
    ("\u2705\ufe0f", 2),  # already wide: VS16 adds nothing
]


@pytest.mark.parametrize(("text", "columns"), WIDTHS)
def test_display_width_of_emoji_and_jamo_sequences(text: str, columns: int) -> None:
    assert display_width(text) == columns
    assert display_width("ab" + text + "c") == columns + 3  # the same inside other text


def test_no_cut_inside_a_hangul_syllable_or_a_keycap() -> None:
    jamo = "\u1100\u1161\u11a8"
    assert not can_cut(jamo, 1) and not can_cut(jamo, 2)
    assert not can_cut("\u1100\u1100\u1161", 1) and not can_cut("\u1100\uac00", 1)  # L x (L|LV)
    assert can_cut("\uac00\u1100", 1) and can_cut("a" + jamo, 1)
    keycap = "1\ufe0f\u20e3"
    assert not can_cut(keycap, 1) and not can_cut(keycap, 2)
    text = "x" + jamo * 6 + "\u2764\ufe0f" * 4
    for columns in range(len(text) * 2):
        head, tail = head_in_width(text, columns), tail_in_width(text, columns)
        assert display_width(head) <= columns and display_width(tail) <= columns
        assert can_cut(text, len(head)) and can_cut(text, len(text) - len(tail))


@pytest.mark.parametrize(
    "node",
    [
        CJK,
        "c/" + "服务" * 30,
        "cluster/pod/" + FAMILY * 12,
        "cluster/host/" + "nai\u0308ve-" * 10,
        "x" * 30 + FAMILY * 6,
    ],
)
def test_short_id_fits_its_columns_and_splits_no_character(node: str) -> None:
    short = short_id(node)
    assert display_width(short) <= 40
    head, _, tail = short.partition("…")
    assert node.startswith(head.removesuffix("/")) and node.endswith(tail)
    assert can_cut(node, len(node) - len(tail))
    assert "\u200d" not in (tail[:1], head[-1:])
    assert not tail or tail[0] not in "\u0308\u200d"


def _tree(nodes: list[tuple[str, str]], edges: list[tuple[str, str, str]], cause: str) -> str:
    graph = DependencyGraph(
        "g",
        [GraphNode(n, kind, "c", {"cluster": "c"}) for n, kind in nodes],
        [GraphEdge(*e) for e in edges],
    )
    alerting = {n for n, _ in nodes}
    depth, tree = propagation_tree(graph, cause, alerting, [cause])
    return tree_svg(depth, tree, dict(nodes), alerting)


def test_a_cjk_node_id_fits_its_box_and_stays_clear_of_the_next_column() -> None:
    """The hunt's drawing: a CJK service calling ``global/dns`` (its label ran ~122 px past its box
    when boxes were sized by code points)."""
    svg = _tree(
        [(CJK, "service"), ("global/dns", "dns"), ("global/registry", "registry")],
        [(CJK, "global/dns", "calls"), ("global/dns", "global/registry", "calls")],
        CJK,
    )
    boxes = re.findall(
        r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)" height="46".*?'
        r'font-family="ui-monospace[^>]*>([^<]*)</text>',
        svg,
        re.S,
    )
    assert len(boxes) == 3
    total = float(re.search(r'viewBox="0 0 ([\d.]+)', svg).group(1))
    spans = sorted((float(x), float(x) + float(w), label) for x, w, label in boxes)
    for i, (x0, x1, label) in enumerate(spans):
        label_end = x0 + 13 + _CHAR_W * display_width(label)
        assert label_end <= x1, (label, label_end, x1)  # inside its own box
        assert label_end <= total
        if i + 1 < len(spans):
            assert label_end < spans[i + 1][0]  # clear of the next column's box


@pytest.mark.parametrize("keep", [32, 24, 16, 7])
@pytest.mark.parametrize("where", [CJK, "c/pod/" + FAMILY * 9, "host/" + "nai\u0308ve-" * 9])
def test_timeline_node_part_is_cut_by_columns_on_whole_characters(where: str, keep: int) -> None:
    short = _cut_middle(where, keep)
    assert display_width(short) <= keep  # (by code points CJK's 19 characters took 36 columns)
    head, _, tail = short.partition("…")
    assert where.startswith(head) and where.endswith(tail)
    assert can_cut(where, len(head)) and can_cut(where, len(where) - len(tail))


@pytest.mark.parametrize("room", [40.0, 70.0, 95.0, 130.0])
def test_timeline_alert_name_is_cut_on_whole_characters(room: float) -> None:
    name = "Gpu" + "e\u0301" * 3 + "Xid" + FAMILY * 4 + "Errors" + "\u2764\ufe0f" * 3
    out = _cut_words(name, room, 10.0)
    head = out.removesuffix("…")
    assert name.startswith(head) and can_cut(name, len(head)), repr(head[-3:])


def test_text_width_counts_nothing_for_joiners_and_marks() -> None:
    assert text_width("e\u0301", 10) == text_width("e", 10)
    assert text_width(FAMILY, 10) == pytest.approx(40.0)  # four emoji of 1 em, no joiners
    assert text_width("节点", 10) == pytest.approx(20.0)


FLEET = """name: uni
clusters:
  - name: "训练集群-东"
    region: us-east
    nodes:
      - {name: h-0, template: dgx1-v100, cpu_milli: 80000, memory_mib: 524288}
  - name: "eu\\u202eue"
    region: eu-west
    nodes:
      - {name: v-0, template: dgx1-v100, cpu_milli: 80000, memory_mib: 524288}
  - name: plain
    region: "東南アジア"
    nodes:
      - {name: p-0, template: dgx1-v100, cpu_milli: 80000, memory_mib: 524288}
wan:
  - {between: ["训练集群-东", "eu\\u202eue"], latency_ms: 80.0, bandwidth_gbps: 2.5}
"""


def test_fleet_show_columns_line_up_for_wide_and_escaped_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topology = tmp_path / "fleet.yaml"
    topology.write_text(FLEET, encoding="utf-8")
    assert main(["fleet", "show", "--topology", str(topology)]) == 0
    lines = capsys.readouterr().out.splitlines()
    top = lines.index(next(line for line in lines if line.startswith("cluster ")))
    table = lines[top : top + 4]
    assert RLO not in "".join(lines) and "eu\\u202eue" in table[2]
    assert len({display_width(line) for line in table}) == 1, table
    # the region column starts at column 20 on every row
    for line, region in zip(table, ("region", "us-east", "eu-west", "東南アジア"), strict=True):
        assert display_width(line[: line.index(region)]) == 20, line
    wan = lines.index("WAN round trip (ms) / bandwidth (GB/s) between clusters:")
    rows = lines[wan + 1 : wan + 4]
    assert len({display_width(row) for row in rows}) == 1, rows
    for row, name in zip(rows, ("训练集群-东", terminal_safe("eu\u202eue"), "plain"), strict=True):
        assert row.startswith("  " + name)
    for i, row in enumerate(rows):  # the diagonal's "-" in column 26, 40, 54 (cells of 13 + 1)
        assert display_width(row[: row.index(" - ") + 1]) == 26 + 14 * i, rows


GOOGLE = "https://chat.googleapis.com/v1/spaces/X/messages?key=k"


def _sent_head(text: str, out: str) -> str:
    """What of ``text`` the cut message ``out`` shows, checked: a start of ``text`` that ends
    where :func:`can_cut` allows and in no escape, outside any code span, or inside one and
    closed by one added backtick; the marker outside every span."""
    assert out.endswith(TRUNCATED)
    head = out.removesuffix(TRUNCATED)
    assert head.count("`") % 2 == 0, head[-40:]  # the marker is outside any code span
    shown = head if text.startswith(head) else head.removesuffix("`")
    assert text.startswith(shown) and shown != head or text.startswith(head), head[-40:]
    assert can_cut(text, len(shown)) and not re.search(r"&[a-z]*$", shown), shown[-40:]
    return shown


def test_google_chat_cut_keeps_an_emoji_whole_and_closes_no_span_open() -> None:
    """The hunt's message: a node id of 700 family emoji (4,900 code points) in two code spans."""
    node = "n" + FAMILY * 700
    text = (
        f":rotating_light: Root cause of <http://fm/ui/incidents/1|incident 1>: "
        f"{code_span(node)}, score 0.9, cluster `c`\nPath: {code_span(node)}"
    )
    out = chat_body(GOOGLE, {"text": text})["text"]
    assert len(out.encode("utf-16-le")) // 2 <= 4096
    sent = text.replace(":rotating_light:", "\U0001f6a8")  # (Google Chat shows codes literally)
    head = _sent_head(sent, out)
    assert not head.endswith("\u200d")


def _long_path_row(fault_type: str) -> dict[str, object]:
    """A firing row whose path names 400 hosts (``x/host/h-0000 -> ...``: 6,796 characters)."""
    ids = [f"x/host/h-{i:04d}" for i in range(400)]
    annotations = {
        "path": " -> ".join(ids),
        "score": "0.9000",
        "fault_type": fault_type,
        "incident_url": "http://fm/ui/incidents/7",
    }
    labels = {"incident": "7", "cause_node": ids[0], "cause_kind": "host", "cluster": "us-east"}
    return {
        "state": "firing",
        "labels": labels,
        "annotations": annotations,
        "starts_at": "t",
        "ends_at": None,
    }


@pytest.mark.parametrize("fault_type", ["gpu_xid", "Xid`79", "a`b`c`"])
def test_google_chat_keeps_a_long_path_and_closes_its_span(fault_type: str) -> None:
    """A cut inside ``Path:``'s code span closes it (an earlier rule dropped the whole span: 158
    characters, no path); a backtick in the alert's metric neither opens a span nor fools the
    cut, and the cut splits no ``&gt;``."""
    text = Notifier.webhook_body(_long_path_row(fault_type))["text"]
    assert "`" not in text.split("`x/host/h-0000`", 1)[1].split("cluster `us-east`")[0]
    out = chat_body(GOOGLE, {"text": text})["text"]
    assert len(out.encode("utf-16-le")) // 2 <= 4096 and len(out.encode()) <= 32_000 - 64
    sent = text.replace(":rotating_light:", "\U0001f6a8")
    head = _sent_head(sent, out)
    path = head.split("\nPath: `", 1)[1]
    assert len(path) > 3_900 and out.removesuffix(TRUNCATED).endswith("`")


@pytest.mark.parametrize("cut_at", range(60, 160, 3))
def test_fit_text_never_ends_inside_a_sequence(cut_at: int) -> None:
    """Cuts that fall in an emoji run, then inside a code span with escapes: each keeps whole
    characters and escapes, and leaves no span open."""
    text = "`" + "e\u0301" * 5 + "` " + FAMILY * 3 + " `" + "a-&gt;e\u0301/" * 20 + "` end"
    out = _fit_text(text, 10_000, cut_at)
    assert len(out.encode("utf-16-le")) // 2 <= cut_at
    _sent_head(text, out)


def _annotations(node: str, cluster: str, path: list[str]) -> dict[str, str]:
    notifier = SimpleNamespace(settings=SimpleNamespace(public_url="http://fm"))
    inc = {"id": 7, "firing_count": 3, "method": "gat"}
    top = {"node": node, "score": 0.9, "fault_type": "nic_down", "path": path}
    return Notifier._annotations(notifier, inc, top, cluster)


def test_a_reversing_label_value_is_isolated_in_the_annotations() -> None:
    bad = f"c{RLO}x/host/h-0"
    path = [bad, "c/pod/p-0"]
    out = _annotations(bad, f"eu{RLO}ue", path)
    assert out["summary"] == f"Root cause of incident 7: {FSI}{bad}{PDI} (nic_down)"
    assert out["description"] == (
        f"3 firing alerts in {FSI}eu{RLO}ue{PDI}; FleetMind ranks {FSI}{bad}{PDI} first (gat)."
    )
    assert out["path"] == f"{FSI}{bad}{PDI} -> c/pod/p-0"
    row = {
        "state": "firing",
        "labels": {"incident": "7", "cause_node": bad, "cause_kind": "host", "cluster": "c"},
        "annotations": out,
        "starts_at": "2026-01-01T00:00:00Z",
        "ends_at": None,
    }
    body = Notifier.webhook_body(row)
    assert body["fleetmind"]["path"] == path and out[PATH_IDS]  # the ids round-trip
    assert body["fleetmind"]["cause_node"] == bad  # label values are not changed
    text = body["text"]
    assert f"`{FSI}{bad}{PDI}`" in text
    # every U+202E in the text is inside an isolate that closes before FleetMind's next word
    for m in re.finditer(RLO, text):
        assert text.rfind(FSI, 0, m.start()) > text.rfind(PDI, 0, m.start())


def test_plain_values_are_left_as_they_are() -> None:
    out = _annotations("c/host/h-0", "c", ["c/host/h-0", "c/pod/p-0"])
    assert out["summary"] == "Root cause of incident 7: c/host/h-0 (nic_down)"
    assert out["path"] == "c/host/h-0 -> c/pod/p-0" and PATH_IDS not in out
    assert FSI not in code_span("c/host/h-0")
