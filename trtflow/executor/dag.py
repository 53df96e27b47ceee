"""The step graph: edges from references and `after:`, cycle detection, order and sub-graphs."""

from __future__ import annotations

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
        """A cycle as `[a, b, a]`, or None."""
        state: dict[str, int] = {}  # 1 = on the current path, 2 = done
        stack: list[str] = []

        def visit(node: str) -> list[str] | None:
            state[node] = 1
            stack.append(node)
            for dep in sorted(self.deps[node], key=self.nodes.index):
                if state.get(dep) == 1:
                    return stack[stack.index(dep) :] + [dep]
                if dep not in state and (cycle := visit(dep)):
                    return cycle
            stack.pop()
            state[node] = 2
            return None

        for node in self.nodes:
            if node not in state and (cycle := visit(node)):
                return list(
                    reversed(cycle)
                )  # read as "a needs b needs a" -> "a -> b -> a" in data-flow order
        return None

    def order(self) -> list[str]:
        """Topological order, recipe order among independent steps."""
        cycle = self.find_cycle()
        if cycle:
            raise CycleError(cycle)
        done: set[str] = set()
        result: list[str] = []
        pending = list(self.nodes)
        while pending:
            for node in pending:
                if self.deps[node] <= done:
                    result.append(node)
                    done.add(node)
                    pending.remove(node)
                    break
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
