"""Folder layering of meshrun's sources (issue #35): which folders include
which, and the edges that close a cycle.

    python3 layers.py ROOT        prints "cycle FROM -> TO FILE" per edge in a
                                  cycle, and "ground FOLDER -> TO FILE" for each
                                  include of another folder from recipe/
A folder is src/<folder> or include/meshrun/<folder>; an edge is an
`#include "meshrun/<folder>/..."` or `#include "src/<folder>/..."` in
another folder's file. Standard library only: the system's python3 runs it.
"""
import collections
import os
import re
import sys

INCLUDE = re.compile(r'\s*#\s*include\s+"(?:meshrun|src)/([a-z_]+)/')
GROUND = "recipe"  # the ground floor: includes no other folder


def edges(root):
    found = collections.defaultdict(list)
    for base, depth in (("src", 1), (os.path.join("include", "meshrun"), 2)):
        top = os.path.join(root, base)
        for folder, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith((".cpp", ".hpp", ".h", ".cc")):
                    continue
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, root)
                parts = relative.split(os.sep)
                if len(parts) <= depth + 1:
                    continue  # top-level headers (error.hpp) belong to no folder
                owner = parts[depth]
                with open(path, errors="ignore") as text:
                    for line in text:
                        match = INCLUDE.match(line)
                        if match and match.group(1) != owner:
                            found[(owner, match.group(1))].append(relative)
    return found


def reachable(graph, start):
    seen, stack = set(), [start]
    while stack:
        for nxt in graph.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def main(root):
    found = edges(root)
    graph = collections.defaultdict(set)
    for source, target in found:
        graph[source].add(target)
    for (source, target), files in sorted(found.items()):
        if source in reachable(graph, target):
            print(f"cycle {source} -> {target} {files[0]}")
        if source == GROUND:
            print(f"ground {source} -> {target} {files[0]}")


if __name__ == "__main__":
    main(sys.argv[1])
