"""Every planted bug in `tools/mutants.py` still finds its text in the code: a mutant whose text the
code moved past plants nothing, and the script would only report it as stale when someone runs it
(four had gone stale unnoticed)."""

from __future__ import annotations

import importlib.util
import sys

from conftest import REPO


def _mutants():
    spec = importlib.util.spec_from_file_location("mutants", REPO / "tools" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutants", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.MUTANTS


def test_every_mutant_plants_its_bug_in_exactly_one_place():
    stale = [
        f"{mutant.name}: {mutant.file} holds its text {count} times"
        for mutant in _mutants()
        if (count := (REPO / mutant.file).read_text().count(mutant.original)) != 1
    ]
    assert stale == []


def test_every_mutant_names_tests_that_exist():
    missing = [
        f"{mutant.name}: {test}"
        for mutant in _mutants()
        for test in mutant.tests
        if not (REPO / test.split("::")[0]).exists()
    ]
    assert missing == []
