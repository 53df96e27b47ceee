"""`trtflow diagnose MODEL --precision fp16`: write a recipe with one `diagnose` step, then run it.

The recipe (`diagnose-<model>.yaml` beside the model, or `--recipe PATH`) is the user's to keep and
edit: `trtflow run` it again, change its data or check. An existing recipe of that name with other
content is never overwritten (exit 2, saying so), so edits are not lost.
"""

from __future__ import annotations

from pathlib import Path

import typer

from trtflow.cli.common import errors_to_exit_codes
from trtflow.cli.options import DebugOption, WorkspaceOption
from trtflow.errors import UsageError

DEFAULT_CHECK = "{metric: cosine, min: 0.999}"
DEFAULT_DATA = "{seed: 1, iterations: 4}"


def diagnose(
    model: Path = typer.Argument(
        ..., metavar="MODEL", help="The ONNX model (FP32; quantized for qdq)."
    ),
    precision: str = typer.Option(..., "--precision", metavar="P", help="fp16, bf16, fp8 or qdq."),
    data: str = typer.Option(
        DEFAULT_DATA,
        "--data",
        metavar="YAML",
        help="Generated samples, as a recipe's `data:` ({seed, iterations, ranges, shapes}).",
    ),
    inputs: Path | None = typer.Option(
        None, "--inputs", metavar="FILE", help="Samples from a file instead of --data."
    ),
    check: str = typer.Option(
        DEFAULT_CHECK,
        "--check",
        metavar="YAML",
        help="What the outputs must satisfy, as bisect-precision's `check:`.",
    ),
    float_model: Path | None = typer.Option(
        None,
        "--float-model",
        metavar="FILE",
        help="qdq: the float model the quantized one was made from.",
    ),
    quantizer: str | None = typer.Option(
        None,
        "--quantizer",
        metavar="YAML",
        help="qdq: how the float model was quantized ({report: QUANTIZE_REPORT.json} from trtflow's "
        "quantize step, or quantize_static's {per_channel, symmetric, calibration: {...}, ...}).",
    ),
    recipe: Path | None = typer.Option(
        None,
        "--recipe",
        metavar="PATH",
        help="Where to write the recipe (default: diagnose-<model>.yaml beside MODEL).",
    ),
    workspace: Path | None = WorkspaceOption,
    out: Path = typer.Option(
        Path("trtflow-out"), "--out", metavar="DIR", help="Where <recipe>/<step>/ output links go."
    ),
    debug: bool = DebugOption,
) -> None:
    """Why MODEL loses accuracy in a precision: ranked causes, mechanisms, repros, a fix verified through your tools."""
    with errors_to_exit_codes(debug):
        path = recipe or model.parent / f"diagnose-{model.stem}.yaml"
        text = recipe_text(model, path, precision, data, check, inputs, float_model, quantizer)
        if path.exists() and path.read_text() != text:
            raise UsageError(
                f"{path} exists with other content (your edits?): run it with `trtflow run {path}`, or give "
                "--recipe NEW.yaml"
            )
        path.write_text(text)
        print(f"recipe: {path} (keep it: `trtflow run {path}` runs it again)")
    from trtflow.cli.recipes import run

    run(
        recipe=path,
        overrides=[],
        workspace=workspace,
        out=out,
        force=[],
        only=[],
        dry_run=False,
        jobs=1,
        executor="thread",
        address=None,
        verbose=False,
        remote=None,
        no_push=False,
        offline=False,
        debug=debug,
    )


def recipe_text(
    model: Path,
    path: Path,
    precision: str,
    data: str,
    check: str,
    inputs: Path | None,
    float_model: Path | None,
    quantizer: str | None = None,
) -> str:
    """The recipe, paths relative to its folder; `data`/`check`/`quantizer` are YAML the recipe's
    loader checks."""
    import os

    import yaml

    def relative(file: Path) -> str:
        return os.path.relpath(file.absolute(), path.absolute().parent)

    try:
        parsed_check = yaml.safe_load(check)
        parsed_data = yaml.safe_load(data)
    except yaml.YAMLError as error:
        raise UsageError(f"--check / --data: not YAML: {error}") from None
    step: dict = {"model": relative(model), "precision": precision, "check": parsed_check}
    if inputs is not None:
        step["inputs"] = relative(inputs)
    else:
        step["data"] = parsed_data
    if float_model is not None:
        step["float_model"] = relative(float_model)
    if quantizer is not None:
        try:
            step["quantizer"] = yaml.safe_load(quantizer)
        except yaml.YAMLError as error:
            raise UsageError(f"--quantizer: not YAML: {error}") from None
    name = f"diagnose-{model.stem}".replace(" ", "-")
    document = {
        "trtflow": 1,
        "name": name,
        "steps": {"diagnose": {"uses": "diagnose", "with": step}},
    }
    return yaml.safe_dump(document, sort_keys=False)
