#!/usr/bin/env python3
"""Re-run the commands of the walk-throughs in examples/*.md and put their real output back in place.

Each ```console block is run with bash in a scratch directory (with this checkout's `ndcp` first on PATH and the
terminal width the examples were written at); the ```text block right after it is replaced by what the commands
printed (stderr first: progress lines, then stdout; trailing spaces dropped). The prose around the blocks is not
touched: read the diff.
Usage: python scripts/refresh_examples.py [examples/FILE.md ...]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```console\n(?P<console>.*?)```\n\n```text\n(?P<text>.*?)```", re.S)
WIDTH = "110"


def commands(console: str) -> str:
    """The shell script of a console block: `$ ` starts a command; other lines continue it (heredocs included)."""
    lines = []
    for line in console.splitlines():
        lines.append(line[2:] if line.startswith("$ ") else line)
    return "\n".join(lines) + "\n"


def run(script: str, workdir: str) -> str:
    env = {**os.environ, "COLUMNS": WIDTH, "PYTHONPATH": str(ROOT), "PATH": f"{workdir}/bin:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", script], cwd=workdir, env=env, capture_output=True, text=True)
    return "\n".join(line.rstrip() for line in (done.stderr + done.stdout).splitlines())


def refresh(path: Path) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        (Path(workdir) / "bin").mkdir()
        launcher = Path(workdir) / "bin" / "ndcp"
        launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ndcp "$@"\n')
        launcher.chmod(0o755)
        text = path.read_text()
        out = BLOCK.sub(lambda m: "```console\n" + m["console"] + "```\n\n```text\n"
                        + run(commands(m["console"]), workdir).rstrip("\n") + "\n```", text)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(out)
    tmp.replace(path)  # written whole or not at all
    print(f"{path}: {len(BLOCK.findall(text))} blocks re-run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, metavar="examples/FILE.md",
                        help="walk-throughs to refresh (default: every examples/*.md)")
    paths = parser.parse_args().paths or sorted((ROOT / "examples").glob("*.md"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"no such file: {', '.join(missing)}")
    for path in paths:
        refresh(path)


if __name__ == "__main__":
    main()
