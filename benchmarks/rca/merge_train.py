"""More training topologies for the GAT benchmark: a dataset folder whose ``train`` split adds the
``train`` incidents of other generator seeds to a base folder's, everything else unchanged.

:mod:`benchmarks.rca.gat_dataset` keeps a prefix of each training topology's incidents, so one
generator seed holds at most about 106 per topology (44 topologies at ``--incidents 6700``). To go
past that without touching the validation and test splits, generate the ``train`` split of
another seed (``--val 0 --test 0 --large 0``) and merge it here; its graphs and incident ids are
renamed with a ``s<seed>-`` prefix so that they cannot collide with the base's::

    python -m benchmarks.rca.gat_dataset --out /tmp/s2 --seed 2 --train-per-graph 100 \\
        --val 0 --test 0 --large 0
    python -m benchmarks.rca.merge_train --base /tmp/sim0 --add /tmp/s2 --out /tmp/sim0_2

Held-out generator seeds (the benchmark's seed 1) must not be added; the script refuses a seed
given in ``--forbid`` (default 1).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from benchmarks.provenance import provenance
from fleetmind.cli.runner import run_main


def _renamed_graph(path: Path, prefix: str) -> dict:
    g = json.loads(path.read_text())
    g["name"] = prefix + g["name"]
    return g


def merge(
    base: Path, adds: list[Path], out: Path, forbid: set[int], record: dict[str, Any] | None = None
) -> dict[str, int]:
    """Write ``out``: ``base`` plus each of ``adds``' train split (renamed). Returns the split sizes.
    ``record`` (the command's provenance) is kept in ``meta.json`` beside the added folders.

    Raises:
        ValueError: ``out`` exists, an added folder has no ``train.jsonl`` or comes from a
            forbidden generator seed.
    """
    if out.exists():
        raise ValueError(f"{out} exists; choose a new folder")
    # the base's feature cache (hundreds of MB, keyed by its files) would never be read here
    shutil.copytree(base, out, ignore=shutil.ignore_patterns(".gat_cache"))
    meta = json.loads((out / "meta.json").read_text())
    added = []
    with (out / "train.jsonl").open("a") as train:
        for add in adds:
            seed = int(json.loads((add / "meta.json").read_text())["seed"])
            if seed in forbid or seed == int(meta["seed"]):
                raise ValueError(f"{add}: generator seed {seed} is held out or the base's own")
            if not (add / "train.jsonl").is_file():
                raise ValueError(f"{add} has no train.jsonl")
            prefix = f"s{seed}-"
            n = 0
            for line in (add / "train.jsonl").read_text().splitlines():
                if not line.strip():
                    continue
                inc = json.loads(line)
                gpath = out / "graphs" / f"{prefix}{inc['graph']}.json"
                if not gpath.is_file():
                    g = _renamed_graph(add / "graphs" / f"{inc['graph']}.json", prefix)
                    gpath.write_text(json.dumps(g, separators=(",", ":")))
                inc["graph"] = prefix + inc["graph"]
                inc["id"] = prefix + inc["id"]
                train.write(json.dumps(inc, separators=(",", ":")) + "\n")
                n += 1
            added.append({"folder": str(add), "seed": seed, "train_incidents": n})
    meta["merged_train"] = added
    if record is not None:
        meta["merged_by"] = record
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return {
        p.stem: sum(1 for ln in p.read_text().splitlines() if ln.strip())
        for p in sorted(out.glob("*.jsonl"))
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="dataset folder kept whole")
    ap.add_argument("--add", action="append", required=True, help="folder whose train to add")
    ap.add_argument("--out", required=True)
    ap.add_argument("--forbid", type=int, nargs="*", default=[1], help="held-out seeds")
    a = ap.parse_args(argv)
    try:
        counts = merge(
            Path(a.base),
            [Path(x) for x in a.add],
            Path(a.out),
            set(a.forbid),
            record=provenance(__spec__.name, argv),
        )
    except (ValueError, OSError, KeyError) as e:
        ap.error(str(e))
    print(f"wrote {a.out}: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.rca.merge_train"))
