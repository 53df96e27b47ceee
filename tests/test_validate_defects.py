"""What `trtflow validate` says about malformed recipes found by trying to break it (issue 16):
every bad step id at once, a symlink loop by name, a NUL or Latin-1 byte at line:column, and a
huge recipe refused before it is parsed."""

from __future__ import annotations

import os

from conftest import write_recipe


def test_validate_reports_every_invalid_step_id(trtflow, tmp_path):
    recipe = write_recipe(
        tmp_path,
        'trtflow: 1\nname: ids\nsteps:\n  "bad id": {uses: load, with: {path: m.onnx}}\n'
        '  fine: {uses: load, with: {path: m.onnx}}\n  "also/bad": {uses: load, with: {path: m.onnx}}\n',
    )
    result = trtflow("validate", recipe)
    assert result.returncode == 2
    assert f"{recipe}:4:3: steps.bad id: `bad id` is not a valid name" in result.stderr
    assert f"{recipe}:6:3: steps.also/bad: `also/bad` is not a valid name" in result.stderr


def test_a_symlink_loop_as_model_path_is_named(trtflow, tmp_path):
    os.symlink("loop-b.onnx", tmp_path / "loop-a.onnx")
    os.symlink("loop-a.onnx", tmp_path / "loop-b.onnx")
    os.symlink("gone.onnx", tmp_path / "dangling.onnx")
    recipe = write_recipe(
        tmp_path,
        "trtflow: 1\nname: loop\nsteps:\n  a: {uses: load, with: {path: loop-a.onnx}}\n"
        "  b: {uses: load, with: {path: dangling.onnx}}\n",
    )
    result = trtflow("validate", recipe)
    assert result.returncode == 2
    assert f"{recipe}:4:32: steps.a.with.path: symlink loop: " in result.stderr, result.stderr
    assert "dangling.onnx is a symbolic link to gone.onnx, which does not exist" in result.stderr


def test_a_nul_or_latin1_byte_is_located_at_line_and_column(trtflow, tmp_path):
    nul = tmp_path / "nul.yaml"
    nul.write_bytes(b"trtflow: 1\nname: nul\nsteps:\n  a:\n    uses: lo\x00ad\n")
    result = trtflow("validate", nul)
    assert result.returncode == 2
    assert f"{nul}:5:13: the character U+0000 is not allowed" in result.stderr, result.stderr
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"trtflow: 1\nname: lat\ndescription: caf\xe9 cr\xe8me\nsteps: {}\n")
    result = trtflow("validate", latin)
    assert result.returncode == 2
    assert f"{latin}:3:17: not UTF-8 text: byte 0xe9" in result.stderr, result.stderr
    assert "save the file as UTF-8" in result.stderr


def test_a_huge_recipe_is_refused_before_it_is_parsed(trtflow, tmp_path):
    numbers = ", ".join(["1.5"] * 1_000_000)  # 5 MB: over the file size limit
    big = write_recipe(tmp_path, f"trtflow: 1\nname: big\nvars:\n  x: [{numbers}]\n", "big.yaml")
    result = trtflow("validate", big)
    assert result.returncode == 2
    assert "the recipe file is 4.8 MiB; recipes are limited to 4 MiB" in result.stderr
    # 600 kB of 200,000 values (composed, then counted while built), and 1.2 MB of 400,000
    # (counted from its parse events first: composing 4 MiB takes seconds)
    for values in (200_000, 400_000):
        many = ", ".join(["1"] * values)
        dense = write_recipe(
            tmp_path, f"trtflow: 1\nname: d\nvars:\n  x: [{many}]\n", f"dense{values}.yaml"
        )
        result = trtflow("validate", dense)
        assert result.returncode == 2
        assert f"{dense}:4:" in result.stderr and "more than 100,000 values" in result.stderr
        assert "put bulk data" in result.stderr and "aliases" not in result.stderr
    # past 1 MiB the count comes first: the values are refused before a syntax error at the end
    # of the text is reached (composing would have met it, after seconds)
    broken = write_recipe(
        tmp_path, f"trtflow: 1\nname: d\nvars:\n  x: [{many}]\n  y: [}}\n", "broken.yaml"
    )
    result = trtflow("validate", broken)
    assert result.returncode == 2
    assert "put bulk data" in result.stderr and "syntax" not in result.stderr, result.stderr
