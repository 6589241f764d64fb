#!/usr/bin/env python3
"""The layout CI enforces (issue 21): formatting and the module graph.

1. Formatting: every tracked C++/CUDA source is what clang-format (the repository's .clang-format)
   makes of it. A file that is not gets its name printed; fix it with
   `git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs clang-format -i`.
2. Layering: a file under src/<module>/ includes headers only from its own module, from the modules
   its CMake target depends on (the DEPS of `onecard_add_module`, followed transitively), and from
   include/onecard/. The DEPS lists are the one declaration of the graph; this script reads them, so a
   new edge is added in CMake, where the linker needs it anyway.

Exit status 1 on any violation. Runs in seconds; scripts/test.sh runs it before building.
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_EXT = (".cpp", ".h", ".hpp", ".cu", ".cuh", ".cc")


def tracked_sources():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines() if p.endswith(SOURCE_EXT) and os.path.exists(os.path.join(ROOT, p))]


def check_format(files):
    tool = os.environ.get("CLANG_FORMAT") or shutil.which("clang-format-14") or shutil.which("clang-format")
    if not tool:
        print("layout: format check SKIPPED: clang-format is not installed (apt-get install clang-format)")
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


MODULE_RE = re.compile(r"onecard_add_module\(\s*onecard_(\w+)\s+DEPS\s+([^)]*)\)", re.S)
# A library declared by hand in a module's directory (src/parallel's NCCL library): its sources and
# its target_link_libraries are a file-level exception to the directory's module.
EXTRA_LIB_RE = re.compile(r"add_library\(\s*onecard_(\w+)\s+(?:STATIC|SHARED|OBJECT)\s+([^)]*)\)", re.S)


def module_graph():
    """({module dir (relative to src/): module dirs it may include}, {src file: module dirs it may
    include} for the sources of hand-declared libraries), from the CMake DEPS."""
    deps, extra = {}, {}
    for dirpath, _, names in os.walk(os.path.join(ROOT, "src")):
        if "CMakeLists.txt" not in names:
            continue
        text = open(os.path.join(dirpath, "CMakeLists.txt")).read()
        rel = os.path.relpath(dirpath, os.path.join(ROOT, "src"))
        for m in MODULE_RE.finditer(text):
            deps[rel] = set(re.findall(r"\bonecard_(\w+)", m.group(2)))
        for m in EXTRA_LIB_RE.finditer(text):
            link = re.search(r"target_link_libraries\(\s*onecard_%s\s+([^)]*)\)" % m.group(1), text, re.S)
            targets = set(re.findall(r"\bonecard_(\w+)", link.group(1))) if link else set()
            for src in re.findall(r"\$\{CMAKE_CURRENT_SOURCE_DIR\}/(\S+)", m.group(2)):
                extra["src/" + os.path.normpath(os.path.join(rel, src))] = (rel, targets)
    # Target names are the directory with '/' spelled '_' (backend/cpu -> backend_cpu).
    by_target = {d.replace("/", "_"): d for d in deps}
    direct = {d: {by_target[t] for t in ts if t in by_target} for d, ts in deps.items()}

    def reach(starts):
        seen, todo = set(starts), list(starts)
        while todo:
            for n in direct.get(todo.pop(), ()):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen

    closure = {d: reach([d]) for d in direct}
    files = {f: reach([d] + [by_target[t] for t in ts if t in by_target]) for f, (d, ts) in extra.items()}
    return closure, files


INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def owning_module(path, modules):
    """The module directory a path under src/ belongs to (the longest matching prefix)."""
    best = None
    for m in modules:
        if path == m or path.startswith(m + "/"):
            if best is None or len(m) > len(best):
                best = m
    return best


def check_layers(files):
    graph, file_graph = module_graph()
    modules = sorted(graph)
    errors = []
    for f in files:
        if not f.startswith("src/"):
            continue
        here = owning_module(f[len("src/") :], modules)
        if here is None:
            errors.append(f"{f}: not inside any module declared with onecard_add_module")
            continue
        text = open(os.path.join(ROOT, f), errors="replace").read()
        for inc in INCLUDE_RE.findall(text):
            if inc.startswith("onecard/"):
                continue  # the public headers (include/onecard/)
            if os.path.exists(os.path.join(ROOT, os.path.dirname(f), inc)):
                continue  # a sibling header, spelled relative to the including file
            there = owning_module(inc, modules)
            if there is None:
                errors.append(f'{f}: includes "{inc}", which is in no module')
            elif there not in file_graph.get(f, graph[here]):
                errors.append(
                    f'{f}: includes "{inc}" but {here} does not depend on {there} '
                    f"(add it to DEPS in src/{here}/CMakeLists.txt if the edge is meant)"
                )
    return errors


def main():
    files = tracked_sources()
    errors = check_format(files) + check_layers(files)
    for e in errors:
        print("layout:", e)
    if errors:
        print(f"layout: {len(errors)} violation(s)")
        return 1
    print(f"layout: {len(files)} sources formatted, includes follow the module graph")
    return 0


if __name__ == "__main__":
    sys.exit(main())
