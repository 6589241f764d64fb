#!/usr/bin/env python3
"""Layering check: every #include "dir/..." in src/ must name a module the including module depends
on (directly or through its dependencies), as declared by onecard_add_module(... DEPS ...) in the
module's CMakeLists.txt — the build files are the one statement of the module graph, so this reads
them rather than a second list. include/onecard/ (the public engine API) belongs to onecard_engine.
Exit status 1 with one line per violation; CTest runs it (layers_check, well under a second).
Usage: check_layers.py [--root DIR]"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if len(sys.argv) == 3 and sys.argv[1] == "--root":  # tests point it at a fixture tree
    ROOT = os.path.abspath(sys.argv[2])
SRC = os.path.join(ROOT, "src")
DECL = re.compile(r"onecard_add_module\(\s*(\w+)\s+DEPS\s+([^)]*)\)", re.S)
# A file a module's CMakeLists takes out into a library of its own (add_library(NAME STATIC file) and
# target_link_libraries(NAME ... deps), e.g. parallel/nccl_comm.cpp): checked against that library's deps.
EXTRA_LIB = re.compile(r"add_library\(\s*(\w+)\s+STATIC\s+([^)]*)\)", re.S)
LINKS = r"target_link_libraries\(\s*{}\s+([^)]*)\)"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
EXTS = (".h", ".hpp", ".cpp", ".cu", ".cuh")


def extra_libraries():
    """{path relative to ROOT: set of onecard_* deps} for files built into a library of their own."""
    files = {}
    for dirpath, _, names in os.walk(SRC):
        if "CMakeLists.txt" not in names:
            continue
        text = open(os.path.join(dirpath, "CMakeLists.txt"), encoding="utf-8").read()
        for lib, srcs in EXTRA_LIB.findall(text):
            links = re.search(LINKS.format(re.escape(lib)), text, re.S)
            deps = {d for d in (links.group(1).split() if links else []) if d.startswith("onecard_")}
            for src in srcs.split():
                src = src.replace("${CMAKE_CURRENT_SOURCE_DIR}", dirpath)
                files[os.path.relpath(src, ROOT)] = (lib, deps)
    return files


def modules():
    """{module: (dir relative to src, set of direct onecard_* deps)}"""
    found = {}
    for dirpath, _, files in os.walk(SRC):
        if "CMakeLists.txt" not in files:
            continue
        text = open(os.path.join(dirpath, "CMakeLists.txt"), encoding="utf-8").read()
        for name, deps in DECL.findall(text):
            rel = os.path.relpath(dirpath, SRC).replace(os.sep, "/")
            found[name] = (rel, {d for d in deps.split() if d.startswith("onecard_")})
    return found


def closure(mods):
    out = {}
    for m in mods:
        seen, todo = set(), list(mods[m][1])
        while todo:
            d = todo.pop()
            if d in seen:
                continue
            seen.add(d)
            todo.extend(mods.get(d, ("", set()))[1])
        out[m] = seen
    return out


def owner_of(path, by_dir):
    """The module whose directory is the longest prefix of an include path (or None)."""
    best = None
    for d, m in by_dir.items():
        if (path == d or path.startswith(d + "/")) and (best is None or len(d) > len(best[0])):
            best = (d, m)
    return best[1] if best else None


def main():
    mods = modules()
    if not mods:
        print("check_layers: no onecard_add_module declarations found under src/", file=sys.stderr)
        return 1
    deps = closure(mods)
    by_dir = {rel: m for m, (rel, _) in mods.items()}
    by_dir["onecard"] = "onecard_engine"  # include/onecard/: the public engine API
    extra = extra_libraries()
    extra_deps = {}
    for path, (lib, direct) in extra.items():
        seen = set(direct)
        for d in direct:
            seen |= deps.get(d, set())
        extra_deps[path] = (lib, seen)
    bad = []
    for m, (rel, _) in sorted(mods.items()):
        for dirpath, _, files in os.walk(os.path.join(SRC, rel)):
            # A nested module's files belong to it, not to the enclosing directory's module.
            here = os.path.relpath(dirpath, SRC).replace(os.sep, "/")
            if owner_of(here, {d: x for d, x in by_dir.items() if d != "onecard"}) != m:
                continue
            for f in sorted(files):
                if not f.endswith(EXTS):
                    continue
                p = os.path.join(dirpath, f)
                lib, allowed = extra_deps.get(os.path.relpath(p, ROOT), (m, deps[m]))
                for inc in INCLUDE.findall(open(p, encoding="utf-8", errors="replace").read()):
                    target = owner_of(inc, by_dir)
                    if target is None or target == m or target in allowed:
                        continue
                    bad.append(f"{os.path.relpath(p, ROOT)}: includes \"{inc}\" ({target}), "
                               f"but {lib} does not depend on {target} (src/{rel}/CMakeLists.txt)")
    for line in bad:
        print(line)
    print(f"check_layers: {len(mods)} modules, {len(bad)} include(s) crossing the declared graph",
          file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
