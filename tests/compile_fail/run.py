#!/usr/bin/env python3
"""Compile-error tests: each snippet here must compile as written, and must fail to
compile with -DCKPT_SHOULD_FAIL, printing every line marked `// expect: <text>`
(or `// expect-gcc:` / `// expect-clang:` where the compilers spell it differently).

  run.py <compiler> [flags...] -- <snippet.cpp>...

The passing twin proves a failure comes from the one line the define switches on,
not from a broken snippet. `--self-test` runs the harness on snippets that must be
reported as broken (one that compiles both ways, one whose message is wrong), so
the harness is checked too.
"""
import concurrent.futures
import os
import re
import subprocess
import sys


def check(compiler, flags, path):
    text = open(path).read()
    family = "clang" if "clang" in os.path.basename(compiler) else "gcc"
    expects = re.findall(r"//\s*expect:\s*(.+)", text) + re.findall(r"//\s*expect-" + family + r":\s*(.+)", text)
    if not expects:
        return f"{path}: has no '// expect:' line"
    # -fsyntax-only: templates are still instantiated (the static_asserts fire) but no
    # code is generated, which is most of a compile's time.
    ok = subprocess.run([compiler, *flags, "-fsyntax-only", path], capture_output=True, text=True)
    if ok.returncode != 0:
        return f"{path}: the passing twin does not compile:\n{ok.stderr[-3000:]}"
    bad = subprocess.run([compiler, *flags, "-DCKPT_SHOULD_FAIL", "-fsyntax-only", path],
                         capture_output=True, text=True)
    if bad.returncode == 0:
        return f"{path}: compiles with CKPT_SHOULD_FAIL, but must not"
    missing = [e.strip() for e in expects if e.strip() not in bad.stderr]
    if missing:
        return f"{path}: the error does not say {missing}:\n{bad.stderr[:4000]}"
    return None


def main(argv):
    self_test = "--self-test" in argv
    argv = [a for a in argv if a != "--self-test"]
    sep = argv.index("--")
    compiler, flags, snippets = argv[0], argv[1:sep], argv[sep + 1:]
    # Each snippet compiles twice and each compile parses all of ckpt: use every core.
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda s: check(compiler, flags, s), snippets))
    failures = [f for f in results if f]
    if self_test:
        # Every self-test snippet is broken on purpose: the harness must catch each one.
        caught = len(failures)
        print(f"self-test: harness caught {caught} of {len(snippets)} broken snippets")
        print(f"{1 if caught == len(snippets) else 0} passed, {0 if caught == len(snippets) else 1} failed")
        return 0 if caught == len(snippets) else 1
    for f in failures:
        print("FAIL", f)
    print(f"{len(snippets) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
