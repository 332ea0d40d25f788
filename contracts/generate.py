"""Regenerate the committed protobuf/gRPC stubs from the .proto files (the only generator).

Usage:
    python -m contracts.generate          # rewrite the committed stubs
    python -m contracts.generate --check  # exit 1 when the committed stubs differ from the .proto files

The .proto files import each other as ``ibex/...`` (the paths the Go proxy uses), so protoc runs
with ``-I contracts`` and the generated ``from ibex.`` imports are rewritten to ``from contracts.ibex.``.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

CONTRACTS_DIR = Path(__file__).resolve().parent
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
_IMPORT_RE = re.compile(r"^from ibex\.", re.MULTILINE)


def proto_files() -> list[Path]:
    return sorted(CONTRACTS_DIR.rglob("*.proto"))


def generate_into(out_dir: Path) -> list[Path]:
    """Run protoc on every .proto below contracts/ and write the stubs under out_dir."""
    from grpc_tools import protoc

    well_known = str(resources.files("grpc_tools") / "_proto")
    protos = [str(p.relative_to(CONTRACTS_DIR)) for p in proto_files()]
    args = [
        "protoc",
        f"-I{CONTRACTS_DIR}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    written = sorted(p for p in out_dir.rglob("*") if p.name.endswith(GENERATED_SUFFIXES))
    for path in written:
        path.write_text(_IMPORT_RE.sub("from contracts.ibex.", path.read_text()))
    return written


def _committed_stubs() -> list[Path]:
    return sorted(p for p in CONTRACTS_DIR.rglob("*") if p.name.endswith(GENERATED_SUFFIXES))


def check() -> list[str]:
    """Return the relative paths of stubs that are stale, missing or extra."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.relative_to(tmp).as_posix(): p for p in generate_into(Path(tmp))}
        committed = {p.relative_to(CONTRACTS_DIR).as_posix(): p for p in _committed_stubs()}
        problems = sorted(set(fresh) ^ set(committed))
        for rel in sorted(set(fresh) & set(committed)):
            if not filecmp.cmp(fresh[rel], committed[rel], shallow=False):
                problems.append(rel)
        return problems


def write() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for path in generate_into(Path(tmp)):
            target = CONTRACTS_DIR / path.relative_to(tmp)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m contracts.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when committed stubs are stale")
    args = parser.parse_args(argv)
    if not args.check:
        write()
        return 0
    problems = check()
    for rel in problems:
        print(f"stale generated stub: contracts/{rel} (run: python -m contracts.generate)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
