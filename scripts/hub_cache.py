"""Lays a model folder out as huggingface_hub's cache holds a downloaded model, so that its Hugging Face name
resolves offline (HF_HOME=HOME HF_HUB_OFFLINE=1): how the committed demo report used all-MiniLM-L6-v2 as the
`--reference` column on a machine that cannot reach the Hub.

    python scripts/hub_cache.py --model ../shared/data/models/all-MiniLM-L6-v2 \\
        --name sentence-transformers/all-MiniLM-L6-v2 --home runs/hf-home
    HF_HOME=runs/hf-home HF_HUB_OFFLINE=1 bertkit demo --reference sentence-transformers/all-MiniLM-L6-v2
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path


def lay_out(model: Path, name: str, home: Path) -> Path:
    """HOME/hub/models--org--name/{refs/main, snapshots/COMMIT/*, blobs/*}; the blobs link to the files (no copies)."""
    repo = home / "hub" / ("models--" + name.replace("/", "--"))
    commit = hashlib.sha1(b"".join(sorted(p.name.encode() for p in model.iterdir()))).hexdigest()  # a stand-in commit id
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for f in sorted(model.iterdir()):
        if not f.is_file():
            continue
        blob = repo / "blobs" / hashlib.sha256(f"{f.resolve()}".encode()).hexdigest()
        if not blob.exists():
            blob.symlink_to(f.resolve())
        link = snapshot / f.name
        if not link.exists():
            link.symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="the model folder")
    parser.add_argument("--name", required=True, help="its Hugging Face name, org/name")
    parser.add_argument("--home", type=Path, required=True, help="the HF_HOME to lay it out in")
    args = parser.parse_args()
    print(lay_out(args.model, args.name, args.home))


if __name__ == "__main__":
    main()
