"""The OCI image layout: written from layers made of folders, and read back (index, each
platform's manifest and config, a platform's root filesystem unpacked from its layers).

The format is the OCI image specification's (opencontainers/image-spec: image-layout.md,
image-index.md, manifest.md, config.md, layer.md).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class Layer:
    """A gzip'd tar of one folder, made once per build stage."""

    path: Path
    digest: str  # of the compressed file: the blob's name
    diff_id: str  # of the tar: what the image config lists
    size: int

    def describe(self) -> dict[str, Any]:
        return {"digest": self.digest, "diff_id": self.diff_id, "size": self.size}


class _Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...


class _Digesting(io.RawIOBase):
    """Write-through to another file, hashing and counting what passes."""

    def __init__(self, target: _Sink) -> None:
        super().__init__()
        self.target = target
        self.hash = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer) -> int:
        view = memoryview(data)
        self.hash.update(view)
        self.size += view.nbytes
        return self.target.write(view.tobytes())

    def digest(self) -> str:
        return f"sha256:{self.hash.hexdigest()}"


def write_layer(tree: Path, path: Path) -> Layer:
    """Every entry under ``tree`` (not ``tree`` itself), in sorted order, owners and modes and
    times as they are: the time of a source file is what its ``.pyc`` was checked against."""
    with path.open("wb") as file:
        compressed = _Digesting(file)
        # No name and no time in the gzip header: the same tar always compresses alike.
        with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0) as zipped:
            plain = _Digesting(zipped)
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as archive:
                for folder, subfolders, files in os.walk(tree):
                    subfolders.sort()
                    for name in [*subfolders, *sorted(files)]:
                        entry = Path(folder) / name
                        info = archive.gettarinfo(entry, entry.relative_to(tree).as_posix())
                        info.uname = info.gname = ""
                        if info.isreg():
                            with entry.open("rb") as content:
                                archive.addfile(info, content)
                        else:
                            archive.addfile(info)
    return Layer(path, compressed.digest(), plain.digest(), compressed.size)


def _put(dest: Path, data: bytes, media_type: str) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    (dest / "blobs" / "sha256" / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def _json_bytes(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, indent=None, separators=(",", ":"), sort_keys=True).encode()


def write(
    dest: Path,
    reference: str,
    images: Sequence[tuple[Mapping[str, str], Mapping[str, Any], Sequence[Layer]]],
) -> None:
    """An OCI layout at ``dest`` whose ``index.json`` tags one multi-platform index
    ``reference``: per (platform, config without its rootfs, layers) one image."""
    (dest / "blobs" / "sha256").mkdir(parents=True)
    (dest / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    entries = []
    for platform, config, layers in images:
        for layer in layers:
            target = blob(dest, layer.digest)
            if not target.exists():
                try:  # the stages' layers are on the same file system: link, do not copy
                    os.link(layer.path, target)
                except OSError:
                    shutil.copyfile(layer.path, target)
        full = {**config, "rootfs": {"type": "layers", "diff_ids": [x.diff_id for x in layers]}}
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": _put(dest, _json_bytes(full), CONFIG),
            "layers": [{"mediaType": LAYER, "digest": x.digest, "size": x.size} for x in layers],
        }
        entries.append({**_put(dest, _json_bytes(manifest), MANIFEST), "platform": platform})
    index = _put(
        dest, _json_bytes({"schemaVersion": 2, "mediaType": INDEX, "manifests": entries}), INDEX
    )
    top = {"schemaVersion": 2, "manifests": [{**index, "annotations": {REF_NAME: reference}}]}
    (dest / "index.json").write_bytes(_json_bytes(top))


@dataclass(frozen=True)
class Manifest:
    """One platform's image in the layout."""

    arch: str
    config: dict[str, Any]  # the image configuration (config.md)
    layers: tuple[Path, ...]  # blob files, base layer first


def blob(layout: Path, digest: str) -> Path:
    algorithm, encoded = digest.split(":", 1)
    return layout / "blobs" / algorithm / encoded


def _json(layout: Path, digest: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(blob(layout, digest).read_bytes())
    return loaded


def manifests(layout: Path, reference: str) -> dict[str, Manifest]:
    """The platforms' manifests of the multi-platform index tagged ``reference``."""
    top: dict[str, Any] = json.loads((layout / "index.json").read_text())
    tagged = [m for m in top["manifests"] if m.get("annotations", {}).get(REF_NAME) == reference]
    if len(tagged) != 1 or tagged[0]["mediaType"] != INDEX:
        raise ValueError(f"{layout}: no multi-platform index tagged {reference!r}")
    found: dict[str, Manifest] = {}
    for entry in _json(layout, tagged[0]["digest"])["manifests"]:
        manifest = _json(layout, entry["digest"])
        layers = manifest["layers"]
        found[entry["platform"]["architecture"]] = Manifest(
            arch=entry["platform"]["architecture"],
            config=_json(layout, manifest["config"]["digest"]),
            layers=tuple(blob(layout, layer["digest"]) for layer in layers),
        )
    return found


def unpack(manifest: Manifest, destination: Path) -> None:
    """The platform's root filesystem, as a runtime lays it out from the layers.

    The build's layers only add files: a whiteout would mean a layer deletes, which this does
    not apply, so it refuses one rather than unpack something else.
    """
    for layer in manifest.layers:
        with tarfile.open(layer) as archive:
            if any(Path(name).name.startswith(".wh.") for name in archive.getnames()):
                raise ValueError(f"{layer.name}: a whiteout; this unpacker only adds")
            # The layers are the build's own: owners, modes and links are kept as made.
            archive.extractall(destination, filter="fully_trusted")
