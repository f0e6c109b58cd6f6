#!/usr/bin/env python3
"""Small operations on an OCI image layout (image-spec image-layout.md) for hack/build-image.sh.

  oci_layout.py attach-sbom LAYOUT SBOM EPOCH
      Stores the CycloneDX JSON SBOM as an OCI 1.1 artifact whose subject is the layout's
      image index (image-spec manifest.md, "artifactType", "subject"; the empty config
      descriptor of "Guidance for an Empty Descriptor") and lists that artifact manifest in
      index.json, as `oras attach --oci-layout` does: a referrer of the image index, found
      by `oras discover --oci-layout` and copied with the image by `oras cp -r`.
  oci_layout.py sizes LAYOUT
      One line per platform of the image index: "<arch> <bytes of manifest + config + layers>".
  oci_layout.py index-digest LAYOUT
      The image index's digest.
"""

import datetime
import hashlib
import json
import sys
from pathlib import Path

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CYCLONEDX = "application/vnd.cyclonedx+json"
EMPTY = "application/vnd.oci.empty.v1+json"


def dumps(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def put_blob(layout: Path, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest.split(":", 1)[1]
    path.write_bytes(data)
    return digest


def blob(layout: Path, digest: str) -> bytes:
    algo, hex_ = digest.split(":", 1)
    return (layout / "blobs" / algo / hex_).read_bytes()


def image_index(layout: Path) -> dict:
    entries = [m for m in json.loads((layout / "index.json").read_text())["manifests"] if m["mediaType"] == INDEX]
    if len(entries) != 1:
        sys.exit(f"oci_layout: expected one image index in {layout}/index.json, found {len(entries)}")
    return entries[0]


def attach_sbom(layout: Path, sbom: Path, epoch: int) -> None:
    subject = image_index(layout)
    data = sbom.read_bytes()
    json.loads(data)  # a JSON document, or fail here
    layer = {
        "mediaType": CYCLONEDX,
        "digest": put_blob(layout, data),
        "size": len(data),
        "annotations": {"org.opencontainers.image.title": "reloadlet.cdx.json"},
    }
    empty = b"{}"
    created = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    manifest = dumps({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "artifactType": CYCLONEDX,
        "config": {"mediaType": EMPTY, "digest": put_blob(layout, empty), "size": len(empty), "data": "e30="},
        "layers": [layer],
        "subject": {k: subject[k] for k in ("mediaType", "digest", "size")},
        "annotations": {"org.opencontainers.image.created": created},
    })
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text())
    index["manifests"].append({
        "mediaType": MANIFEST,
        "digest": put_blob(layout, manifest),
        "size": len(manifest),
        "artifactType": CYCLONEDX,
    })
    index_path.write_bytes(dumps(index))


def sizes(layout: Path) -> None:
    index = json.loads(blob(layout, image_index(layout)["digest"]))
    for m in index["manifests"]:
        manifest = json.loads(blob(layout, m["digest"]))
        total = m["size"] + manifest["config"]["size"] + sum(layer["size"] for layer in manifest["layers"])
        print(m["platform"]["architecture"], total)


def main() -> None:
    match sys.argv[1:]:
        case ["attach-sbom", layout, sbom, epoch]:
            attach_sbom(Path(layout), Path(sbom), int(epoch))
        case ["sizes", layout]:
            sizes(Path(layout))
        case ["index-digest", layout]:
            print(image_index(Path(layout))["digest"])
        case _:
            sys.exit(__doc__)


if __name__ == "__main__":
    main()
