#!/usr/bin/env python3
"""The durability protocol of a save, checked on its system calls (ALICE/CrashMonkey style).

Runs save_once under `strace -f` for three saves: a new checkpoint, an overwrite of an
existing one (--force) and a CheckpointManager step (which also prunes an old step).
From the trace it checks the protocol:

  * every file of a staging directory is fsynced after its last write, and every
    directory of it after its last entry changed, before the rename that publishes it;
  * the directory the rename happened in is fsynced after the rename, before the
    process ends.

Then it replays crash states: after each prefix of the recorded operations, it builds
the directory tree a crash at that point could leave, in three ways:

  synced      only what was fsynced survives (directory entries as of each directory's
              last fsync, file data as of each file's last fsync; unsynced data is lost);
  metadata    every directory operation survived but unsynced file data did not (what a
              file system ordering metadata before data can leave);
  all         everything survived (the process was killed, the machine was not);

and checks with `save_once check` that each state opens as the old checkpoint, the new
one, or (for a new path) no checkpoint at all: never a broken one.

Usage: check_durability.py --helper save_once --work DIR [--strace strace]
Exit 0: all good; 1: a violation (printed); 77: strace is missing (ctest skips).
"""

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys

SKIP = 77


class Node:
    __slots__ = ("id", "kind", "entries", "durable_entries", "version", "durable_version", "content", "origin",
                 "final_version", "initial_content")

    def __init__(self, nid, kind):
        self.id = nid
        self.kind = kind            # "dir" or "file"
        self.entries = {}           # dir: name -> Node (what the process sees)
        self.durable_entries = {}   # dir: name -> Node (as of its last fsync)
        self.version = 0            # file: bumped by every write
        self.durable_version = 0    # file: version at its last fsync
        self.content = None         # file: its bytes before the run (initial) or at its end
        self.origin = None          # "initial" or "created"
        self.final_version = 0      # file: version at the end of the run
        self.initial_content = None # file: its bytes before the run (initial files)


class Model:
    """A file system tree below `root`, as the process sees it and as fsync made it durable."""

    def __init__(self, root):
        self.root_path = os.path.abspath(root)
        self.next_id = 0
        self.nodes = []
        self.root = self.new("dir", "initial")
        self.load(self.root, self.root_path)

    def clone(self):
        """The same initial tree with the same node ids (nodes are created in the same order)."""
        m = Model.__new__(Model)
        m.root_path, m.next_id, m.nodes = self.root_path, 0, []
        m.root = m.new("dir", "initial")

        def copy(src, dst):
            for name in sorted(src.entries):
                c = src.entries[name]
                n = m.new(c.kind, "initial")
                n.content = c.content
                if c.kind == "dir":
                    copy(c, n)
                dst.entries[name] = n
                dst.durable_entries[name] = n
        copy(self.root, m.root)
        return m

    def new(self, kind, origin):
        n = Node(self.next_id, kind)
        n.origin = origin
        self.next_id += 1
        self.nodes.append(n)
        return n

    def load(self, node, path):
        for name in sorted(os.listdir(path)):
            p = os.path.join(path, name)
            if os.path.islink(p):
                continue
            if os.path.isdir(p):
                child = self.new("dir", "initial")
                self.load(child, p)
            else:
                child = self.new("file", "initial")
                with open(p, "rb") as f:
                    child.content = f.read()
            node.entries[name] = child
            node.durable_entries[name] = child

    def lookup(self, path):
        """(parent Node, name) of an absolute path below root, or (None, None)."""
        path = os.path.normpath(path)
        if path == self.root_path or not path.startswith(self.root_path + "/"):
            return None, None
        parts = path[len(self.root_path) + 1:].split("/")
        node = self.root
        for part in parts[:-1]:
            node = node.entries.get(part)
            if node is None or node.kind != "dir":
                return None, None
        return node, parts[-1]

    def node_at(self, path):
        path = os.path.normpath(path)
        if path == self.root_path:
            return self.root
        parent, name = self.lookup(path)
        return parent.entries.get(name) if parent else None

    def path_of(self, target):
        """The path of a node as the process sees it now, or None once unlinked."""
        def walk(node, path):
            for name, child in node.entries.items():
                p = path + "/" + name
                if child is target:
                    return p
                if child.kind == "dir":
                    r = walk(child, p)
                    if r:
                        return r
            return None
        return walk(self.root, self.root_path)


# --- the trace ---------------------------------------------------------------------

LINE = re.compile(r"^(\d+)\s+(.*)$")
CALL = re.compile(r"^([a-z0-9_]+)\((.*)\)\s+=\s+(-?\d+|0x[0-9a-f]+|\?)(?:<(.*?)>)?")
FD_PATH = re.compile(r"^-?\d+<(.*)>$")


def split_args(s):
    """Top-level comma-separated arguments of a strace call (quotes, brackets, <...>)."""
    out, depth, cur, quote, esc = [], 0, [], False, False
    for ch in s:
        if quote:
            cur.append(ch)
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                quote = False
            continue
        if ch == '"':
            quote = True
        elif ch in "[{(<":
            depth += 1
        elif ch in "]})>":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if cur:
        out.append("".join(cur).strip())
    return out


def unquote(s):
    if s.endswith("..."):
        s = s[:-3]
    assert s.startswith('"') and s.endswith('"'), s
    return bytes(s[1:-1], "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8", "surrogateescape")


def fd_path(arg):
    m = FD_PATH.match(arg)
    return m.group(1) if m else None


def resolve(dirarg, patharg):
    """An absolute path from a (dirfd, path) pair; with -y, dirfds print as AT_FDCWD</cwd> or 3</dir>."""
    p = unquote(patharg)
    if p.startswith("/"):
        return os.path.normpath(p)
    m = re.match(r"^(?:AT_FDCWD|-?\d+)<(.*)>$", dirarg)
    base = m.group(1) if m else os.getcwd()  # a bare relative path: the helper runs in our cwd
    return os.path.normpath(os.path.join(base, p))


def parse_trace(text):
    """Completed system calls, in the order they completed: (pid, name, args, result, result_path)."""
    pending = {}
    calls = []
    for raw in text.splitlines():
        m = LINE.match(raw)
        if not m:
            continue
        pid, rest = m.group(1), m.group(2)
        if rest.endswith("<unfinished ...>"):
            pending[pid] = rest[: -len("<unfinished ...>")].rstrip()
            continue
        r = re.match(r"^<\.\.\. ([a-z0-9_]+) resumed>(.*)$", rest)
        if r:
            rest = pending.pop(pid, r.group(1) + "(") + r.group(2)
        c = CALL.match(rest)
        if not c:
            continue
        name, args, result, rpath = c.group(1), c.group(2), c.group(3), c.group(4)
        if result == "?" or result.startswith("-"):
            continue  # failed (or never returned): no effect
        calls.append((pid, name, split_args(args), result, rpath))
    return calls


# --- operations on the model ------------------------------------------------------

class Violation(Exception):
    pass


def to_ops(calls):
    """The calls that change the tree or make it durable, as (kind, ...) tuples."""
    ops = []
    for pid, name, a, result, rpath in calls:
        if name in ("mkdir", "mkdirat"):
            path = resolve("AT_FDCWD", a[0]) if name == "mkdir" else resolve(a[0], a[1])
            ops.append(("mkdir", path))
        elif name in ("open", "openat", "creat"):
            flags = a[1] if name == "open" else (a[2] if name == "openat" else "O_CREAT|O_TRUNC")
            path = resolve("AT_FDCWD", a[0]) if name in ("open", "creat") else resolve(a[0], a[1])
            if "O_CREAT" in flags or "O_TRUNC" in flags:
                ops.append(("open_create", path, "O_TRUNC" in flags, "O_DIRECTORY" in flags))
        elif name in ("write", "writev", "pwrite64", "pwritev", "pwritev2", "ftruncate", "fallocate"):
            p = fd_path(a[0])
            if p:
                ops.append(("write", p))
        elif name in ("truncate",):
            ops.append(("write", resolve("AT_FDCWD", a[0])))
        elif name in ("fsync", "fdatasync"):
            p = fd_path(a[0])
            if p:
                ops.append(("fsync", p))
        elif name in ("rename", "renameat", "renameat2"):
            if name == "rename":
                src, dst, flags = resolve("AT_FDCWD", a[0]), resolve("AT_FDCWD", a[1]), ""
            else:
                src, dst = resolve(a[0], a[1]), resolve(a[2], a[3])
                flags = a[4] if len(a) > 4 else ""
            ops.append(("rename", src, dst, flags))
        elif name in ("unlink", "rmdir"):
            ops.append(("unlink", resolve("AT_FDCWD", a[0])))
        elif name == "unlinkat":
            ops.append(("unlink", resolve(a[0], a[1])))
        elif name in ("link", "linkat", "symlink", "symlinkat", "mknod", "mknodat"):
            ops.append(("unsupported", name))
    return ops


def apply(model, op, check_protocol, events):
    kind = op[0]
    if kind == "mkdir":
        parent, name = model.lookup(op[1])
        if parent is not None:
            parent.entries[name] = model.new("dir", "created")
    elif kind == "open_create":
        _, path, trunc, is_dir = op
        parent, name = model.lookup(path)
        if parent is None or is_dir:
            return
        node = parent.entries.get(name)
        if node is None:
            parent.entries[name] = model.new("file", "created")
        elif trunc and node.kind == "file":
            node.version += 1
    elif kind == "write":
        node = model.node_at(op[1])
        if node is not None and node.kind == "file":
            node.version += 1
    elif kind == "fsync":
        node = model.node_at(op[1])
        if node is None:
            return
        if node.kind == "dir":
            node.durable_entries = dict(node.entries)
            events.append(("dir_synced", op[1]))
        else:
            node.durable_version = node.version
    elif kind == "rename":
        _, src, dst, flags = op
        sp, sn = model.lookup(src)
        dp, dn = model.lookup(dst)
        if sp is None or dp is None or sn not in sp.entries:
            return
        node = sp.entries[sn]
        publishes = os.path.basename(src).startswith(".tmp-") and not os.path.basename(dst).startswith(".tmp-")
        if publishes and check_protocol:
            unsynced = []

            def walk(n, p):
                if n.kind == "file":
                    if n.durable_version != n.version:
                        unsynced.append(p)
                else:
                    if {k: v.id for k, v in n.entries.items()} != {k: v.id for k, v in n.durable_entries.items()}:
                        unsynced.append(p + "/")
                    for k, c in n.entries.items():
                        walk(c, p + "/" + k)
            walk(node, src)
            if unsynced:
                raise Violation("renamed %s -> %s before these were durable: %s" % (src, dst, ", ".join(unsynced)))
            events.append(("published", os.path.dirname(dst), dst))
        if "RENAME_EXCHANGE" in flags:
            other = dp.entries[dn]
            sp.entries[sn], dp.entries[dn] = other, node
        else:
            del sp.entries[sn]
            dp.entries[dn] = node
    elif kind == "unlink":
        parent, name = model.lookup(op[1])
        if parent is not None:
            parent.entries.pop(name, None)
    elif kind == "unsupported":
        raise Violation("unexpected system call %s" % op[1])


# --- crash states -------------------------------------------------------------------

def materialize(model, out, dirs_durable, data_durable):
    """Writes the tree a crash would leave into out; returns a fingerprint of it."""
    h = hashlib.sha256()

    def walk(node, path, rel):
        os.makedirs(path, exist_ok=True)
        entries = node.durable_entries if dirs_durable else node.entries
        for name in sorted(entries):
            child = entries[name]
            p, r = os.path.join(path, name), rel + "/" + name
            if child.kind == "dir":
                h.update(("D" + r + "\0").encode("utf-8", "surrogateescape"))
                walk(child, p, r)
            else:
                # what a file holds after the crash: whole when every write reached it
                # (or was fsynced), else torn: half of its final bytes (initial files
                # keep what they held before the run until a write to them is synced)
                version = child.durable_version if data_durable else child.version
                if version == child.final_version:
                    data = child.content
                elif child.origin == "initial" and version == 0:
                    data = child.initial_content
                else:
                    data = (child.content or b"")[: len(child.content or b"") // 2]
                data = data or b""
                h.update(("F" + r + "\0").encode("utf-8", "surrogateescape") + hashlib.sha256(data).digest())
                with open(p, "wb") as f:
                    f.write(data)
    walk(model.root, out, "")
    return h.hexdigest()


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


class Scenario:
    def __init__(self, name, prepare, traced, target, accept, check):
        self.name, self.prepare, self.traced, self.target = name, prepare, traced, target
        self.accept, self.check = accept, check


def examine(sc, model, ops, check, work, tag, protocol=True, keep_failed=True):
    """Protocol checks and crash-state replay of one recorded run.

    Returns (problems, states replayed, {fingerprint: verdict})."""
    problems = []
    # The whole run on a copy of the initial tree: the protocol checks, and where each
    # file ended (its final version and bytes, read from disk after the run).
    final = model.clone()
    events = []
    for op in ops:
        try:
            apply(final, op, protocol, events)
        except Violation as v:
            problems.append("PROTOCOL VIOLATION: %s" % v)
            apply(final, op, False, events)
    published = [e for e in events if e[0] == "published"]
    if not published:
        problems.append("no staging directory was renamed into place")
    for i, e in enumerate(events):  # the directory of each publishing rename is fsynced after it
        if e[0] == "published" and not any(x[0] == "dir_synced" and x[1] == e[1] for x in events[i + 1:]):
            problems.append("PROTOCOL VIOLATION: %s was renamed into place but %s was not fsynced after" % (e[2], e[1]))
    for n in final.nodes:
        if n.kind != "file":
            continue
        n.final_version = n.version
        p = final.path_of(n)
        if p and os.path.isfile(p):
            with open(p, "rb") as f:
                n.content = f.read()
        elif n.origin == "created":
            n.content = b""  # created and deleted again during the run
    # Crash states: the run again, a state materialized after each operation.
    step = model.clone()
    seen = {}
    states = 0
    state_root = os.path.join(work, "states-" + tag)
    for k in range(len(ops) + 1):
        if k > 0:
            apply(step, ops[k - 1], False, [])
        for n in step.nodes:
            f = final.nodes[n.id]
            if n.kind == "file":
                if n.origin == "initial" and n.initial_content is None:
                    n.initial_content = n.content
                n.final_version, n.content = f.final_version, f.content
        for mode, dirs_durable, data_durable in (("synced", True, True), ("metadata", False, True), ("all", False, False)):
            states += 1
            out = os.path.join(state_root, "s")
            shutil.rmtree(out, ignore_errors=True)
            fp = materialize(step, out, dirs_durable, data_durable)
            if fp in seen:
                continue
            verdict = check(sc.check, os.path.join(out, sc.target))
            seen[fp] = verdict
            if verdict not in sc.accept:
                problems.append("crash after operation %d/%d %s (%s): %s" %
                                (k, len(ops), ops[k - 1] if k else "(start)", mode, verdict))
                if keep_failed:
                    shutil.copytree(out, os.path.join(work, "failed-%s-%d-%s" % (tag, k, mode)), dirs_exist_ok=True)
    shutil.rmtree(state_root, ignore_errors=True)
    return problems, states, seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--helper", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--strace", default=shutil.which("strace") or "strace")
    args = ap.parse_args()
    if not shutil.which(args.strace) and not os.path.exists(args.strace):
        print("durability: strace not found (tools/install-deps.sh installs it): skipped")
        return SKIP
    helper = os.path.abspath(args.helper)
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    def h(*a):
        r = run([helper, *a])
        if r.returncode != 0:
            raise SystemExit("durability: %s %s failed: %s" % (helper, " ".join(a), r.stderr))
        return r.stdout.strip()

    scenarios = [
        Scenario("new checkpoint", lambda d: None, lambda d: ["save", d + "/target", "2"], "target",
                 {"absent", "round 2"}, "check"),
        Scenario("overwrite (--force)", lambda d: h("save", d + "/target", "1"),
                 lambda d: ["save", d + "/target", "2", "--force"], "target", {"round 1", "round 2"}, "check"),
        Scenario("manager step (and pruning)", lambda d: (h("manager", d + "/root", "1"), h("manager", d + "/root", "2")),
                 lambda d: ["manager", d + "/root", "3"], "root",
                 {"steps: 1 2", "steps: 1 2 3", "steps: 2 3"}, "check-root"),
    ]
    failures = 0
    total_states = total_unique = 0
    recorded = []
    for sc in scenarios:
        tag = re.sub(r"[^a-z]+", "-", sc.name).strip("-")
        d = os.path.join(work, tag)
        os.makedirs(d)
        sc.prepare(d)
        os.sync()
        model = Model(d)
        trace = os.path.join(work, tag + ".strace")
        # LeakSanitizer cannot run under ptrace: off for the traced run of a sanitizer build
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = (env["ASAN_OPTIONS"] + ":" if env.get("ASAN_OPTIONS") else "") + "detect_leaks=0"
        r = run([args.strace, "-f", "-qq", "-y", "-s", "0", "-o", trace,
                 "-e", "trace=%file,%desc,fsync,fdatasync,rename,renameat2", "--", helper, *sc.traced(d)], env=env)
        if r.returncode != 0:
            print("durability: %s: the traced save failed: %s" % (sc.name, r.stderr))
            failures += 1
            continue
        with open(trace, encoding="utf-8", errors="surrogateescape") as f:
            ops = to_ops(parse_trace(f.read()))
        recorded.append((sc, model, ops, tag))
        problems, states, seen = examine(sc, model, ops, h, work, tag)
        for p in problems:
            print("durability: %s: %s" % (sc.name, p))
        failures += len(problems)
        print("durability: %s: %d operations, %d fsyncs; %d crash states replayed (%d distinct): %s" %
              (sc.name, len(ops), sum(1 for o in ops if o[0] == "fsync"), states, len(seen),
               ", ".join(sorted(set(seen.values())))))
        total_states += states
        total_unique += len(seen)

    # The checker checks: the same recorded runs with one fsync taken out must be caught,
    # by the protocol check and (for file data) by a broken crash state.
    caught = 0
    mutants = 0
    for sc, model, ops, tag in recorded[:2]:
        fsyncs = [i for i, o in enumerate(ops) if o[0] == "fsync"]
        for i in fsyncs:
            mutants += 1
            mutated = ops[:i] + ops[i + 1:]
            problems, _, seen = examine(sc, model, mutated, h, work, tag + "-mutant", keep_failed=False)
            violation = any(p.startswith("PROTOCOL VIOLATION") for p in problems)
            data_file = os.path.basename(ops[i][1]).startswith("data-") or os.path.basename(ops[i][1]) in ("manifest", "commit")
            broken = any(v.startswith("broken") for v in seen.values())
            if violation and (broken or not data_file):
                caught += 1
            else:
                print("durability: self-test: without %s the checker saw %s" % (ops[i], problems or "nothing"))
    print("durability: self-test: %d of %d runs with one fsync removed were caught" % (caught, mutants))
    if caught != mutants or mutants == 0:
        failures += 1
    print("durability: %d crash states replayed in all (%d distinct), %d problems" % (total_states, total_unique, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
