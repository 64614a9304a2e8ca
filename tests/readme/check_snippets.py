#!/usr/bin/env python3
"""Every ```cpp block of README.md and docs/*.md compiles.

The blocks are kept, line for line, in tests/readme/*.cpp (each in a namespace of its
own, a fragment inside a function that declares what it uses). This script

1. fails when a ```cpp block of the docs is found in none of those files (the text of
   each line must match; trailing spaces aside), naming the block and the first line
   that differs from the closest place;
2. compiles the files with -fsyntax-only (templates are instantiated, nothing is
   generated: the snippets are checked, not run).

usage: check_snippets.py ROOT [--text-only] [CXX FLAG... -- ]

ROOT is the repository. With a compiler and its flags, every tests/readme/*.cpp is
compiled with them. Sections of those files that need something the build may lack
are guarded by macros that CMake defines where it found it (CKPT_README_MPI,
CKPT_README_S3); PROBES below are found by compiling a line.
"""

import glob
import os
import subprocess
import sys
import tempfile
import time

# Macros defined when their code compiles with the given flags: API that this tree
# may not have yet, so that its snippets are compiled as soon as it does.
PROBES = {
    "CKPT_README_PARTIAL": "#include <ckpt/options.hpp>\nckpt::RestoreOptions o{.partial = true};\n",
}


def doc_blocks(root):
    """(file, first line number, [lines]) of every ```cpp block."""
    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    for path in files:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            if lines[i].strip() == "```cpp":
                j = i + 1
                while j < len(lines) and lines[j].strip() != "```":
                    j += 1
                yield os.path.relpath(path, root), i + 2, [l.rstrip() for l in lines[i + 1:j]]
                i = j
            i += 1


def find(block, sources):
    """(file, line) where block starts, or the closest miss as (None, (file, line, matched))."""
    best = (None, 0, -1)
    for name, lines in sources.items():
        for start in range(len(lines)):
            n = 0
            while n < len(block) and start + n < len(lines) and lines[start + n] == block[n]:
                n += 1
            if n == len(block):
                return name, start + 1
            if n > best[2]:
                best = (name, start + 1, n)
    return None, best


def compile_ok(cxx_flags, source_text):
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write(source_text)
    try:
        return subprocess.run(cxx_flags + ["-fsyntax-only", f.name], capture_output=True).returncode == 0
    finally:
        os.unlink(f.name)


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    root, rest = argv[0], argv[1:]
    text_only = rest[:1] == ["--text-only"]
    compiler = [] if text_only else rest[:rest.index("--")] if "--" in rest else rest

    snippet_files = sorted(glob.glob(os.path.join(root, "tests", "readme", "*.cpp")))
    sources = {}
    for path in snippet_files:
        with open(path, encoding="utf-8") as f:
            sources[os.path.relpath(path, root)] = [l.rstrip() for l in f.read().split("\n")]

    failures = 0
    count = 0
    for doc, line, block in doc_blocks(root):
        count += 1
        where = find(block, sources)
        if where[0] is None:
            failures += 1
            name, at, matched = where[1]
            print(f"{doc}:{line}: this ```cpp block is in no file of tests/readme/: copy it there, "
                  f"where it compiles (as it stands, the docs show code no test compiles)")
            if name is not None and matched > 0:
                print(f"  closest: {name}:{at}, the same for {matched} of {len(block)} lines; "
                      f"the docs' line {line + matched}:\n    {block[matched]!r}\n"
                      f"  there:\n    {sources[name][at - 1 + matched] if at - 1 + matched < len(sources[name]) else '(end of file)'!r}")
    print(f"check_snippets: {count} ```cpp blocks in README.md and docs/*.md, {count - failures} found in tests/readme/")

    if compiler:
        defines = []
        for macro, code in PROBES.items():
            if compile_ok(compiler, code):
                defines.append(f"-D{macro}=1")
            else:
                print(f"check_snippets: {macro} not defined: this tree does not compile\n    {code!r}\n"
                      f"  so the snippets under #if {macro} are not compiled")
        for path in snippet_files:
            cmd = compiler + defines + ["-fsyntax-only", path]
            t0 = time.monotonic()
            r = subprocess.run(cmd)
            seconds = time.monotonic() - t0
            if r.returncode != 0:
                failures += 1
                print(f"check_snippets: {os.path.relpath(path, root)} does not compile ({seconds:.1f} s):\n  "
                      + " ".join(cmd))
            else:
                print(f"check_snippets: {os.path.relpath(path, root)} compiles ({seconds:.1f} s, "
                      f"{' '.join(d for d in compiler if d.startswith('-DCKPT_README')) or 'no MPI, no S3'})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
