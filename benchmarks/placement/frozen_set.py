"""The frozen evaluation set: fresh openb variants fixed before any model of the ablation was trained.

The set (``frozen_set.yaml`` beside this file) lists each trace's generation arguments (kind, level,
generator seed, source ``default``) and the SHA-256 of the generated CSV, plus the evaluation seeds.
The CSVs are not committed: generation is deterministic, and ``--check`` (and
``tests/test_openb_variants.py``) regenerate them and compare the hashes.

    python -m benchmarks.placement.frozen_set --write [--dir runs/frozen_set]   # generate + check
    python -m benchmarks.placement.frozen_set --check                            # hashes only

Rule of use (docs/ppo.md): no policy is scored on these traces until the model under test is final;
the ablation (``benchmarks/placement/ablation.py``) is the only code that reads them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from fleetmind.argtypes import check_creatable
from fleetmind.cli.runner import run_main
from fleetmind.data.openb_variants import generate_variant, sha256_text, write_variant

MANIFEST = Path(__file__).with_name("frozen_set.yaml")
REPO = Path(__file__).resolve().parents[2]
DEFAULT_DIR = REPO / "runs" / "frozen_set"


def load_manifest(path: Path = MANIFEST) -> dict:
    """The manifest: ``{"eval_seeds": [...], "traces": [{"name", "kind", "level", "seed", "source",
    "sha256"}, ...]}``."""
    return yaml.safe_load(path.read_text())


def generate(entry: dict) -> str:
    """The CSV text of one manifest entry."""
    return generate_variant(
        entry["kind"], entry["level"], entry["seed"], source=entry.get("source", "default")
    )


def write_all(out_dir: Path, manifest: dict | None = None) -> dict[str, Path]:
    """Generate every trace into ``out_dir`` (``<name>.csv``), checking each hash; returns the paths.

    Raises:
        RuntimeError: a generated file's hash differs from the manifest's.
    """
    manifest = manifest or load_manifest()
    paths = {}
    for e in manifest["traces"]:
        p = out_dir / f"{e['name']}.csv"
        text = generate(e)
        got = sha256_text(text)
        if e.get("sha256") and got != e["sha256"]:
            raise RuntimeError(f"{e['name']}: generated sha256 {got} != manifest {e['sha256']}")
        if not (p.is_file() and sha256_text(p.read_text()) == got):
            write_variant(p, text)
        paths[e["name"]] = p
    return paths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="generate the CSVs into --dir")
    ap.add_argument("--check", action="store_true", help="regenerate in memory and compare hashes")
    ap.add_argument(
        "--dir", default=None, help=f"output folder for --write (default: {DEFAULT_DIR})"
    )
    ap.add_argument(
        "--record", action="store_true", help="write the hashes into the manifest (freezing only)"
    )
    a = ap.parse_args()
    if a.dir is not None:
        if not a.write:
            ap.error("--dir names the output folder of --write; give --write too")
        if Path(a.dir).exists() and not Path(a.dir).is_dir():
            ap.error(f"--dir {a.dir}: a file is there, where a folder is needed")
        check_creatable(Path(a.dir) / "x.csv", "--dir")
    m = load_manifest()
    if a.record:
        for e in m["traces"]:
            e["sha256"] = sha256_text(generate(e))
        MANIFEST.write_text(
            MANIFEST.read_text().split("# --- traces ---")[0]
            + "# --- traces ---\n"
            + yaml.safe_dump({"traces": m["traces"]}, sort_keys=False)
        )
        print(f"recorded {len(m['traces'])} hashes in {MANIFEST}")
        return 0
    if a.write:
        for name, p in write_all(Path(a.dir or DEFAULT_DIR), m).items():
            print(f"{name}: {p}")
        return 0
    bad = [e["name"] for e in m["traces"] if sha256_text(generate(e)) != e.get("sha256")]
    print("all hashes match" if not bad else f"hash mismatch: {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, prog="benchmarks.placement.frozen_set"))
