"""Finds a fallback model in ``fallback_models/MANIFEST.json`` and reads its file, hashing it.

The manifest is the trust root: the model file is served only if its bytes hash to the pinned
SHA-256. The file is read once, hashed while streaming, and the *same* bytes are then handed
to onnxruntime, so a file swapped between the check and the load can never slip through.
Formats and parsing are shared with the model build (`v2proto.manifest`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from v2proto.errors import ManifestError
from v2proto.manifest import ModelEntry, read_manifest

BLOCK_BYTES = 1 << 20
# a "small" model; anything bigger is refused unread
MAX_MODEL_BYTES = 256 * 1024 * 1024
# The verified fallback models shipped in the package (package data; in a checkout, a link to
# the repository's fallback_models/, which `replica build-models` writes).
BUNDLED_MANIFEST = Path(__file__).resolve().parent / "models" / "MANIFEST.json"


@dataclass(frozen=True, slots=True)
class FallbackFiles:
    """One fallback model's manifest entry and where its files are."""

    manifest: Path
    entry: ModelEntry

    @property
    def directory(self) -> Path:
        return self.manifest.parent

    @property
    def model_path(self) -> Path:
        return self.directory / self.entry.file

    @property
    def golden_path(self) -> Path:
        if self.entry.golden is None:
            raise ManifestError(f"model {self.entry.name!r} has no golden set in the manifest")
        return self.directory / self.entry.golden.file


def configured_manifest(configured: str | None) -> Path:
    """The config's ``fallback_manifest`` (already resolved by the loader), else the bundled one."""
    return manifest_file(Path(configured)) if configured is not None else BUNDLED_MANIFEST


def manifest_file(path: Path) -> Path:
    """``path`` itself, or the MANIFEST.json inside it if it is a directory."""
    return path / "MANIFEST.json" if path.is_dir() else path


def find_model(manifest: Path, name: str) -> FallbackFiles:
    """The manifest entry named ``name``; raises `ManifestError` if absent or without golden set."""
    manifest = manifest_file(manifest)
    entry = read_manifest(manifest).get(name)
    if entry.golden is None:
        # a fallback that cannot be checked is never trusted
        raise ManifestError(f"model {name!r} has no golden set in the manifest")
    return FallbackFiles(manifest, entry)


def read_hashed(path: Path, limit: int = MAX_MODEL_BYTES) -> tuple[bytes, str]:
    """The file's bytes and their SHA-256 (hex), streamed in blocks; `OSError` if unreadable."""
    digest = hashlib.sha256()
    chunks: list[bytes] = []
    size = 0
    with path.open("rb") as f:
        for block in iter(lambda: f.read(BLOCK_BYTES), b""):
            size += len(block)
            if size > limit:
                raise OSError(f"{path} is over {limit} bytes")
            digest.update(block)
            chunks.append(block)
    return b"".join(chunks), digest.hexdigest()


@dataclass(frozen=True, slots=True)
class FileStamp:
    """What cheaply tells a file changed: modification time and size (None: missing)."""

    mtime_ns: int
    size: int


def stamp(path: Path) -> FileStamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return FileStamp(st.st_mtime_ns, st.st_size)
