#!/usr/bin/python3
"""Checks that ckpt's headers include only downward: each header of include/ckpt may
include headers of its own layer or of a lower one, never of a higher one.

The layers are the table under "## Layers" in docs/design.md, lowest first; this
script reads them from there, so the table is the one list. A row's second column
names folders (`io/`: every header under it) and headers (`index.hpp`), relative to
include/ckpt; the longest name that matches a header places it. A header that no row
places fails the check: a new header is given its layer in the table first.

It also fails an `#include` of a ckpt header that stands below the first line of code
of a file: an include placed in the middle of a file (under a `#if CKPT_DEFINE_API`
block, say) is how arrows that run back up were hidden before.

  tools/check-layers.py            # prints what it checked, exit status 1 on a violation

Run by `make check-layers` and by the ctest case `layers`. Python 3 standard library only.
"""

import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
INCLUDE = REPO / "include"
DESIGN = REPO / "docs" / "design.md"

# Arrows allowed to run back up, each (from, to) relative to include/ckpt. Keep it
# empty: an entry that no longer matches an include fails the check, so that it goes.
EXCEPTIONS: set[tuple[str, str]] = set()

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
ROW_RE = re.compile(r"^\|(.*)\|(.*)\|\s*$")
NAME_RE = re.compile(r"`([^`]+)`")


def read_layers(design: pathlib.Path):
    """[(layer name, [names])], lowest first, from the table under '## Layers'."""
    lines = design.read_text(encoding="utf-8").splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == "## Layers")
    except StopIteration:
        sys.exit(f"check-layers: {design.relative_to(REPO)} has no '## Layers' section")
    layers, in_table = [], False
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        m = ROW_RE.match(line.strip())
        if not m:
            if in_table:
                break  # the table ended
            continue
        in_table = True
        layer, names = m.group(1).strip(), NAME_RE.findall(m.group(2))
        if not names or set(layer) <= set("-: "):
            continue  # the header row or the rule under it
        layers.append((layer, names))
    if not layers:
        sys.exit(f"check-layers: no table under '## Layers' in {design.relative_to(REPO)}")
    return layers


def layer_of(header: str, rank_of: dict):
    """The (rank, name) whose name matches header the longest, or None."""
    best = None
    for name, rank in rank_of.items():
        if header == name or (name.endswith("/") and header.startswith(name)):
            if best is None or len(name) > len(best):
                best = name
    return None if best is None else rank_of[best]


def own_includes(path: pathlib.Path, rel: str):
    """[(line number, included header relative to include/ckpt, after code)]."""
    out, code = [], False
    in_comment = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        s = line.strip()
        if in_comment:
            in_comment = "*/" not in s
            continue
        if not s or s.startswith("//"):
            continue
        if s.startswith("/*"):
            in_comment = "*/" not in s
            continue
        m = INCLUDE_RE.match(line)
        if m:
            name = m.group(2)
            if m.group(1) == '"':  # relative to the including file, as the compiler looks first
                local = (INCLUDE / "ckpt" / rel).parent / name
                if local.is_file():
                    name = "ckpt/" + local.resolve().relative_to((INCLUDE / "ckpt").resolve()).as_posix()
            if name.startswith("ckpt/"):
                out.append((n, name[len("ckpt/"):], code))
            continue
        if not s.startswith("#"):
            code = True
    return out


def main() -> int:
    layers = read_layers(DESIGN)
    rank_of = {}
    for rank, (layer, names) in enumerate(layers):
        for name in names:
            if name in rank_of:
                sys.exit(f"check-layers: docs/design.md places {name} in two layers")
            rank_of[name] = (rank, layer)
    headers = sorted(p.relative_to(INCLUDE / "ckpt").as_posix() for p in (INCLUDE / "ckpt").rglob("*.hpp"))
    problems, used, arrows = [], set(), 0
    for h in headers:
        if layer_of(h, rank_of) is None:
            problems.append(f"include/ckpt/{h}: in no layer of docs/design.md's table")
    for h in headers:
        here = layer_of(h, rank_of)
        for n, target, after_code in own_includes(INCLUDE / "ckpt" / h, h):
            where = f"include/ckpt/{h}:{n}"
            if not (INCLUDE / "ckpt" / target).is_file():
                problems.append(f"{where}: includes ckpt/{target}, which does not exist")
                continue
            if after_code:
                problems.append(f"{where}: includes ckpt/{target} below the code; includes stay at the top")
            there = layer_of(target, rank_of)
            if here is None or there is None:
                continue
            arrows += 1
            if there[0] > here[0]:
                if (h, target) in EXCEPTIONS:
                    used.add((h, target))
                    continue
                problems.append(f"{where}: includes ckpt/{target}, which runs up from layer "
                                f"'{here[1]}' to '{there[1]}'")
    for h, target in sorted(EXCEPTIONS - used):
        problems.append(f"tools/check-layers.py: the exception {h} -> {target} no longer occurs: remove it")
    for p in problems:
        print(p)
    print(f"check-layers: {len(headers)} headers in {len(layers)} layers, {arrows} includes, "
          f"{len(used)} allowed by the exceptions, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
