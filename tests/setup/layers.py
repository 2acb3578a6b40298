"""Folder layering of meshrun's sources (issue #35): which folders include
which, the edges that close a cycle, and the internal headers reached from
another folder.

    python3 layers.py ROOT      prints one line per problem:
        cycle FROM -> TO FILE         an include edge in a folder cycle
        ground recipe -> TO FILE      recipe/ (the ground floor) including a folder
        internal FROM -> HEADER FILE  FILE, of folder FROM, includes HEADER, an
                                      internal header of another folder

A folder is src/<folder> or include/meshrun/<folder>; an edge is an
`#include "meshrun/<folder>/..."` or `#include "src/<folder>/..."` in another
folder's file. A folder's internal headers are the headers under
src/<folder>/; another folder reaches one by `"src/<folder>/x.hpp"`, by a
relative path out of its own folder (`"../dist/x.hpp"`), or by the bare
name of a header that only another folder has (through an include
directory). Standard library only: the system's python3 runs it.
"""
import collections
import os
import re
import sys

INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"')
FOLDER_INCLUDE = re.compile(r"(?:meshrun|src)/([a-z_]+)/")
GROUND = "recipe"  # the ground floor: includes no other folder
SOURCES = (".cpp", ".hpp", ".h", ".cc")


def files(root):
    """(path relative to root, its folder, whether under src/) of every source file in a folder."""
    for base, depth in (("src", 1), (os.path.join("include", "meshrun"), 2)):
        top = os.path.join(root, base)
        for folder, _, names in sorted(os.walk(top)):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                relative = os.path.relpath(os.path.join(folder, name), root)
                parts = relative.split(os.sep)
                if len(parts) <= depth + 1:
                    continue  # top-level headers (error.hpp) belong to no folder
                yield relative, parts[depth], base == "src"


def includes(root, relative):
    with open(os.path.join(root, relative), errors="ignore") as text:
        for line in text:
            match = INCLUDE.match(line)
            if match:
                yield match.group(1)


def scan(root):
    edges = collections.defaultdict(list)  # (from, to) -> files
    internal = []  # (from folder, header, file)
    all_files = list(files(root))
    # The internal headers of each src/ folder, by bare name.
    internal_names = collections.defaultdict(set)
    for relative, folder, in_src in all_files:
        if in_src and relative.endswith((".hpp", ".h")):
            internal_names[os.path.basename(relative)].add(folder)
    for relative, owner, _ in all_files:
        here = os.path.dirname(relative)
        for name in includes(root, relative):
            match = FOLDER_INCLUDE.match(name)
            if match:
                if match.group(1) != owner:
                    edges[(owner, match.group(1))].append(relative)
                if name.startswith("src/") and match.group(1) != owner:
                    internal.append((owner, name, relative))
                continue
            if name.startswith(".."):
                target = os.path.normpath(os.path.join(here, name))
                parts = target.split(os.sep)
                if parts[0] == "src" and len(parts) > 2 and parts[1] != owner:
                    internal.append((owner, target, relative))
                continue
            if "/" not in name and os.path.exists(os.path.join(root, here, name)):
                continue  # its own folder's
            others = internal_names.get(os.path.basename(name), set()) - {owner}
            if "/" not in name and others:
                internal.append((owner, "src/" + sorted(others)[0] + "/" + name, relative))
    return edges, internal


def reachable(graph, start):
    seen, stack = set(), [start]
    while stack:
        for nxt in graph.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def main(root):
    edges, internal = scan(root)
    graph = collections.defaultdict(set)
    for source, target in edges:
        graph[source].add(target)
    for (source, target), where in sorted(edges.items()):
        if source in reachable(graph, target):
            print(f"cycle {source} -> {target} {where[0]}")
        if source == GROUND:
            print(f"ground {source} -> {target} {where[0]}")
    for owner, header, relative in sorted(internal):
        print(f"internal {owner} -> {header} {relative}")


if __name__ == "__main__":
    main(sys.argv[1])
