#!/usr/bin/python3
"""Generates single_include/ckpt/ (the single-header edition) from the multi-header tree.

The single-header edition comes in the parts the multi-header tree opts into, so that a
program compiles only the parts it includes:

  ckpt.hpp             the core: save, restore, the native format (include/ckpt/ckpt.hpp)
  migrate.hpp          migrations                          (include/ckpt/migrate.hpp)
  manager.hpp          CheckpointManager                   (include/ckpt/manager.hpp)
  formats.hpp          the interop formats                 (include/ckpt/formats.hpp)
  storage/memory.hpp   mem:// storage                      (include/ckpt/storage/memory.hpp)
  storage/posix.hpp    the local-directory storage         (include/ckpt/storage/posix.hpp)
  all.hpp              every part above                    (include/ckpt/all.hpp)
  eigen.hpp            Eigen's leaves (needs Eigen 3.4)    (include/ckpt/eigen.hpp)

Each part is one file: its root header with every include of one of ckpt's own headers
(`#include <ckpt/...>`, or `#include "..."` that resolves to a file under include/)
replaced by that header's text, the first time it is seen, in order; later includes of
the same header are dropped. A part other than the core includes the core file first
and leaves out what the core holds; an include of another part's root becomes an
include of that part's file. A header that two parts both hold (a manager and a format
sharing a helper) is inlined in each, inside an include guard named after its path, so
that a program may include any set of parts. Third-party and standard includes stay as
they are. The output depends only on the headers' contents (no dates, no absolute
paths), so regenerating on any machine gives the same bytes.

Usage:
  tools/amalgamate.py                  # writes every part into single_include/
  tools/amalgamate.py -o DIR           # writes them into DIR instead
"""

import argparse
import os
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
INCLUDE_DIR = REPO / "include"
DEFAULT_OUTPUT = REPO / "single_include"

CORE = pathlib.Path("ckpt/ckpt.hpp")
# The parts, by their root header in include/ (and their file's path in the output).
PARTS = [
    CORE,
    pathlib.Path("ckpt/migrate.hpp"),
    pathlib.Path("ckpt/manager.hpp"),
    pathlib.Path("ckpt/formats.hpp"),
    pathlib.Path("ckpt/storage/memory.hpp"),
    pathlib.Path("ckpt/storage/posix.hpp"),
    pathlib.Path("ckpt/all.hpp"),
    pathlib.Path("ckpt/eigen.hpp"),
]

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
PRAGMA_ONCE_RE = re.compile(r"^\s*#\s*pragma\s+once\b")
IF_RE = re.compile(r"^\s*#\s*if(n?def)?\b")
ELSE_RE = re.compile(r"^\s*#\s*(else|elif)\b")
ENDIF_RE = re.compile(r"^\s*#\s*endif\b")

# The first lines of every part: how a program compiles ckpt with the single header.
USAGE = """\
//
// How to build with it:
//   * Header-only (the default): #include "ckpt.hpp" and nothing else; every unit that
//     saves or restores compiles ckpt's machinery.
//   * Compiled once: in exactly one .cpp of the program,
//         #define CKPT_IMPLEMENTATION
//         #include "ckpt.hpp"        // and every other part the program includes
//     compiles ckpt's machinery (and registers the formats of the parts it includes);
//     compile every other unit of the program with -DCKPT_SEPARATE_COMPILATION: they
//     get declarations and the templates they use only. The implementation unit may be
//     compiled with -DCKPT_SEPARATE_COMPILATION too.
//   * Pay for what you include: ckpt.hpp is the core (save, restore, the native format);
//     migrate.hpp, manager.hpp, formats.hpp (Orbax, t5x, zarr, Flax, safetensors,
//     TensorFlow), storage/memory.hpp and storage/posix.hpp add the parts of the same
//     names in include/ckpt, all.hpp all of them. restore detects every format whose
//     part the program includes (with CKPT_IMPLEMENTATION: the implementation unit)."""

# Turns a unit with CKPT_IMPLEMENTATION into the unit that builds the library, as
# include/ckpt/src.hpp does for the multi-header tree.
PROLOGUE = """\
#if defined(CKPT_IMPLEMENTATION) && !defined(CKPT_BUILDING_LIBRARY)
#if defined(CKPT_API)
#error "ckpt: #define CKPT_IMPLEMENTATION before the first #include of any part of ckpt in its unit"
#endif
#if !defined(CKPT_SEPARATE_COMPILATION)
#define CKPT_SEPARATE_COMPILATION 1
#endif
#define CKPT_BUILDING_LIBRARY 1
#endif"""


def guard_name(rel: pathlib.Path) -> str:
    return "CKPT_SINGLE_" + re.sub(r"[^A-Za-z0-9]", "_", rel.as_posix()).upper()


class Amalgamator:
    def __init__(self, include_dir: pathlib.Path, part: pathlib.Path, seen: dict):
        self.include_dir = include_dir.resolve()
        self.part = part
        # Each inlined header with the preprocessor conditionals it was inlined under
        # (outermost first). A later include is dropped where those conditionals hold
        # too; a header first inlined inside an #if (the machinery, under
        # #if CKPT_DEFINE_API) is inlined again where it is included outside it, and
        # its guard keeps its text once whichever way the conditionals go.
        self.seen: dict[pathlib.Path, list[tuple[str, ...]]] = {k: list(v) for k, v in seen.items()}
        self.inlined: list[pathlib.Path] = []

    def own_header(self, including: pathlib.Path, delim: str, name: str):
        """The include/-relative path of an own header, or None for third-party ones."""
        candidates = []
        if delim == '"':
            candidates.append((self.include_dir / including).parent / name)
        if delim == '"' or name.startswith("ckpt/"):
            candidates.append(self.include_dir / name)
        for c in candidates:
            c = c.resolve()
            if c.is_file() and self.include_dir in c.parents:
                return c.relative_to(self.include_dir)
        if name.startswith("ckpt/"):
            raise SystemExit(f"amalgamate: {including}: #include <{name}> not found under include/")
        return None

    def part_include(self, target: pathlib.Path) -> str:
        rel = os.path.relpath(target.as_posix(), self.part.parent.as_posix())
        return f'#include "{pathlib.PurePosixPath(rel)}"'

    def dropped(self, target: pathlib.Path, context: tuple[str, ...]) -> bool:
        """Whether target's text is already in force in this context."""
        return any(context[:len(c)] == c for c in self.seen.get(target, ()))

    def expand(self, rel: pathlib.Path, is_root: bool, outer: tuple[str, ...] = ()) -> list[str]:
        self.seen.setdefault(rel, []).append(outer)
        if not is_root:
            self.inlined.append(rel)
        out = []
        conds: list[str] = []  # the preprocessor conditionals open at this line of this file
        text = (self.include_dir / rel).read_text(encoding="utf-8")
        for line in text.splitlines():
            if IF_RE.match(line):
                conds.append(f"{rel}:{line.strip()}")
            elif ELSE_RE.match(line):
                conds[-1] += " / " + line.strip()
            elif ENDIF_RE.match(line):
                conds.pop()
            if PRAGMA_ONCE_RE.match(line):
                continue  # the part's own #pragma once and the guards below replace it
            m = INCLUDE_RE.match(line)
            if m:
                target = self.own_header(rel, m.group(1), m.group(2))
                if target is not None:
                    context = outer + tuple(conds)
                    if self.dropped(target, context):
                        continue
                    if self.part != CORE and target in PARTS:
                        out.append(self.part_include(target))
                        continue
                    g = guard_name(target)
                    out.append(f"// begin {target.as_posix()}")
                    out.append(f"#ifndef {g}")
                    out.append(f"#define {g}")
                    out.extend(self.expand(target, is_root=False, outer=context))
                    out.append(f"#endif  // {g}")
                    out.append(f"// end {target.as_posix()}")
                    continue
            out.append(line)
        return out


def generate(include_dir: pathlib.Path = INCLUDE_DIR) -> dict[pathlib.Path, str]:
    """Every part's text, by its path relative to the output directory."""
    for p in PARTS:
        if not (include_dir / p).is_file():
            raise SystemExit(f"amalgamate: {include_dir / p} does not exist")
    core_headers: dict[pathlib.Path, list[tuple[str, ...]]] = {}
    files = {}
    for part in PARTS:
        a = Amalgamator(include_dir, part, {} if part == CORE else core_headers)
        # A part the core holds already is the core. A part's own text is inside its
        # guard too: the core may hold it under an #if (the posix storage, which the
        # native writer includes).
        body = []
        if not a.dropped(part, ()):
            g = guard_name(part)
            body = [f"#ifndef {g}", f"#define {g}"] + a.expand(part, is_root=True) + [f"#endif  // {g}"]
        if part == CORE:
            core_headers = a.seen
        name = "the core" if part == CORE else f"the part {part.relative_to('ckpt').as_posix()}"
        header = [
            f"// ckpt single-header edition, {name}: GENERATED FILE, DO NOT EDIT.",
            "// Generated by tools/amalgamate.py (`make single-include`) from",
            f"// include/{part.as_posix()} and the {len(a.inlined)} ckpt headers it includes"
            + ("" if part == CORE else " beyond the core") + ".",
        ] + USAGE.splitlines() + ["#pragma once", ""] + PROLOGUE.splitlines() + [""]
        if part != CORE:
            header.append(a.part_include(CORE))
        files[part] = "\n".join(header + body) + "\n"
    return files


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default=str(DEFAULT_OUTPUT),
                   help="output directory (default: %(default)s)")
    args = p.parse_args()
    out_dir = pathlib.Path(args.output)
    for rel, text in generate().items():
        out = out_dir / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        # newline="\n": identical bytes whatever the platform
        with open(out, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
