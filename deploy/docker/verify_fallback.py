"""Fails an image build whose fallback model does not verify (SHA-256 and golden set).

The gateway refuses an unverified fallback at start anyway; checking at build time makes a
broken image fail in CI instead of answering without its fallback in production.
Usage: python verify_fallback.py [MANIFEST] (default: fallback_models/MANIFEST.json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gateway.fallback.check import check_model


def main(argv: list[str]) -> int:
    manifest = Path(argv[0] if argv else "fallback_models/MANIFEST.json")
    names = [m["name"] for m in json.loads(manifest.read_text(encoding="utf-8"))["models"]]
    failed = 0
    for name in names:
        verdict, _ = check_model(manifest, name)
        print(f"{name}: {'ok' if verdict.ok else 'REFUSED'}: {verdict.reason}")
        failed += not verdict.ok
    return 1 if failed or not names else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
