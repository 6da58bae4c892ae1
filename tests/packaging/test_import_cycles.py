"""No import cycle anywhere in the product or the test world (issue 19).

Every import counts, those inside functions included: an import moved into a function to get
past a circle at start-up still ties the two modules together. A package's ``__init__`` that
re-exports its own submodules is not a cycle of the design, so the edge from a submodule to its
own parent package (``a.b.c -> a.b``) is left out; any other cycle fails with its modules listed.
"""

from __future__ import annotations

import sys

import grimp
import pytest

PACKAGES = ("dispatcher", "dispatcher_sandbox")


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively: the components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def import_graph() -> dict[str, set[str]]:
    graph = grimp.build_graph(*PACKAGES)
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        if not module.startswith(PACKAGES):
            continue
        targets = {
            imported
            for imported in graph.find_modules_directly_imported_by(module)
            if imported.startswith(PACKAGES) and not module.startswith(imported + ".")
        }
        edges[module] = targets
    return edges


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        pytest.param({"a": {"b"}, "b": set()}, [], id="a-line"),
        pytest.param({"a": {"b"}, "b": {"a"}}, [["a", "b"]], id="two-modules"),
        pytest.param(
            {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}},
            [["a", "b", "c"]],
            id="three-and-a-tail",
        ),
        pytest.param({"a": {"a"}}, [], id="a-module-alone"),
    ],
)
def test_strongly_connected_finds_cycles(
    graph: dict[str, set[str]], expected: list[list[str]]
) -> None:
    assert strongly_connected(graph) == expected


def test_no_import_cycle() -> None:
    graph = import_graph()
    assert any(m.startswith("dispatcher_sandbox.") for m in graph), "the test world is missing"
    assert len(graph) > 100, sorted(graph)  # both packages were read
    cycles = strongly_connected(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


if __name__ == "__main__":  # a quick listing while untangling
    for cycle in strongly_connected(import_graph()):
        print(" <-> ".join(cycle), file=sys.stdout)
