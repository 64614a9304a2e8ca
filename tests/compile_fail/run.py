#!/usr/bin/env python3
"""Compile-error tests: each snippet here must compile as written, and must fail to
compile with -DCKPT_SHOULD_FAIL, printing every line marked `// expect: <text>`
(or `// expect-gcc:` / `// expect-clang:` where the compilers spell it differently).

  run.py <compiler> [flags...] -- <snippet.cpp>...

The passing twin proves a failure comes from the one line the define switches on,
not from a broken snippet. The passing twins compile together, each snippet in a
namespace of its own (each compile parses all of ckpt, and CI has 2 cores); when
that fails, the snippets its messages name compile alone, so that the report says
what is wrong with each.
`--self-test` runs the harness on snippets that must be reported as broken (one that
compiles both ways, one whose message is wrong, one whose passing twin does not
compile), so the harness is checked too.
"""
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

INCLUDE = re.compile(r"^\s*#\s*include\b.*$", re.M)


def syntax_only(compiler, flags, path, *defines):
    # -fsyntax-only: templates are still instantiated (the static_asserts fire) but no
    # code is generated, which is most of a compile's time.
    return subprocess.run([compiler, *flags, *defines, "-fsyntax-only", path], capture_output=True, text=True)


def passing_twins_together(compiler, flags, snippets):
    """Compiles every snippet as written in one unit: the includes first (each is
    guarded), then each snippet's text, its includes blanked, inside its own
    namespace, with #line so that a message names the snippet's own file and line.
    (A snippet's includes are hoisted: they must not depend on CKPT_SHOULD_FAIL.)
    Returns the snippets to compile alone (none when the unit compiles)."""
    includes, bodies = [], []
    for k, path in enumerate(snippets):
        text = open(path).read()
        includes += INCLUDE.findall(text)
        body = INCLUDE.sub("", text)  # the same number of lines: #line stays true
        bodies.append(f'namespace ckpt_compile_fail_{k} {{\n#line 1 "{path}"\n{body}\n}}\n')
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as unit:
        unit.write("\n".join(dict.fromkeys(i.strip() for i in includes)) + "\n" + "".join(bodies))
    try:
        result = syntax_only(compiler, flags, unit.name)
    finally:
        os.unlink(unit.name)
    # The snippets the messages name (through #line): those compile alone to say what
    # is wrong; all of them when a message names none (one in a shared include).
    if result.returncode == 0:
        return []
    named = [p for p in snippets if f"{p}:" in result.stderr]
    return named or list(snippets)


def expectations(compiler, path):
    text = open(path).read()
    family = "clang" if "clang" in os.path.basename(compiler) else "gcc"
    return re.findall(r"//\s*expect:\s*(.+)", text) + re.findall(r"//\s*expect-" + family + r":\s*(.+)", text)


def check_failing(compiler, flags, path):
    """What is wrong with the snippet compiled with CKPT_SHOULD_FAIL, or None."""
    expects = expectations(compiler, path)
    if not expects:
        return f"{path}: has no '// expect:' line"
    bad = syntax_only(compiler, flags, path, "-DCKPT_SHOULD_FAIL")
    if bad.returncode == 0:
        return f"{path}: compiles with CKPT_SHOULD_FAIL, but must not"
    # clang quotes a static_assert's message as a string literal (\" for each quote
    # of Add ckpt::rename<"old.path", ...>); GCC prints it as written. Both read the
    # same to a person, so the expectations are matched against the unescaped text.
    said = bad.stderr.replace('\\"', '"')
    missing = [e.strip() for e in expects if e.strip() not in said]
    if missing:
        return f"{path}: the error does not say {missing}:\n{bad.stderr[:4000]}"
    return None


def check_twin(compiler, flags, path):
    ok = syntax_only(compiler, flags, path)
    return None if ok.returncode == 0 else f"{path}: the passing twin does not compile:\n{ok.stderr[-3000:]}"


def main(argv):
    self_test = "--self-test" in argv
    argv = [a for a in argv if a != "--self-test"]
    sep = argv.index("--")
    compiler, flags, snippets = argv[0], argv[1:sep], argv[sep + 1:]
    # Each compile parses all of ckpt: use every core, the twins' unit beside the
    # failing compiles.
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        together = pool.submit(passing_twins_together, compiler, flags, snippets)
        failing = [pool.submit(check_failing, compiler, flags, s) for s in snippets]
        suspects = together.result()
        twins = [check_twin(compiler, flags, s) if s in suspects else None for s in snippets]
        # A broken twin is the snippet's fault to report first: its failing compile
        # proves nothing then.
        results = [t or f.result() for t, f in zip(twins, failing)]
    failures = [f for f in results if f]
    if self_test:
        # Every self-test snippet is broken on purpose: the harness must catch each one.
        caught = len(failures)
        for f in failures:
            print("caught:", f.splitlines()[0])
        print(f"self-test: harness caught {caught} of {len(snippets)} broken snippets")
        print(f"{1 if caught == len(snippets) else 0} passed, {0 if caught == len(snippets) else 1} failed")
        return 0 if caught == len(snippets) else 1
    for f in failures:
        print("FAIL", f)
    print(f"{len(snippets) - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
