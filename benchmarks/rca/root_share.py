"""Root share of every alert name in an RCA dataset, and the name-table baseline learned on train.

The **root share** of an alert name is the share of its firings that are at the incident's root
node, a firing being one (incident, node, alert token) triple (storm copies of one alert at one node
count once); a token is ``alertname`` or ``alertname:xid``. A name with root share 1.0 gives the root
away. The **name table** (``rca.gbdt.NameTableAnalyzer``) scores a node by ``P(root | token at the
node)`` counted on ``train`` and is scored on ``--split`` (held-out topologies).

Run: ``python -m benchmarks.rca.root_share DATA --json benchmarks/results/rca/rca_root_share_<name>.json
[--md docs/rca-data.md]`` (the Markdown table goes between the ``root-share`` markers of the file).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.provenance import load_now, provenance
from fleetmind import argtypes
from fleetmind.cli.runner import run_main

_MARK = ("<!-- root-share:{name}:begin -->", "<!-- root-share:{name}:end -->")


def markdown(res: dict, min_firings: int) -> str:
    """The root-share table of ``res`` (tokens with at least ``min_firings`` firings)."""
    lines = [
        f"Dataset `{res['data']}` (split `{res['split']}`, {res['n_incidents']} incidents); "
        f"name-table AC@1 learned on `train`, scored on `{res['eval_split']}`: "
        f"**{res['name_table']['ac@1']:.3f}** (non-silent roots "
        f"{res['name_table']['non_silent_ac@1']:.3f}).",
        "",
        "| alert token | firings | at root | root share |",
        "| --- | ---: | ---: | ---: |",
    ]
    for t, r in res["root_share"].items():
        if r["firings"] >= min_firings:
            lines.append(f"| `{t}` | {r['firings']} | {r['at_root']} | {r['root_share']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("--split", default="train", help="split the shares are counted on")
    ap.add_argument("--eval-split", default="test", help="split the name table is scored on")
    ap.add_argument("--json", type=argtypes.output_file, required=True)
    ap.add_argument("--md", default=None, help="Markdown file with root-share markers to update")
    ap.add_argument("--name", default=None, help="marker name (default: the data folder's name)")
    ap.add_argument("--min-firings", type=argtypes.nonnegative_int, default=20)
    a = ap.parse_args(argv)
    load0 = load_now()

    from fleetmind.data.rca_dataset import load_dataset
    from fleetmind.rca.gbdt import GBDTConfig, NameTableAnalyzer, root_shares
    from fleetmind.rca.metrics import evaluate_methods

    ds = load_dataset(a.data, sorted({"train", a.split, a.eval_split}))
    shares = root_shares(ds.split(a.split), ds.graphs)
    nt = NameTableAnalyzer(GBDTConfig(max_train=10**9))
    nt.train(ds.split("train"), ds.graphs)
    ev = evaluate_methods(ds.split(a.eval_split), {"name_table": nt}, ds.graphs)["methods"]
    m = ev["name_table"]
    res = {
        **provenance(__spec__.name, argv, load_start=load0, packages=("scikit-learn",)),
        "benchmark": "rca_root_share",
        "data": str(a.data),
        "data_meta": {k: ds.meta.get(k) for k in ("seed", "n_incidents", "sim")},
        "split": a.split,
        "eval_split": a.eval_split,
        "n_incidents": len(ds.split(a.split)),
        "name_table": {
            "ac@1": m["ac@1"],
            "ac@3": m["ac@3"],
            "non_silent_ac@1": m["by_root"]["non_silent"]["ac@1"],
            "n": len(ds.split(a.eval_split)),
        },
        "max_root_share_min_firings": max(
            (r["root_share"] for r in shares.values() if r["firings"] >= a.min_firings),
            default=0.0,
        ),
        "min_firings": a.min_firings,
        "root_share": shares,
    }
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    print(
        f"name table AC@1 {m['ac@1']:.3f} (non-silent {res['name_table']['non_silent_ac@1']:.3f}); "
        f"max root share (>= {a.min_firings} firings) {res['max_root_share_min_firings']:.3f}"
    )
    if a.md:
        name = a.name or Path(a.data).name
        b, e = (x.format(name=name) for x in _MARK)
        p = Path(a.md)
        text = p.read_text() if p.exists() else ""
        block = f"{b}\n{markdown(res, a.min_firings)}\n{e}"
        if b in text and e in text:
            text = text[: text.index(b)] + block + text[text.index(e) + len(e) :]
        else:
            text = text.rstrip() + "\n\n" + block + "\n"
        p.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.rca.root_share"))
