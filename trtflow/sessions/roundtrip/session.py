"""One round trip: write each tool's input for a keep set, apply every tool, judge every output.

`RoundTrip(settings).run(folder)` writes the exports into `folder` (the block list, AutoCast's
arguments, the quantizer's exclusions, and a prepared copy of the model where a tool needs one,
`exports.tool_input`), applies them with the real tools (`tools`), and judges each output with the
check on fresh samples (`verify`): the recipe's data made fresh (`trtflow.sessions.trials.fresh_samples`),
the seed recorded. Inputs from files have no fresh samples: the report says "search samples".
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trtflow.onnxmodel.keep_files import read_keep_file
from trtflow.schema.paths import InputPath
from trtflow.sessions.roundtrip import exports, tools, verify
from trtflow.sessions.roundtrip.report import RoundTripReport, ToolEntry
from trtflow.sessions.roundtrip.tools import QuantizerSettings, Tool
from trtflow.sessions.trials import collect_samples, fresh_samples
from trtflow.tensors.comparison import Tolerances
from trtflow.tensors.inputs import DataSpec
from trtflow.tensors.judges import CommandCheck, JudgeSetting, write_samples
from trtflow.tensors.task_metrics import MetricCheck

if TYPE_CHECKING:
    from trtflow.precision.exclusions import QuantizerExclusions


class RoundTripSettings(BaseModel):
    """`round-trip`'s `with:` block: the fix, the model the tools start from, the check."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: InputPath = Field(
        description="The model your tool converts: the FP32 model (fp16/bf16) or the float model the "
        "quantized one was made from (qdq)."
    )
    precision: Literal["fp16", "bf16", "qdq"] = Field(description="The fix's precision.")
    keep: InputPath | list[str] = Field(
        description="The nodes kept in high precision: bisect-precision's `keep` file, or names."
    )
    mixed_model: InputPath | None = Field(
        None,
        description="The verified mixed model (bisect-precision's `model`): built with TensorRT-RTX.",
    )
    quantizer_exclusions: InputPath | None = Field(
        None,
        description="qdq: bisect-precision's `quantizer_exclusions` (default: worked out from the kept "
        "nodes on the float model quantized as it first was: ONNX Runtime's list adds the producers "
        "and other readers of the pairs they read).",
    )
    quantizer: QuantizerSettings = Field(
        QuantizerSettings(),
        description="qdq: how the float model was first quantized (the `quantize` step's report, or "
        "quantize_static's settings).",
    )
    tools: list[Tool] | None = Field(
        None,
        description="The tools to apply the fix with (default: every one for the precision: "
        "onnxconverter-common (fp16), autocast (fp16/bf16), tensorrt-rtx (with mixed_model), "
        "onnxruntime-quantizer and modelopt-quantizer (qdq)).",
    )
    data: DataSpec | None = Field(None, description="Generated samples; the judge uses fresh ones.")
    inputs: InputPath | None = Field(
        None, description="Samples from a file (no fresh samples then)."
    )
    check: Tolerances | CommandCheck | MetricCheck = Field(
        description="The check, as bisect-precision's `check`."
    )

    @model_validator(mode="after")
    def _one_source(self) -> RoundTripSettings:
        if self.data is not None and self.inputs is not None:
            raise ValueError("give one input source, not data and inputs")
        return self

    def chosen_tools(self) -> list[Tool]:
        if self.tools is not None:
            return list(dict.fromkeys(self.tools))
        every = tools.QDQ_TOOLS if self.precision == "qdq" else tools.FLOAT_TOOLS
        chosen = [t for t in every if t != "tensorrt-rtx" or self.mixed_model]
        return [t for t in chosen if t != "onnxconverter-common" or self.precision == "fp16"]


class RoundTrip:
    """Apply the fix with each tool and judge each output (module docstring)."""

    def __init__(self, settings: RoundTripSettings, folder: Path | None = None):
        self.settings = settings
        self.folder = folder

    def kept(self) -> list[str]:
        keep = self.settings.keep
        return list(keep) if isinstance(keep, list) else sorted(read_keep_file(Path(keep)))

    def run(self, exported: Path) -> RoundTripReport:
        import onnx

        settings = self.settings
        exported.mkdir(parents=True, exist_ok=True)
        source = Path(settings.model)
        original = onnx.load(str(source))
        kept = self.kept()
        output_names = [o.name for o in original.graph.output]
        judge = settings.check.judge(JudgeSetting(output_names, self.folder, "check"))
        calibration, feeds, samples, seed = self._samples(original)
        reference = verify.fp32_outputs(source, feeds)
        notes: list[str] = []
        entries = []
        for tool in settings.chosen_tools():
            applied = self._apply(tool, source, original, kept, exported, calibration, notes)
            judged_as = "qdq" if settings.precision == "qdq" else settings.precision
            if tool == "tensorrt-rtx" and applied.model is not None:
                judged_as = settings.precision
            verdict = verify.judge_output(applied, judged_as, judge, feeds, reference, samples)
            entries.append(ToolEntry.model_validate(verdict.as_json()))
        return RoundTripReport(
            precision=settings.precision,
            kept=kept,
            samples=samples,
            count=len(feeds),
            seed=seed,
            export_notes=list(dict.fromkeys(notes)),
            tools=entries,
        )

    def _samples(self, model) -> tuple[list, list, str, int | None]:
        """(calibration samples: the recipe's, fresh samples to judge on, what they are, their seed)."""
        settings = self.settings
        given = collect_samples(model, settings.data, settings.inputs)
        if settings.inputs is not None:
            return given, given, "search (inputs came from files: no fresh samples)", None
        fresh = fresh_samples(settings.data)
        return given, collect_samples(model, fresh, None), "fresh", fresh.seed

    def _apply(
        self,
        tool: Tool,
        source: Path,
        original,
        kept: list[str],
        exported: Path,
        calibration: list,
        notes: list[str],
    ) -> tools.Applied:
        settings = self.settings
        if tool == "tensorrt-rtx":
            if settings.mixed_model is None:
                return tools.Applied(tool, None, "", "no mixed_model given to build")
            shapes = {name: tuple(value.shape) for name, value in calibration[0].items()}
            return tools.tensorrt_rtx(
                Path(settings.mixed_model), exported / "tensorrt_rtx.engine", shapes
            )
        if tool in tools.QUANTIZERS:
            return self._requantize(tool, original, kept, exported, calibration)
        given = exports.tool_input(original, kept, tool == "onnxconverter-common")
        notes.extend(given.notes)
        model_file = source
        if given.prepared is not None:
            model_file = exported / f"{tool}_input.onnx"
            onnx_save(given.prepared, model_file)
        if tool == "onnxconverter-common":
            (exported / "node_block_list.json").write_text(json.dumps(given.names, indent=1))
            return tools.onnxconverter_common(model_file, given.names, exported / f"{tool}.onnx")
        arguments = exports.autocast_arguments(settings.precision, given.names)
        (exported / "autocast_args.txt").write_text(" ".join(map(_quoted, arguments)) + "\n")
        write_samples(exported / exports.AUTOCAST_CALIBRATION, calibration)
        unmatched = exports.unmatched_patterns(arguments, given.prepared or original)
        if unmatched:
            return tools.Applied(
                tool,
                None,
                "",
                f"{len(unmatched)} pattern(s) match no node, and AutoCast would ignore "
                f"them silently: {', '.join(unmatched[:5])}",
            )
        return tools.autocast(
            model_file.resolve(), arguments, (exported / f"{tool}.onnx").resolve()
        )

    def _requantize(
        self, tool: Tool, original, kept: list[str], exported: Path, calibration: list
    ) -> tools.Applied:
        """The float model quantized again as it first was, less the exclusions for `tool`'s
        quantizer. The float model is given with trtflow's stable names where it lacks its own, as
        the `quantize` step gives it (the kept nodes are named so in the quantized model)."""
        from trtflow.onnxmodel.files import name_nodes

        quantizer = self.settings.quantizer
        if quantizer.calibration is not None:
            calibration = collect_samples(original, quantizer.calibration, None)
        named = type(original)()
        named.CopyFrom(original)
        renamed = name_nodes(named)
        source = Path(self.settings.model)
        notes: tuple[str, ...] = ()
        if renamed:
            source = exported / "float_named.onnx"
            if not source.exists():
                onnx_save(named, source)
            notes = (
                f"{len(renamed)} node(s) of the float model have no name of their own: the "
                "quantizer is given a copy carrying trtflow's stable names, as the `quantize` "
                "step quantizes it",
            )
        found = self._exclusions(source, kept, calibration, exported)
        if isinstance(found, tools.Applied):
            return found
        name = tools.QUANTIZERS[tool]
        settings = quantizer.library(name, found.nodes_for(name))  # type: ignore[arg-type]
        applied = tools.quantizer(tool, source, settings, calibration, exported / f"{tool}.onnx")
        return replace(applied, notes=applied.notes + notes)

    def _exclusions(
        self, source: Path, kept: list[str], calibration: list, exported: Path
    ) -> QuantizerExclusions | tools.Applied:
        """bisect-precision's exclusions, or, when none were given, the kept nodes in each
        quantizer's terms (`precision.exclusions`: ONNX Runtime's list adds the producers and other
        readers of the pairs they read) worked out on the float model quantized as it first was,
        with nothing excluded; written to `quantizer_exclusions.json` either way."""
        from trtflow.precision.exclusions import QuantizerExclusions, exclusions

        written = exported / "quantizer_exclusions.json"
        if self.settings.quantizer_exclusions is not None:
            given = Path(self.settings.quantizer_exclusions).read_text()
            found = QuantizerExclusions.model_validate_json(given)
        elif written.exists():  # worked out for the other quantizer of this round trip
            return QuantizerExclusions.model_validate_json(written.read_text())
        else:
            import onnx

            plain = exported / "quantized_as_given.onnx"
            settings = self.settings.quantizer.library("onnxruntime", [])
            applied = tools.quantizer("onnxruntime-quantizer", source, settings, calibration, plain)
            if applied.model is None:
                return applied
            quantized = onnx.load(str(plain))
            missing = [n for n in kept if n not in {node.name for node in quantized.graph.node}]
            if missing:
                return tools.Applied(
                    "onnxruntime-quantizer",
                    None,
                    applied.how,
                    f"the float model quantized as given has no node {', '.join(missing[:5])}: "
                    "give bisect-precision's `quantizer_exclusions`",
                )
            found = exclusions(quantized, kept, [])
        written.write_text(found.model_dump_json(indent=1))
        return found


def _quoted(argument: str) -> str:
    import shlex

    return shlex.quote(argument)


def onnx_save(model, path: Path) -> None:
    from trtflow.onnxmodel.files import save_model

    save_model(model, path)
