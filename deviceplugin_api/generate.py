"""Regenerate the Python code (and type stubs) from the .proto files of this package.

Run: ``.venv/bin/python -m deviceplugin_api.generate [--out DIR]``. The output is
committed; a test regenerates it into a temporary directory and fails when it differs.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from grpc_tools import protoc

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent
PROTOS = (
    "deviceplugin_api/v1beta1/api.proto",
    "deviceplugin_api/podresources/v1/api.proto",
    "deviceplugin_api/pluginregistration/v1/api.proto",
    "deviceplugin_api/dra/v1/api.proto",
    "deviceplugin_api/dra/v1beta1/api.proto",
    "deviceplugin_api/dra_health/v1alpha1/api.proto",
)


def generate(out: Path) -> list[Path]:
    """Write ``*_pb2.py``, ``*_pb2.pyi``, ``*_pb2_grpc.py`` and ``*_pb2_grpc.pyi`` under out."""
    bin_dir = str(Path(sys.executable).parent)
    stubs = shutil.which("protoc-gen-mypy", path=bin_dir)
    grpc_stubs = shutil.which("protoc-gen-mypy_grpc", path=bin_dir)
    if stubs is None or grpc_stubs is None:
        raise SystemExit("protoc-gen-mypy not found: install the test extras (mypy-protobuf)")
    include = str(Path(protoc.__file__).parent / "_proto")
    for proto in PROTOS:
        code = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{ROOT}",
                f"-I{include}",
                f"--python_out={out}",
                f"--grpc_python_out={out}",
                f"--plugin=protoc-gen-mypy={stubs}",
                f"--mypy_out={out}",
                f"--plugin=protoc-gen-mypy_grpc={grpc_stubs}",
                f"--mypy_grpc_out={out}",
                proto,
            ]
        )
        if code != 0:
            raise SystemExit(f"protoc failed on {proto} (exit {code})")
    suffixes = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
    return [out / f"{proto.removesuffix('.proto')}{s}" for proto in PROTOS for s in suffixes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT)
    for path in generate(parser.parse_args().out):
        print(path)


if __name__ == "__main__":
    main()
