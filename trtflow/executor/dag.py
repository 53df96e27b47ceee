"""The step graph: edges from references and `after:`, cycle detection, order and sub-graphs."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass


class CycleError(Exception):
    def __init__(self, cycle: list[str]):
        self.cycle = cycle
        super().__init__(" -> ".join(cycle))


@dataclass
class Dag:
    nodes: list[str]  # in recipe order, which breaks ties so runs are reproducible
    deps: dict[str, set[str]]  # node -> the nodes it needs

    def find_cycle(self) -> list[str] | None:
        """A cycle as `[a, b, a]`, or None. A depth-first walk with its own stack, not Python's:
        a recipe whose steps each need the next one (a chain of thousands) is as deep as it is
        long, past Python's recursion limit."""
        position = {node: i for i, node in enumerate(self.nodes)}
        state: dict[str, int] = {}  # 1 = on the current path, 2 = done
        path: list[str] = []  # the nodes on the current path, root first
        unvisited: list[Iterator[str]] = []  # per node on `path`: the needs it has yet to visit

        def enter(node: str) -> None:
            state[node] = 1
            path.append(node)
            unvisited.append(iter(sorted(self.deps[node], key=position.__getitem__)))

        for root in self.nodes:
            if root in state:
                continue
            enter(root)
            while path:
                dep = next(unvisited[-1], None)
                if dep is None:
                    state[path.pop()] = 2
                    unvisited.pop()
                elif state.get(dep) == 1:
                    cycle = path[path.index(dep) :] + [dep]
                    return cycle[::-1]  # "a needs b needs a" read as "a -> b -> a": data flow
                elif dep not in state:
                    enter(dep)
        return None

    def order(self) -> list[str]:
        """Topological order, recipe order among independent steps: each time, the first step in
        the recipe whose needs are all placed (Kahn's algorithm over a heap of recipe positions,
        linear but for the heap: a 4,000-step recipe is ordered in milliseconds)."""
        cycle = self.find_cycle()
        if cycle:
            raise CycleError(cycle)
        position = {node: i for i, node in enumerate(self.nodes)}
        waiting = {node: len(self.deps[node]) for node in self.nodes}
        dependents: dict[str, list[str]] = {node: [] for node in self.nodes}
        for node in self.nodes:
            for dep in self.deps[node]:
                dependents[dep].append(node)
        ready = [position[node] for node in self.nodes if not waiting[node]]
        heapq.heapify(ready)
        result: list[str] = []
        while ready:
            node = self.nodes[heapq.heappop(ready)]
            result.append(node)
            for dependent in dependents[node]:
                waiting[dependent] -= 1
                if not waiting[dependent]:
                    heapq.heappush(ready, position[dependent])
        return result

    def upstream(self, targets: set[str]) -> set[str]:
        """`targets` and everything they need."""
        seen: set[str] = set()
        todo = list(targets)
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(self.deps[node])
        return seen
