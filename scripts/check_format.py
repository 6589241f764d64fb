#!/usr/bin/env python3
"""The formatting CI enforces (issue 21): every tracked C++/CUDA source is what clang-format-14 (Debian
12's; other versions format differently) makes of it with the repository's .clang-format. A file that
is not gets its name printed; fix it with
`git ls-files '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh' | xargs clang-format-14 -i`.
The module graph's check is its sibling, scripts/check_layers.py. Exit status 1 on any violation; runs
in seconds, so scripts/test.sh runs both before the build.
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_EXT = (".cpp", ".h", ".hpp", ".cu", ".cuh", ".cc")


# A fixture that is unformatted on purpose: CTest's format_check_names_a_file runs this script on it.
FIXTURE = "tests/data/format_bad/"


def tracked_sources():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [
        p
        for p in out.splitlines()
        if p.endswith(SOURCE_EXT) and not p.startswith(FIXTURE) and os.path.exists(os.path.join(ROOT, p))
    ]


def check_format(files):
    tool = os.environ.get("CLANG_FORMAT") or shutil.which("clang-format-14") or shutil.which("clang-format")
    if not tool:
        print("format: SKIPPED: clang-format is not installed (apt-get install clang-format)")
        return []
    bad = []
    # Batches keep the command line short; --dry-run --Werror prints a diagnostic per changed spot.
    for i in range(0, len(files), 64):
        batch = files[i : i + 64]
        r = subprocess.run([tool, "--dry-run", "--Werror", *batch], cwd=ROOT, capture_output=True, text=True)
        if r.returncode != 0:
            for line in r.stderr.splitlines():
                m = re.match(r"^([^:]+):\d+:\d+: error:", line)
                if m and m.group(1) not in bad:
                    bad.append(m.group(1))
    return [f"{f}: not clang-formatted" for f in bad]


def main():
    # --root DIR: every source under DIR (tests point it at the fixture), else git's tracked sources.
    if len(sys.argv) == 3 and sys.argv[1] == "--root":
        base = os.path.abspath(sys.argv[2])
        files = sorted(
            os.path.relpath(os.path.join(d, n), ROOT) for d, _, ns in os.walk(base) for n in ns if n.endswith(SOURCE_EXT)
        )
    else:
        files = tracked_sources()
    errors = check_format(files)
    for e in errors:
        print("format:", e)
    if errors:
        print(f"format: {len(errors)} file(s) not clang-formatted")
        return 1
    print(f"format: {len(files)} sources clang-formatted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
