"""Planted bugs, and whether the test suite notices them.

A test suite that passes says little until it is seen to fail when the code is wrong. Each mutant
below is one deliberate bug in a module whose mistakes users would not see (the executor, precision
plans, comparison, `load`), with the tests that should catch it. The script copies the working
tree once, plants one bug at a time, runs those tests, and restores the file: a mutant is *killed*
when the tests fail, *survived* when they pass. A mutant whose text no longer appears exactly once
is *stale*: the code moved on, and the mutant must be rewritten.

mutmut and cosmic-ray generate thousands of mutants and run the suite for each; on two cores a
single pass over these modules would take days. A short list of plausible bugs, each run against
the tests that own the behaviour, answers the same question in minutes.

    python tools/mutants.py              # every mutant
    python tools/mutants.py -k store     # those whose name contains "store"
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    original: str
    planted: str
    tests: tuple[str, ...]


MUTANTS: tuple[Mutant, ...] = (
    # executor: what is a hit, what is a key, what a journal answers
    Mutant(
        "store: lookup trusts recorded file sizes",
        "trtflow/executor/store.py",
        'if os.stat(f"{folder}/{name}").st_size != meta["size"]:',
        "if False:",
        ("tests/test_crash_safety.py",),
    ),
    Mutant(
        "store: every entry is fsynced whatever TRTFLOW_FSYNC says",
        "trtflow/executor/store.py",
        'return os.environ.get("TRTFLOW_FSYNC", "") not in ("", "0")',
        "return True",
        ("tests/test_crash_safety.py",),
    ),
    Mutant(
        "tensor set: a packed array is read from the start of its pack",
        "trtflow/tensors/tensor_set.py",
        "return packed_array(self.folder / stored.file, stored.offset, tensor)",
        "return packed_array(self.folder / stored.file, 0, tensor)",
        ("tests/run_compare/test_inputs.py", "tests/isolate/test_layerwise_feeds.py"),
    ),
    Mutant(
        "store: an incomplete entry is a hit",
        "trtflow/executor/store.py",
        'if manifest is None or manifest.get("incomplete"):',
        "if manifest is None:",
        ("tests/run_compare/test_runner_outcomes.py", "tests/test_cache.py"),
    ),
    Mutant(
        "remote: a download is not checked against its sha256",
        "trtflow/executor/store.py",
        'if digest.hexdigest() != meta["sha256"] or target.stat().st_size != meta["size"]:',
        "if False:",
        (
            "tests/test_remote_cache.py::test_damaged_remote_entry_is_detected_recomputed_and_repaired",
        ),
    ),
    Mutant(
        "remote: a push uploads the blobs the remote already has",
        "trtflow/executor/objects.py",
        "        if key in self.damaged:\n            return [by_digest[digest] for digest in sorted(by_digest)]",
        "        return [by_digest[digest] for digest in sorted(by_digest)]",
        ("tests/test_remote_cache.py::test_push_delete_the_store_pull_and_verify_is_clean",),
    ),
    Mutant(
        "remote: blobs move one at a time",
        "trtflow/executor/objects.py",
        "if len(items) <= 1 or workers <= 1:",
        "if True:",
        ("tests/test_remote_cache.py::test_a_many_file_entry_is_fetched_concurrently",),
    ),
    Mutant(
        "remote: a manifest of the older store format counts as held",
        "trtflow/executor/objects.py",
        "return self.usable(key) is not None",
        "return self.fs.exists(self.manifest_location(key))",
        (
            "tests/test_remote_cache.py::test_a_remote_entry_of_the_older_store_format_is_pushed_again",
        ),
    ),
    Mutant(
        "run: a remote that failed is asked again",
        "trtflow/executor/remote.py",
        "    if remote.gone:\n        return None\n    try:\n        return fetched(",
        "    try:\n        return fetched(",
        ("tests/test_remote_cache.py::test_a_dead_s3_endpoint_costs_one_failure_said_once",),
    ),
    Mutant(
        "keys: labels enter the key",
        "trtflow/executor/keys.py",
        'return _digest({k: v for k, v in step_material.items() if k != "labels"})',
        "return _digest(step_material)",
        ("tests/test_cache.py", "tests/test_core_units.py"),
    ),
    Mutant(
        "dag: a cycle is named against the data flow",
        "trtflow/executor/dag.py",
        "return cycle[::-1]",
        "return cycle",
        ("tests/test_core_units.py", "tests/test_recipe_errors.py"),
    ),
    Mutant(
        "reports: report models are built when imported (every start-up pays)",
        "trtflow/schema/reports.py",
        'extra="ignore", defer_build=True',
        'extra="ignore"',
        ("tests/test_light_imports.py",),
    ),
    Mutant(
        "display: a step line on a terminal loses its status colour",
        "trtflow/display.py",
        'out.write(status + plain.removeprefix(f"{outcome.status:>7}") + "\\n")',
        'out.write(plain + "\\n")',
        ("tests/test_display.py",),
    ),
    Mutant(
        "store: filelock imported with the store (every start-up pays ~15 ms)",
        "trtflow/executor/store.py",
        "if TYPE_CHECKING:\n    from filelock import FileLock\n",
        "from filelock import FileLock\n",
        ("tests/test_light_imports.py",),
    ),
    Mutant(
        "status: thousands of cached steps are each listed",
        "trtflow/cli/recipes.py",
        "if len(statuses) > LISTED_CACHED:",
        "if False:",
        ("tests/test_cache.py",),
    ),
    Mutant(
        "journal: a torn last line is kept",
        "trtflow/executor/journal.py",
        "if end < len(\n            data\n        ):",
        "if False:",
        ("tests/test_journal.py",),
    ),
    Mutant(
        "hashing: the stat cache ignores mtime",
        "trtflow/executor/hashing.py",
        "WHERE path = ? AND size = ? AND mtime_ns = ? AND inode = ?",
        "WHERE path = ? AND size = ? AND ? IS NOT NULL AND inode = ?",
        ("tests/test_cache.py", "tests/test_load.py"),
    ),
    # precision: emulation, lowering, the search
    Mutant(
        "emulate: initializers of low nodes not rounded",
        "trtflow/precision/emulate.py",
        "return self.constant(\n                name, self.fmt.round(numpy_helper.to_array(self.initializers[tensor]))\n            )",
        "return tensor",
        ("tests/run_compare/test_emulation.py", "tests/bisect"),
    ),
    Mutant(
        "emulate: rounding through the low type skipped",
        "trtflow/precision/emulate.py",
        'low = self.node("Cast", [tensor], f"{output}::cast", to=self.fmt.onnx_type)',
        'low = self.node("Cast", [tensor], f"{output}::cast", to=FLOAT)',
        ("tests/run_compare/test_emulation.py", "tests/bisect"),
    ),
    Mutant(
        "formats: fp16 rounding saturates instead of overflowing",
        "trtflow/onnxmodel/formats.py",
        "return values.astype(np.float16).astype(np.float32)",
        "return np.clip(values, -65504, 65504).astype(np.float16).astype(np.float32)",
        ("tests/run_compare/test_emulation.py", "tests/bisect", "tests/test_load.py"),
    ),
    Mutant(
        "search: minimal skips the 1-minimal reduction",
        "trtflow/precision/search.py",
        "if trials(frozenset(current) - {node}):",
        "if False:",
        ("tests/bisect",),
    ),
    Mutant(
        "search: minimal reports keep-nothing",
        "trtflow/precision/search.py",
        "return SearchResult(keep, trials.trials, True, message, needed_by)",
        "return SearchResult(frozenset(), trials.trials, True, message, needed_by)",
        ("tests/bisect",),
    ),
    Mutant(
        "search: the 1-minimal reduction stops after its first removal",
        "trtflow/precision/search.py",
        "                current.remove(node)\n                changed = True\n",
        "                current.remove(node)\n",
        ("tests/bisect/test_search.py",),
    ),
    # the precision search session: what "verified on fresh samples" and its keep lists promise
    Mutant(
        "precision search: verification reuses the search's samples (seed offset dropped)",
        "trtflow/sessions/trials.py",
        'return data.model_copy(update={"seed": data.seed + draw * FRESH_SEED_OFFSET})',
        "return data",
        ("tests/bisect/test_bisect_step.py",),
    ),
    Mutant(
        "precision search: AutoCast patterns not anchored (node3 also keeps node30..node39)",
        "trtflow/sessions/precision/outcome.py",
        'patterns = [f"^{re.escape(node)}$" for node in self.kept_nodes()]',
        "patterns = list(self.kept_nodes())",
        ("tests/bisect/test_bisect_step.py",),
    ),
    Mutant(
        "precision search: AutoCast arguments let it make the graph's inputs FP16",
        "trtflow/sessions/precision/outcome.py",
        'arguments = ["--low_precision_type", self.settings.precision, "--keep_io_types"]',
        'arguments = ["--low_precision_type", self.settings.precision]',
        ("tests/bisect/test_bisect_step.py",),
    ),
    Mutant(
        "judges: a task metric the FP32 outputs fail is not refused",
        "trtflow/tensors/judges.py",
        "        itself = check_metric(self.metric, reference.reference, reference.reference)\n        if itself.passed:",
        "        itself = check_metric(self.metric, reference.reference, reference.reference)\n        if True:",
        ("tests/task_metrics",),
    ),
    # comparison: Polygraphy's rule
    Mutant(
        "comparison: abs AND rel instead of abs OR rel",
        "trtflow/tensors/comparison.py",
        "mismatch = ~(absolute <= atol) & ~(\n                    relative <= rtol\n                )",
        "mismatch = ~(absolute <= atol) | ~(\n                    relative <= rtol\n                )",
        ("tests/run_compare/test_comparison.py", "tests/run_compare/test_compare_rules.py"),
    ),
    Mutant(
        "comparison: NaN statistic passes",
        "trtflow/tensors/comparison.py",
        "return bool(abs_stat <= atol or rel_stat <= rtol)",
        "return not bool(abs_stat > atol and rel_stat > rtol)",
        (
            "tests/run_compare/test_comparison.py",
            "tests/run_compare/test_compare_rules.py",
            "tests/run_compare/test_nonfinite.py",
        ),
    ),
    Mutant(
        "measures: the frontier fails a point out of either tolerance (and -> or)",
        "trtflow/tensors/measures.py",
        "not a <= atol and not r <= rtol for a, r in",
        "not a <= atol or not r <= rtol for a, r in",
        ("tests/run_compare/test_compare_memo.py",),
    ),
    Mutant(
        "measures: a NaN checked statistic passes a re-judged tensor",
        "trtflow/tensors/measures.py",
        "return bool(abs_stat <= atol or rel_stat <= rtol)  # NaN fails both",
        "return not bool(abs_stat > atol and rel_stat > rtol)",
        ("tests/run_compare/test_compare_memo.py",),
    ),
    Mutant(
        "memo: the tolerances enter the memo key (an edit measures again)",
        "trtflow/executor/keys.py",
        'params = {k: v for k, v in step_material["params"].items() if k not in judgement}',
        'params = step_material["params"]',
        ("tests/run_compare/test_compare_memo.py",),
    ),
    Mutant(
        "emulate: a low node's read of a kept node's output is not rounded",
        "trtflow/precision/emulate.py",
        "writer in plan.keep and any(reader not in plan.keep for reader in readers)",
        "writer not in plan.keep and any(reader not in plan.keep for reader in readers)",
        ("tests/run_compare/test_emulation.py",),
    ),
    Mutant(
        "emulate: a small switched Constant is selected unrounded when low",
        "trtflow/precision/emulate.py",
        'self.builder.node("Where", [flag, rounded, raw], output)',
        'self.builder.node("Where", [flag, raw, raw], output)',
        ("tests/run_compare/test_emulation.py",),
    ),
    Mutant(
        "emulate: a switched low node reads a candidate's output as written, not its low view",
        "trtflow/precision/emulate.py",
        "return self.view_of[tensor]",
        "return tensor",
        ("tests/run_compare/test_emulation.py",),
    ),
    Mutant(
        "report: a tensor passes when any iteration passes (all -> any)",
        "trtflow/tensors/compare_report.py",
        "return all(self.iteration_passed) and",
        "return any(self.iteration_passed) and",
        ("tests/run_compare/test_typed_reports.py",),
    ),
    # metrics: the reference sets the scale; an infinite value is a value
    Mutant(
        "metrics: PSNR's peak is the candidate's max",
        "trtflow/tensors/metrics/base.py",
        "peak=float(reference.max()) if reference.size else -math.inf,",
        "peak=float(candidate.max()) if candidate.size else -math.inf,",
        ("tests/metrics/test_metrics.py",),
    ),
    Mutant(
        "metrics: SNR's signal is the candidate's power",
        "trtflow/tensors/metrics/snr.py",
        "return 10 * math.log10(sums.signal / sums.error)",
        "return 10 * math.log10(sums.candidate / sums.error)",
        ("tests/metrics/test_metrics.py",),
    ),
    Mutant(
        "gates: an infinite PSNR/SNR (identical outputs) fails its gate",
        "trtflow/tensors/gates.py",
        "return number_from_json(metrics.get(self.metric))",
        "return metrics.get(self.metric) if isinstance(metrics.get(self.metric), float) else None",
        ("tests/metrics/test_metrics.py",),
    ),
    Mutant(
        "reports: a field added to a report without a SCHEMA_VERSION bump",
        "trtflow/tensors/compare_report.py",
        "    check_finite: bool\n    failed_finite_check: list[str]\n",
        "    check_finite: bool\n    note: str = ''\n    failed_finite_check: list[str]\n",
        ("tests/test_report_schemas.py",),
    ),
    Mutant(
        "overlay: a typed compare report's absolute errors are not read",
        "trtflow/tensors/compare_overlay.py",
        'for side, distribution in (("abs", tensor.abs), ("rel", tensor.rel))',
        'for side, distribution in (("rel", tensor.rel),)',
        (
            "tests/graph/test_render_graph_step.py::test_fp16_overlay_recipe_draws_errors_and_kept_nodes",
        ),
    ),
    # load
    Mutant(
        "load: the ONNX checker turned off",
        "trtflow/steps/load.py",
        "    if not params.check:\n        return None\n",
        "    return None\n",
        ("tests/test_load.py",),
    ),
    Mutant(
        "load: its own output is not checked",
        "trtflow/steps/load.py",
        'opening, running = _refusals(model_path, params, run, inlined or params.check == "full")',
        "opening, running = None, None",
        ("tests/test_load.py", "tests/subgraphs"),
    ),
    # the survivors of the first mutation check, outside those modules
    Mutant(
        "trt: the timing cache is cold on every build",
        "trtflow/trt/builder.py",
        'stored = self.path.read_bytes() if self.path.exists() else b""',
        'stored = b""',
        ("tests/trt/test_trt_builder.py", "tests/trt/test_trt_recipes.py"),
    ),
    Mutant(
        "doctor: every version 'not installed'",
        "trtflow/doctor.py",
        "        return installed_version(module)\n",
        '        return "not installed"\n',
        ("tests/test_cli_misc.py",),
    ),
    Mutant(
        "qdq: an op type is excluded when any of its nodes is kept",
        "trtflow/sessions/precision/outcome.py",
        "if all(node in nodes for node in self.setup.every_site if ops[node] == op)",
        "if any(node in nodes for node in self.setup.every_site if ops[node] == op)",
        ("tests/quant/test_qdq_bisect.py",),
    ),
    Mutant(
        "qdq: a node reading one pair twice is switched twice (Mul(x, x))",
        "trtflow/onnxmodel/qdq.py",
        "read = [by_output[name] for name in dict.fromkeys(node.input) if name in by_output]",
        "read = [by_output[name] for name in node.input if name in by_output]",
        ("tests/quant/test_qdq_layouts.py",),
    ),
    Mutant(
        "qdq: dequantizing drops the Relu/Clip the quantizer folded into a pair",
        "trtflow/onnxmodel/qdq.py",
        "    if pair.restores is not None:\n        return _restored_activation(model, pair)",
        "    if False:\n        return _restored_activation(model, pair)",
        ("tests/quant/test_qdq_reference.py",),
    ),
    Mutant(
        "qdq lint: a non-zero zero point is not said",
        "trtflow/onnxmodel/qdq_lint.py",
        'if pair.dtype != "int32" and np.any(pair.zero_point != 0):',
        'if pair.dtype != "int32" and np.all(pair.zero_point == 12345):',
        ("tests/quant/test_qdq.py", "tests/quant/test_qdq_reference.py"),
    ),
    Mutant(
        "qdq lint: every pair is said to dequantize past float32",
        "trtflow/onnxmodel/qdq_lint.py",
        "if not _FLOAT32_MAX < peak < np.inf:",
        "if not 0 < peak < np.inf:",
        ("tests/quant/test_quantize_step.py::test_tensorrt_settings_write_symmetric_int8_pairs",),
    ),
    Mutant(
        "qdq lint: the float32 overflow flag names no reader to leave unquantized",
        "trtflow/onnxmodel/qdq_lint.py",
        'readers = ", ".join(f"`{name}`" for name in pair.consumers) or "its readers"',
        'readers = "its readers"',
        ("tests/quant/test_pair_overflow.py",),
    ),
    Mutant(
        "qdq lint: a pair dequantizing past float32 (an attention mask's -3.4e38) is not said",
        "trtflow/onnxmodel/qdq_lint.py",
        "if not _FLOAT32_MAX < peak < np.inf:",
        "if not _FLOAT32_MAX * 2 < peak < np.inf:",
        ("tests/quant/test_pair_overflow.py",),
    ),
    Mutant(
        "bisect-precision qdq: a kept reader of a shared pair does not name the pair",
        "trtflow/sessions/precision/outcome.py",
        "if node in self.setup.notes:",
        "if False:",
        ("tests/quant/test_qdq_layouts.py",),
    ),
    Mutant(
        "bisect-precision qdq: a pair read by two nodes is not taken as shared",
        "trtflow/sessions/precision/spaces/qdq.py",
        'if pair.role != "activation" or len(readers) < 2:',
        'if pair.role != "activation" or len(readers) < 3:',
        ("tests/quant/test_qdq_layouts.py",),
    ),
    Mutant(
        "quantizer exclusions: onnxruntime's list lacks the producers of the kept nodes' pairs",
        "trtflow/precision/exclusions.py",
        "if made_by is not None and made_by not in entries and ops[made_by] not in _QDQ_OPS:",
        "if False:",
        ("tests/quant/test_quantize_loop.py",),
    ),
    Mutant(
        "quantize: the exclusions file is read but its nodes are not excluded",
        "trtflow/steps/quantize.py",
        "nodes_to_exclude=tuple(entry.node for entry in excluded),",
        "nodes_to_exclude=(),",
        ("tests/quant/test_quantize_loop.py",),
    ),
    Mutant(
        "quantize: TensorRT settings leave activations asymmetric",
        "trtflow/precision/quantizers.py",
        'options |= {"ActivationSymmetric": True, "WeightSymmetric": True}',
        'options |= {"WeightSymmetric": True}',
        ("tests/quant/test_quantize_step.py",),
    ),
    Mutant(
        "bisect-precision: reference_model is ignored (the dequantized model stays the reference)",
        "trtflow/sessions/precision/search.py",
        "        if self.settings.reference_model is not None:\n",
        "        if False:\n",
        ("tests/quant/test_qdq_reference.py",),
    ),
    Mutant(
        "qdq weights: a stored weight is given float values that quantize to other values",
        "trtflow/onnxmodel/qdq_weights.py",
        "if np.mean(pair.quantize_values(values) == stored) < _SAME_VALUES:",
        "if False:",
        ("tests/quant/test_qdq_weights.py",),
    ),
    Mutant(
        "bisect-precision qdq: weights stored quantized keep their rounding (reference_model's unused)",
        "trtflow/sessions/precision/spaces/qdq.py",
        "weights = restore_float_weights(model, float_model)",
        "weights = restore_float_weights(type(model)(), float_model)",
        ("tests/quant/test_quantize_loop.py",),
    ),
    Mutant(
        "qdq: a pair's error is its mildest sample's",
        "trtflow/onnxmodel/qdq.py",
        "found.append(max(errors, key=lambda error: error.relative_l2))",
        "found.append(min(errors, key=lambda error: error.relative_l2))",
        ("tests/quant/test_qdq.py",),
    ),
    # reduce: a region fails on its own, and is minimal
    Mutant(
        "reduce: the boundary is not minimized",
        "trtflow/sessions/reduce/search.py",
        "while changed and len(region) > 1:",
        "while False:",
        ("tests/reduce",),
    ),
    Mutant(
        "reduce: a region's verdict is not inverted (passing regions are kept)",
        "trtflow/sessions/reduce/search.py",
        "return not fails_not(region)",
        "return fails_not(region)",
        ("tests/reduce",),
    ),
    # the sessions built directly (tests/sessions): issue "Hardening", item 15
    Mutant(
        "reduce: the region is verified on the search's samples (the report still says fresh)",
        "trtflow/sessions/reduce/search.py",
        "feeds = self._feeds(graph.model, data, None)",
        "feeds = self._feeds(graph.model, self.settings.data, None)",
        ("tests/sessions/test_sessions.py",),
    ),
    Mutant(
        "qdq search: quantized nodes outside `nodes` are dequantized in every trial",
        "trtflow/sessions/precision/search.py",
        "self.journal, self.context.progress, evaluate, frozenset(setup.fixed), estimate",
        "self.journal, self.context.progress, evaluate, setup.every_site - set(setup.candidates), estimate",
        ("tests/sessions/test_sessions.py",),
    ),
    Mutant(
        "judges: a per-output error_stat is judged elementwise",
        "trtflow/tensors/comparison.py",
        'update={"error_stat": self.error_stat[key] if key is not None else "elemwise"}',
        'update={"error_stat": "elemwise"}',
        ("tests/sessions/test_sessions.py", "tests/sessions/test_error_stat_cli.py"),
    ),
    Mutant(
        "inputs: what read feeds lack is drawn data.iterations times, not once per feed",
        "trtflow/tensors/inputs.py",
        'drawn = generate(data.model_copy(update={"iterations": len(feeds)}), lacking, named=specs)',
        "drawn = generate(data, lacking, named=specs)",
        ("tests/run_compare/test_layerwise_draws.py",),
    ),
    Mutant(
        "inputs: every feed gets the same draw of what it lacks",
        "trtflow/tensors/inputs.py",
        'drawn = generate(data.model_copy(update={"iterations": len(feeds)}), lacking, named=specs)',
        'drawn = list(generate(data.model_copy(update={"iterations": 1}), lacking, named=specs)) * len(feeds)',
        ("tests/run_compare/test_layerwise_draws.py",),
    ),
    Mutant(
        "sessions: a field added to the shared settings changes every journal key",
        "trtflow/sessions/trials.py",
        '    inputs: InputPath | None = Field(\n        None,\n        description="Samples from a file',
        '    seeds: int = 0\n    inputs: InputPath | None = Field(\n        None,\n        description="Samples from a file',
        ("tests/sessions/test_before_split.py",),
    ),
    # TensorRT debug tensors and capability: what the engine and the parser say reaches the user
    Mutant(
        "tensorrt runner: debug tensors are read but not returned",
        "trtflow/trt/execution.py",
        "return self._debug_values() | results",
        "return results",
        ("tests/trt/test_trt_debug_listener.py",),
    ),
    Mutant(
        "tensorrt runner: a lowered debug tensor (`X::fp16`) is returned under its engine name",
        "trtflow/trt/execution.py",
        "values[onnx_name] = value.astype(np.float32)",
        "values[name] = value",
        ("tests/trt/test_trt_debug_listener.py",),
    ),
    Mutant(
        "build-engine: an ONNX debug tensor name is not looked up in the lowered model",
        "trtflow/trt/builder.py",
        "name: name if name in tensors or lowered is None else lowered_name(name, lowered)",
        "name: name",
        ("tests/trt/test_trt_debug_listener.py",),
    ),
    Mutant(
        "tensorrt runner: a library without IDebugListener is not a recipe error",
        "trtflow/runners/tensorrt.py",
        'raise ParamError("debug_tensors", missing)',
        "return",
        ("tests/trt/test_trt_debug_listener.py",),
    ),
    Mutant(
        "capability: a rejection inside an If branch or local function is not mapped to its top-level node",
        "trtflow/trt/capability.py",
        'node, op = nodes[index] if 0 <= index < len(nodes) else ("", "")',
        'node, op = ("", "")',
        ("tests/trt/test_rtx_capability_nested.py",),
    ),
    Mutant(
        "inspect ENGINE: a plan whose header the library finds malformed passes as an engine",
        "trtflow/trt/plan_file.py",
        'if "MALFORMED_ENGINE" in problems:',
        "if False:",
        ("tests/trt/test_rtx_plans.py",),
    ),
    Mutant(
        "inspect ENGINE: a truncated plan (size in its header) passes as an engine",
        "trtflow/trt/plan_file.py",
        "if header is not None and header[1] != len(data):",
        "if False:",
        ("tests/trt/test_rtx_plans.py",),
    ),
    Mutant(
        "inspect ENGINE: no driver here is not told from other reasons a plan cannot load",
        "trtflow/trt/plan_file.py",
        'if any("cudaError 35" in message for _, message in log.lines):',
        "if False:",
        ("tests/trt/test_rtx_plans.py",),
    ),
    Mutant(
        "build-engine: dims of one name given different sizes are not explained",
        "trtflow/trt/build_errors.py",
        """if found and (
            error := _shared_name_error(model_file, found.group(1), shapes, message, key)
        ):""",
        "if False:",
        ("tests/trt/test_rtx_plans.py",),
    ),
    Mutant(
        "tensorrt runner: the first optimization profile serves every feed",
        "trtflow/trt/execution.py",
        "if index != self._profile:",
        "if False:",
        ("tests/trt/test_trt_profiles.py",),
    ),
    Mutant(
        "build-engine: only the first of several optimization profiles reaches the engine",
        "trtflow/trt/profiles.py",
        "for index, shapes in enumerate(profiles or ({},)):",
        "for index, shapes in enumerate((profiles or ({},))[:1]):",
        ("tests/trt/test_trt_profiles.py",),
    ),
    Mutant(
        "build-engine: tf32: false leaves TF32 on",
        "trtflow/trt/builder.py",
        "elif settings.tf32 is False:",
        "elif False:",
        ("tests/trt/test_trt_build_options.py",),
    ),
    Mutant(
        "build-engine: a timing_cache path is ignored for the workspace's cache",
        "trtflow/steps/build_engine.py",
        "    if given is True:",
        "    if given:",
        ("tests/trt/test_trt_build_options.py",),
    ),
    Mutant(
        "render-graph: a rejected node may be folded away in the simplified view",
        "trtflow/steps/render_graph.py",
        "highlight=[*highlight, *rejected],",
        "highlight=highlight,",
        ("tests/trt/test_rtx_capability.py",),
    ),
    # round trips: the judge runs a tool's output as stored; the exports take the form tools honour
    Mutant(
        "stored emulation: a converted model's FP16 outputs are not stored through FP16",
        "trtflow/precision/stored.py",
        "if elem is None or not output:",
        "if True:",
        ("tests/roundtrip/test_round_trip.py",),
    ),
    Mutant(
        "round trip: a kept Constant reaches onnxconverter-common as a node",
        "trtflow/sessions/roundtrip/session.py",
        'given = exports.tool_input(original, kept, tool == "onnxconverter-common")',
        "given = exports.tool_input(original, kept, False)",
        ("tests/roundtrip/test_round_trip.py",),
    ),
    Mutant(
        "round trip: AutoCast runs on random inputs (no calibration samples)",
        "trtflow/sessions/roundtrip/exports.py",
        """        "--calibration_data",
        AUTOCAST_CALIBRATION,
""",
        "",
        ("tests/roundtrip/test_round_trip.py::test_autocast_round_trip",),
    ),
    Mutant(
        "round trip: AutoCast makes the model's inputs and outputs FP16",
        "trtflow/sessions/roundtrip/exports.py",
        """        "--keep_io_types",
""",
        "",
        (
            "tests/roundtrip/test_round_trip.py::test_autocast_keeps_the_inputs_the_kept_nodes_read_in_fp32",
        ),
    ),
    Mutant(
        "round trip: a kept value the converter reads through FP16 goes unnamed",
        "trtflow/sessions/roundtrip/tools.py",
        "            readers.setdefault(value, []).append(node.name)",
        "            pass",
        (
            "tests/roundtrip/test_round_trip.py::test_a_kept_value_the_converter_still_rounds_is_named",
        ),
    ),
    Mutant(
        "round trip: a kept Constant made an initializer keeps its value_info (the converter clamps it)",
        "trtflow/sessions/roundtrip/exports.py",
        "typed = [info for info in model.graph.value_info if info.name not in made]",
        "typed = list(model.graph.value_info)",
        (
            "tests/diagnosis/test_diagnose.py::test_a_real_detectors_batchnorm_constant_survives_onnxconverter_common",
        ),
    ),
    Mutant(
        "round trip: the converter's copy shares weights between kept and lowered nodes",
        "trtflow/sessions/roundtrip/exports.py",
        "shared = _split_shared_weights(named, set(keep)) if converter else []",
        "shared = []",
        (
            "tests/roundtrip/test_round_trip.py::test_the_converters_output_of_a_kept_node_loads_in_onnxruntime",
        ),
    ),
    Mutant(
        "round trip: Casts to FLOAT are left to the converter's mistyping",
        "trtflow/sessions/roundtrip/exports.py",
        "casts = _float_casts(named, set(keep)) if converter else []",
        "casts = []",
        (
            "tests/roundtrip/test_round_trip.py::test_the_converters_output_of_a_kept_node_loads_in_onnxruntime",
        ),
    ),
    Mutant(
        "round trip: a graph output read inside reaches the converter as it is",
        "trtflow/sessions/roundtrip/exports.py",
        "read_outputs = _output_identities(named) if converter else []",
        "read_outputs = []",
        (
            "tests/roundtrip/test_round_trip.py::test_the_converters_output_of_a_kept_node_loads_in_onnxruntime",
        ),
    ),
    Mutant(
        "round trip: values the converter would round reach it as they are (no FP64 copies)",
        "trtflow/sessions/roundtrip/exports.py",
        "reads = prepare_reads(named, set(keep) - set(constants)) if converter else Prepared()",
        "reads = Prepared()",
        (
            "tests/roundtrip/test_converter_reads.py",
            "tests/roundtrip/test_round_trip.py::test_a_kept_value_read_twice_reaches_the_converters_kept_nodes_in_fp32",
        ),
    ),
    Mutant(
        "round trip: a graph input a kept node reads twice reaches the converter as it is",
        "trtflow/sessions/roundtrip/converter_reads.py",
        "if nodes[index].name in keep and list(nodes[index].input).count(value) > 1",
        "if False",
        (
            "tests/roundtrip/test_round_trip.py::test_a_kept_value_read_twice_reaches_the_converters_kept_nodes_in_fp32",
        ),
    ),
    Mutant(
        "round trip: a kept value read more than once reaches the converter as it is",
        "trtflow/sessions/roundtrip/converter_reads.py",
        "if value in kept_made and len(where) > 1:",
        "if False:",
        (
            "tests/roundtrip/test_round_trip.py::test_a_kept_value_read_twice_reaches_the_converters_kept_nodes_in_fp32",
        ),
    ),
    Mutant(
        "round trip: the weights a kept If reads are not moved into it",
        "trtflow/sessions/roundtrip/converter_reads.py",
        "                copy.CopyFrom(floats[name])\n",
        "",
        ("tests/roundtrip/test_converter_reads.py",),
    ),
    Mutant(
        "round trip: a weight the top level still reads is defined again inside the kept If",
        "trtflow/sessions/roundtrip/converter_reads.py",
        "if name in still:  # no name defined twice, in and around the subgraph",
        "if False:",
        ("tests/roundtrip/test_converter_reads.py",),
    ),
    Mutant(
        "round trip: a kept If's branches read the outer value the converter made FP16",
        "trtflow/sessions/roundtrip/converter_reads.py",
        "            _read_inside(node, name)",
        "            pass",
        ("tests/roundtrip/test_converter_reads.py",),
    ),
    Mutant(
        "round trip: the FP64 and FP32 Casts of the converter's copy are left out of its block list",
        "trtflow/sessions/roundtrip/exports.py",
        "names = [n for n in keep if n not in constants] + casts + reads.casts",
        "names = [n for n in keep if n not in constants] + casts",
        (
            "tests/roundtrip/test_converter_reads.py",
            "tests/roundtrip/test_round_trip.py::test_a_kept_value_read_twice_reaches_the_converters_kept_nodes_in_fp32",
        ),
    ),
    # diagnose: a finding is attached to a cause only when keeping that cause removes it (measured)
    Mutant(
        "diagnose: every finding is attached to the first cause, measured or not",
        "trtflow/sessions/diagnosis/session.py",
        "if _removed(alone.tensors.get(tensor)):",
        "if True:",
        ("tests/diagnosis/test_diagnose.py",),
    ),
    Mutant(
        "load's checker: a weight whose raw_data does not fill its shape is a placeholder too",
        "trtflow/onnxmodel/proto.py",
        "return declared if not typed and len(tensor.raw_data) == declared else None",
        "return declared if not typed else None",
        (
            "tests/test_onnx_proto.py",
            "tests/test_load.py::test_a_large_models_checker_complaint_is_the_checkers_own",
        ),
    ),
    Mutant(
        "round trip: a lowered Constant holding value_float goes to onnxconverter-common as it is",
        "trtflow/sessions/roundtrip/exports.py",
        "    scalars = _float_values_as_tensors(named, set(keep)) if converter else []",
        "    scalars: list[str] = []",
        ("tests/diagnosis/test_formats.py::test_an_overflow_inside_a_local_function",),
    ),
    Mutant(
        "diagnose: a Q/DQ pair between two kept nodes splits them into two causes",
        "trtflow/sessions/diagnosis/causes.py",
        "                tensor, seen = through_pair[tensor], seen + 1",
        "                break",
        ("tests/diagnosis/test_causes.py",),
    ),
    Mutant(
        "diagnose: causes that restore only together are told as one to blame",
        "trtflow/sessions/diagnosis/session.py",
        "if first.passes_alone or len(report.causes) == 1:",
        "if True:",
        (
            "tests/diagnosis/test_causes.py",
            "tests/roundtrip/test_qdq_round_trip.py::test_a_calibration_mismatch_is_found_and_fixed_by_quantize_static_again",
        ),
    ),
    Mutant(
        "diagnosis viewer: the findings get no ring",
        "trtflow/sessions/diagnosis/viewer.py",
        'changes[target] = {"marks": marks | {finding.kind}}',
        'changes[target] = {"marks": marks}',
        (
            "tests/diagnosis/test_diagnose.py::test_the_first_cause_is_the_one_that_restores_the_outputs",
        ),
    ),
    Mutant(
        "diagnosis viewer: drawn in the FP32 file's colors, not the fix's plan",
        "trtflow/sessions/diagnosis/viewer.py",
        "    graph = as_planned(graph, report)\n",
        "",
        (
            "tests/diagnosis/test_diagnose.py::test_the_first_cause_is_the_one_that_restores_the_outputs",
        ),
    ),
    Mutant(
        "diagnose: a float32-min constant is no mask constant",
        "trtflow/sessions/diagnosis/mechanisms.py",
        "if abs(extreme) >= MASK_CONSTANT:",
        "if False:",
        ("tests/diagnosis/test_diagnose.py",),
    ),
    # issue 31: files outside a model's folder (2), folders as models (3), gc beside a live run (4),
    # check commands (1)
    Mutant(
        "external data: a model's data outside its folder is hashed for the key",
        "trtflow/onnxmodel/files.py",
        """    if refusal:
        raise InputError(f"{path}: {refusal}")
""",
        "",
        ("tests/test_outside_files.py",),
    ),
    Mutant(
        "external data: a model saved again appends its weights to the data file there",
        "trtflow/onnxmodel/files.py",
        "        (path.parent / location).unlink(missing_ok=True)",
        "        pass",
        ("tests/scale/test_saved_weights.py",),
    ),
    Mutant(
        "external data: a model saved again appends its weights to the data file there (trtflow's writer)",
        "trtflow/onnxmodel/proto.py",
        'with open(path.parent / location, "wb") as data:',
        'with open(path.parent / location, "ab") as data:',
        ("tests/scale/test_saved_weights.py",),
    ),
    Mutant(
        "external data: a graph-only model's data file is started afresh under it",
        "trtflow/onnxmodel/files.py",
        "    if not any(_reads_from(t, location) for t in iter_initializers(model.graph)):",
        "    if True:",
        ("tests/scale/test_saved_weights.py",),
    ),
    Mutant(
        "switchable runner: keeps the switchable model (and its weights' memory) after activation",
        "trtflow/runners/emulated.py",
        "        self.switchable = dataclasses.replace(self.switchable, model=onnx.ModelProto())",
        "        pass",
        ("tests/bisect/test_low_precision_sites.py",),
    ),
    Mutant(
        "searches: a model past memory is searched anyway",
        "trtflow/memory.py",
        "    if available is not None and needed > available:",
        "    if False:",
        ("tests/scale/test_saved_weights.py",),
    ),
    Mutant(
        "memory: a cgroup's usage is not subtracted from its limit",
        "trtflow/memory.py",
        "            return max(0, int(limit) - usage + int(stat.get(files[2], 0)))",
        "            return max(0, int(limit))",
        ("tests/scale/test_saved_weights.py",),
    ),
    Mutant(
        "memory: an address-space limit (ulimit -v) is not counted",
        "trtflow/memory.py",
        "        for limit in (_meminfo_available(), _cgroup_left(), _address_space_left())",
        "        for limit in (_meminfo_available(), _cgroup_left())",
        ("tests/scale/test_large_model.py",),
    ),
    Mutant(
        "external data: a remembered companion outside the folder is read",
        "trtflow/executor/hashing.py",
        "if os.path.isabs(name) or not (folder / name).resolve().is_relative_to(folder):",
        "if False:",
        ("tests/test_outside_files.py",),
    ),
    Mutant(
        "validate: companions are not asked for",
        "trtflow/cli/recipes.py",
        "pipeline = load(recipe, overrides, companions=True)",
        "pipeline = load(recipe, overrides)",
        ("tests/test_outside_files.py",),
    ),
    Mutant(
        "paths: a folder given as a model is hashed before anything refuses it",
        "trtflow/schema/paths.py",
        """    if not path.is_dir():
        return path
""",
        "    return path\n",
        ("tests/test_outside_files.py",),
    ),
    Mutant(
        "hashing: a link back to a folder above it is followed",
        "trtflow/executor/hashing.py",
        "elif _identity(status) in above:",
        "elif False:",
        ("tests/test_outside_files.py",),
    ),
    Mutant(
        "gc: a record temporary renamed while gc looks fails gc",
        "trtflow/executor/workspace.py",
        """    try:
        modified = temporary.stat().st_mtime
    except FileNotFoundError:
        return True
""",
        "    modified = temporary.stat().st_mtime\n",
        ("tests/test_live_gc.py::test_gc_beside_a_record_renamed_into_place_while_gc_looks",),
    ),
    Mutant(
        "check command: only its direct child is killed at the timeout",
        "trtflow/user_code.py",
        "_kill_group(process.pid)  # after a timeout, an error or a Ctrl-C: all of it",
        "process.kill()",
        (
            "tests/bisect/test_check_processes.py::"
            "test_a_check_command_killed_at_its_timeout_takes_its_children_along",
        ),
    ),
    Mutant(
        "check command: nothing ends its process group when the run is killed",
        "trtflow/user_code.py",
        """GROUP_GUARD = 'read _; kill -KILL -"$0"'""",
        "GROUP_GUARD = 'read _'",
        (
            "tests/bisect/test_check_processes.py::test_killing_the_run_ends_the_check_command_and_its_children",
        ),
    ),
    # issue 31 item 15: every load parameter that changes the written model is in the step key
    Mutant(
        "load: inline_functions declared cosmetic (left out of the step key)",
        "trtflow/steps/load.py",
        "class Params(StepParams):\n",
        'class Params(StepParams):\n    cosmetic = frozenset({"inline_functions"})\n',
        ("tests/test_polygraphy_models.py::test_inline_functions_is_in_the_load_steps_key",),
    ),
    Mutant(
        "viewer: the common scope of paths of different lengths keeps the longer one's tail",
        "trtflow/graph/scopes.py",
        "min(len(prefix), len(path))",
        "len(prefix)",
        ("tests/graph/test_scopes.py",),
    ),
    # issue 31 item 14: a resumed search writes the report of one that ran through
    Mutant(
        "journal: a trial run now keeps its metrics in computed key order (resumed reports differ)",
        "trtflow/executor/journal.py",
        "_as_stored(trial), bool(passed), _as_stored(metrics), float(seconds)",
        "_as_stored(trial), bool(passed), metrics, float(seconds)",
        ("tests/test_resumed_reports.py",),
    ),
    Mutant(
        "bisect-precision: autocast_args.txt names no calibration samples",
        "trtflow/sessions/precision/outcome.py",
        '        arguments += ["--calibration_data", AUTOCAST_CALIBRATION]\n',
        "",
        (
            "tests/bisect/test_bisect_step.py::test_the_keep_set_is_written_for_modelopt_autocast_and_onnxconverter_common",
        ),
    ),
    Mutant(
        "bisect-precision: the calibration folder autocast_args.txt names is left empty",
        "trtflow/steps/bisect_precision.py",
        "collect_samples(model, params.data, params.inputs),",
        "[],",
        (
            "tests/bisect/test_bisect_step.py::test_the_keep_set_is_written_for_modelopt_autocast_and_onnxconverter_common",
            "tests/bisect/test_bisect_step.py::test_autocast_runs_with_the_written_arguments_in_the_steps_output_folder",
        ),
    ),
    Mutant(
        "bisect-precision: the report lists only the trials run now, not those the journal answered",
        "trtflow/sessions/precision/outcome.py",
        "                for r in self.records\n            ],",
        '                for r in self.records\n                if r.origin == "run"\n            ],',
        ("tests/test_resumed_reports.py",),
    ),
    # issue 31 item 15: a runner's pack reopened by a later pass keeps what it held
    Mutant(
        "tensor set: a pack reopened for another array is rewritten (earlier arrays lost)",
        "trtflow/tensors/packs.py",
        'open(self.path, "ab" if self.size else "wb")',
        'open(self.path, "wb")',
        (
            "tests/run_compare/test_recipes.py::"
            "test_a_runners_pack_reopened_by_a_later_pass_keeps_the_arrays_written_before",
        ),
    ),
    Mutant(
        "gc: --keep evicts while a run holds its lease",
        "trtflow/executor/gc.py",
        "evicting = bool(keep) and alone",
        "evicting = bool(keep)",
        ("tests/test_live_gc.py::test_gc_keep_beside_a_live_run_evicts_nothing_it_made",),
    ),
    Mutant(
        "gc: a run takes no lease (gc finds the workspace free beside it)",
        "trtflow/executor/run.py",
        "    with workspace.run_lease():",
        '    with __import__("contextlib").nullcontext():',
        ("tests/test_live_gc.py::test_gc_keep_beside_a_live_run_evicts_nothing_it_made",),
    ),
    # issue 31 item 6: a compressed .npz is judged from its headers before it is expanded
    Mutant(
        "npz: its arrays are expanded before their headers are judged",
        "trtflow/tensors/array_files.py",
        "        _check_headers(archive, path, check)\n"
        "        return {name: _member(archive, path, name) for name in archive.files}",
        "        arrays = {name: _member(archive, path, name) for name in archive.files}\n"
        "        _check_headers(archive, path, check)\n"
        "        return arrays",
        (
            "tests/run_compare/test_inputs.py::"
            "test_a_compressed_npz_of_the_wrong_shape_is_refused_from_its_header_unexpanded",
        ),
    ),
    Mutant(
        "npz: read inputs are not judged against the model's shapes from their headers",
        "trtflow/tensors/inputs.py",
        "source = read_feeds(inputs, check=_declared_shapes(specs))",
        "source = read_feeds(inputs)",
        (
            "tests/run_compare/test_inputs.py::"
            "test_a_compressed_npz_of_the_wrong_shape_is_refused_from_its_header_unexpanded",
        ),
    ),
    Mutant(
        "process pool: a killed run leaves its queues' semaphores to the resource tracker",
        "trtflow/executor/pools.py",
        "    multiprocessing.util._run_finalizers(0)",
        "    multiprocessing.util.debug('no finalizers')",
        ("tests/test_orphans.py",),
    ),
    Mutant(
        "run: SIGTERM ends the run where it stands (no finally, no cleanup)",
        "trtflow/cli/common.py",
        "        signal.signal(signal.SIGTERM, _terminated)",
        "        signal.getsignal(signal.SIGTERM)",
        ("tests/test_orphans.py",),
    ),
    # issue 31 item 7: nothing writes into a cache entry but the store, and verify sees it
    Mutant(
        "workspace: a recipe inside a cache entry gets its .trtflow/ beside it, in the entry",
        "trtflow/executor/workspace.py",
        "if (entry := entry_holding(recipe_file.parent)) is not None:",
        "if (entry := None) is not None:",
        (
            "tests/reduce/test_reduce_step.py::"
            "test_the_repro_recipe_run_where_it_lies_writes_nothing_into_the_cache",
        ),
    ),
    Mutant(
        "run: an output folder inside a cache entry is accepted",
        "trtflow/cli/common.py",
        "if (entry := entry_holding(folder)) is not None:",
        "if (entry := None) is not None:",
        (
            "tests/reduce/test_reduce_step.py::"
            "test_the_repro_recipe_run_where_it_lies_writes_nothing_into_the_cache",
        ),
    ),
    Mutant(
        "cache verify: files an entry's manifest does not list pass",
        "trtflow/executor/gc.py",
        "if extra := unlisted_files(entry):",
        "if extra := []:",
        (
            "tests/reduce/test_reduce_step.py::"
            "test_the_repro_recipe_run_where_it_lies_writes_nothing_into_the_cache",
        ),
    ),
    Mutant(
        "taps: `tensors: all` taps Constant outputs as Polygraphy's mark all does not",
        "trtflow/steps/surgeon_insert_tap.py",
        'tensors_in_scope = {n: t for n, t in tensors.items() if t.op != "Constant"}',
        "tensors_in_scope = tensors",
        ("tests/run_compare/test_recipes.py::test_tapping_all_leaves_constants_out_unless_asked",),
    ),
    Mutant(
        "formats: FP16's overflow bound one bit past the tie (65520 stays finite)",
        "trtflow/onnxmodel/formats.py",
        '"fp16": 0x477FF000',
        '"fp16": 0x477FF001',
        ("tests/test_onnx_proto.py::test_overflows_and_underflows_are_what_rounding_gives",),
    ),
    Mutant(
        "onnx proto: weights put back after an external-data save keep no explicit DEFAULT location",
        "trtflow/onnxmodel/proto.py",
        "            tensor.raw_data = raw\n            tensor.data_location = _DEFAULT\n",
        "            tensor.raw_data = raw\n",
        ("tests/test_onnx_proto.py::test_external_data_is_written_and_read_as_onnx_does",),
    ),
    # issue 31 item 15: one property over every step kind: cosmetic params change no output's
    # bytes, every other param changes the step key
    Mutant(
        "keys: a judgement param (compare's atol) left out of the step key",
        "trtflow/executor/keys.py",
        'return params.model_dump(mode="json", exclude=set(kind.Params.cosmetic))',
        'return params.model_dump(mode="json", exclude=set(kind.Params.cosmetic | kind.Params.judgement))',
        ("tests/test_cosmetic_params.py",),
    ),
    Mutant(
        "build-engine: the timing cache's path always reaches the build log",
        "trtflow/trt/builder.py",
        '            if stored:\n                self.log.note(f"timing cache: {self.path}")',
        '            self.log.note(f"timing cache: {self.path}")',
        ("tests/test_cosmetic_params.py",),
    ),
    Mutant(
        "compare: atol declared cosmetic (left out of the key, edits not rerun)",
        "trtflow/steps/compare.py",
        'cosmetic = frozenset({"gate"})',
        'cosmetic = frozenset({"gate", "atol"})',
        ("tests/test_cosmetic_params.py",),
    ),
    # the Q/DQ round trip (issue 27): judged against the float model, re-quantized as first quantized
    Mutant(
        "qdq: a model with its activations put back still reads ranges starting at 0 as removed ones",
        "trtflow/onnxmodel/qdq.py",
        "made_by = producer.get(source) if not settled else None",
        "made_by = producer.get(source)",
        (
            "tests/roundtrip/test_qdq_round_trip.py::test_dequantized_with_the_float_models_activations_is_the_float_model",
        ),
    ),
    Mutant(
        "qdq: a removed Clip (hard-swish) is not put back from the float model",
        "trtflow/onnxmodel/qdq_activations.py",
        "activation.op_type not in REMOVABLE:",
        'activation.op_type != "Relu":',
        (
            "tests/roundtrip/test_qdq_round_trip.py::test_dequantized_with_the_float_models_activations_is_the_float_model",
        ),
    ),
    Mutant(
        "diagnose qdq: the search judges against the dequantized model although float_model is given",
        "trtflow/sessions/diagnosis/session.py",
        'return Path(s.float_model) if s.precision == "qdq" and s.float_model else None',
        "return None",
        (
            "tests/roundtrip/test_qdq_round_trip.py::test_a_calibration_mismatch_is_found_and_fixed_by_quantize_static_again",
        ),
    ),
    Mutant(
        "round trip qdq: the quantizer excludes the kept nodes only, not the producers of their pairs",
        "trtflow/sessions/roundtrip/session.py",
        "settings = quantizer.library(name, found.nodes_for(name))",
        "settings = quantizer.library(name, kept)",
        (
            "tests/roundtrip/test_qdq_round_trip.py::test_a_keep_set_alone_is_excluded_with_the_producers_the_quantizer_attaches_pairs_to",
        ),
    ),
    Mutant(
        "diagnose qdq: a graph input's pair has no values to explain it with",
        "trtflow/sessions/diagnosis/probe.py",
        "return [r[name] for r in self._reference if name in r] or [",
        "return [r[name] for r in self._reference if name in r] or 0 * [",
        (
            "tests/roundtrip/test_qdq_round_trip.py::"
            "test_a_miscalibrated_input_pair_is_explained_by_its_clipping",
        ),
    ),
    Mutant(
        "round trip qdq: the quantize step's report is ignored (re-quantized with other settings)",
        "trtflow/sessions/roundtrip/tools.py",
        "        if self.report is not None:",
        "        if False:",
        (
            "tests/roundtrip/test_qdq_round_trip.py::test_a_keep_set_alone_is_excluded_with_the_producers_the_quantizer_attaches_pairs_to",
        ),
    ),
    Mutant(
        "round trip qdq: TensorRT-RTX's refusal of an asymmetric model is its parser's bare words",
        "trtflow/sessions/roundtrip/tools.py",
        'f"{asymmetric}; {refused}" if asymmetric else refused',
        "refused",
        (
            "tests/roundtrip/test_qdq_round_trip.py::test_a_calibration_mismatch_is_found_and_fixed_by_quantize_static_again",
        ),
    ),
    Mutant(
        "round trip qdq: TensorRT-RTX is told the model is asymmetric from its weights' pairs only",
        "trtflow/onnxmodel/qdq_lint.py",
        'asymmetric = [f.node for f in flags(model) if f.kind == "zero-point-nonzero"]',
        'asymmetric = [f.node for f in flags(model) if f.kind == "zero-point-nonzero" and "w_0" in f.node]',
        (
            "tests/roundtrip/test_qdq_round_trip.py::test_a_calibration_mismatch_is_found_and_fixed_by_quantize_static_again",
        ),
    ),
    Mutant(
        "diagnose qdq: any clipping names the mechanism, though the scale rounds far more to zero",
        "trtflow/sessions/diagnosis/mechanisms.py",
        "if error.clipped > 0 and error.clipped >= error.zeroed:",
        "if error.clipped > 0:",
        (
            "tests/roundtrip/test_qdq_round_trip.py::test_a_scale_set_by_an_outlier_channel_is_explained_by_its_rounding",
        ),
    ),
    Mutant(
        "diagnose qdq: a tensor mostly rounded to zero does not say an outlier set its scale",
        "trtflow/sessions/diagnosis/mechanisms.py",
        '+ (_OUTLIER.format(largest) if error.zeroed > 0.5 else ""),',
        '+ (_OUTLIER.format(largest) if error.zeroed > 1.5 else ""),',
        (
            "tests/roundtrip/test_qdq_round_trip.py::test_a_scale_set_by_an_outlier_channel_is_explained_by_its_rounding",
        ),
    ),
    Mutant(
        "diagnose qdq: an unverified fix of a model calibrated off its served inputs does not say recalibrate",
        "trtflow/sessions/diagnosis/session.py",
        '        parts += _uncovered(report.causes, bool(report.search.get("verified")))\n',
        "",
        (
            "tests/roundtrip/test_qdq_round_trip.py::test_a_quantization_calibrated_far_off_the_served_inputs_is_to_be_recalibrated",
        ),
    ),
    Mutant(
        "quantize: ModelOpt's default venv is not looked for without TRTFLOW_MODELOPT_PYTHON",
        "trtflow/precision/quantizers.py",
        "if not found and Path(DEFAULT_MODELOPT_PYTHON).is_file():",
        "if False:",
        ("tests/quant/test_quantize_step.py::test_modelopt",),
    ),
    Mutant(
        "quantize: ModelOpt is given the user's own model file (it writes over it)",
        "trtflow/precision/quantizers.py",
        'given = _private_copy(source, Path(folder, "model"))',
        "given = source",
        (
            "tests/roundtrip/test_qdq_round_trip.py::test_a_keep_set_alone_is_excluded_with_the_producers_the_quantizer_attaches_pairs_to",
        ),
    ),
    Mutant(
        "ray: a local Ray starts without its guard (a killed run leaves its agents running)",
        "trtflow/executor/pools.py",
        'if not address and sys.platform.startswith("linux"):',
        "if False:",
        ("tests/test_ray_executor.py::test_a_killed_run_takes_the_local_ray_it_started_along",),
    ),
    Mutant(
        "onnxruntime runner: a model file run as it is is parsed and serialized again",
        "trtflow/runners/onnxruntime.py",
        "if isinstance(given, (str, Path)) and self.transform is None and self.outputs is None:",
        "if False:",
        (
            "tests/run_compare/test_runner_outcomes.py::test_a_model_file_run_as_it_is_is_opened_by_path_unparsed",
        ),
    ),
    Mutant(
        "load: weights between 16 and 64 MB are written inline (save_model's own threshold)",
        "trtflow/steps/load.py",
        "        and (weight_bytes(model) if stored is None else stored) <= EXTERNAL_WEIGHT_BYTES\n",
        "        and (weight_bytes(model) if stored is None else stored) <= 64 << 20\n",
        ("tests/test_load.py::test_a_model_with_large_weights_is_stored_with_them_external",),
    ),
    Mutant(
        "load: the weights it wrote apart stay in memory through the self-check",
        "trtflow/steps/load.py",
        "        model, model_path, external_data=True, keep_weights=False, weights_from=apart\n    )\n",
        "        model, model_path, external_data=True, weights_from=apart\n    )\n    return model\n",
        (
            "tests/scale/test_saved_weights.py::test_load_lets_the_weights_it_wrote_apart_go_and_saves_its_graph_over_them",
        ),
    ),
    Mutant(
        "load: the summary reads the weights after letting them go",
        "trtflow/steps/load.py",
        '    facts = weight_facts(model, apart)\n    return _save(model, model_path, facts["bytes"], ctx, apart), status, facts\n',
        "    model = _save(model, model_path, None, ctx, apart)\n    return model, status, weight_facts(model, apart)\n",
        ("tests/test_load.py::test_a_model_with_large_weights_is_stored_with_them_external",),
    ),
    Mutant(
        "graph edit: a data file laid out in another order is copied as if saving wrote it",
        "trtflow/onnxmodel/proto.py",
        "if where != location or offset != str(end) or length != str(size):",
        "if where != location or length != str(size):",
        ("tests/test_onnx_proto.py::test_a_graph_edit_saves_what_saving_the_whole_model_saves",),
    ),
    Mutant(
        "graph edit: a data file holding more than the weights is copied",
        "trtflow/onnxmodel/proto.py",
        "or data.stat().st_size != end:",
        ":",
        ("tests/test_onnx_proto.py::test_a_graph_edit_saves_what_saving_the_whole_model_saves",),
    ),
    Mutant(
        "load: a model with If/Loop/Scan bodies is only opened, not run, by the self-check",
        "trtflow/steps/load.py",
        "    run = inlined or _has_bodies(model)\n",
        "    run = inlined\n",
        ("tests/subgraphs",),
    ),
    Mutant(
        "load: a model whose functions were inlined is only opened, not run, by the self-check",
        "trtflow/steps/load.py",
        "    run = inlined or _has_bodies(model)\n",
        "    run = _has_bodies(model)\n",
        (
            "tests/test_polygraphy_models.py::test_a_model_onnx_cannot_inline_is_loaded_with_its_functions",
        ),
    ),
    # issue 30: load's summary reads every weight once
    Mutant(
        "ranges: a chunk holding NaN or inf is read as all finite",
        "trtflow/precision/ranges.py",
        "if np.isfinite(low) and np.isfinite(high):",
        "if np.isfinite(low):",
        ("tests/test_constant_ranges.py",),
    ),
    Mutant(
        "ranges: overflows short of twice a format's largest value go uncounted",
        "trtflow/precision/ranges.py",
        "if max_abs is not None and max_abs > fmt.max:",
        "if max_abs is not None and max_abs > 2 * fmt.max:",
        ("tests/test_constant_ranges.py",),
    ),
    Mutant(
        "ranges: the smallest magnitude read from the bits without zero's wrap (0 counts)",
        "trtflow/precision/ranges.py",
        "        bits -= 1\n        least = int(bits.min())",
        "        least = int(bits.min()) - 1",
        ("tests/test_constant_ranges.py",),
    ),
    Mutant(
        "formats: the counted FP16/BF16 underflows include zero",
        "trtflow/onnxmodel/formats.py",
        "        bits -= 1\n        return int(np.count_nonzero(bits < _LAST_UNDERFLOW[self.name]))",
        "        return int(np.count_nonzero(bits <= _LAST_UNDERFLOW[self.name]))",
        ("tests/test_onnx_proto.py::test_overflows_and_underflows_are_what_rounding_gives",),
    ),
    Mutant(
        "formats: the counted FP16/BF16 overflows include inf and NaN",
        "trtflow/onnxmodel/formats.py",
        "bits < _INF_BITS - _FIRST_OVERFLOW[self.name]",
        "bits < 2**32 - _FIRST_OVERFLOW[self.name]",
        ("tests/test_onnx_proto.py::test_overflows_and_underflows_are_what_rounding_gives",),
    ),
    Mutant(
        "files: weight_bytes measures every raw weight (a copy of all the weights)",
        "trtflow/onnxmodel/files.py",
        "len(t.raw_data) if (declared := declared_bytes(t)) is None else declared",
        "len(t.raw_data)",
        ("tests/test_onnx_proto.py::test_weight_bytes_sums_the_sizes_raw_weights_declare",),
    ),
    Mutant(
        "load: a model with large weights in external data is read whole",
        "trtflow/steps/load.py",
        "    if not params.lint and not has_pairs(model):",
        "    if False:",
        (
            "tests/test_load.py::test_large_external_weights_are_summarized_and_written_one_at_a_time",
        ),
    ),
    Mutant(
        "proto: the places of the weights left in external data are not checked up front",
        "trtflow/onnxmodel/proto.py",
        "            read_external(tensor, folder, read=False)\n",
        "            pass\n",
        ("tests/test_load.py::test_external_data_cut_short_is_refused_before_anything_is_written",),
    ),
    Mutant(
        "proto: a weight of no numpy type, still in external data, is decoded from the model alone",
        "trtflow/onnxmodel/proto.py",
        '        if dtype_name is None or sys.byteorder != "little":  # onnx\'s rules, given the bytes',
        "        if False:",
        (
            "tests/test_load.py::test_large_external_weights_are_summarized_and_written_one_at_a_time",
        ),
    ),
    Mutant(
        "emulate: an old model keeps declaring a weight the emulation no longer reads",
        "trtflow/precision/emulate.py",
        "if value.name not in declared or value.name not in read:",
        "if value.name not in declared:",
        (
            "tests/run_compare/test_emulation.py::test_large_weights_come_back_only_where_the_emulation_still_reads_them",
        ),
    ),
    Mutant(
        "summary: Constant nodes' bytes counted as weights",
        "trtflow/precision/ranges.py",
        'stored = len(raw) if raw is not None and source == "initializer" else 0',
        "stored = len(raw) if raw is not None else 0",
        ("tests/test_constant_ranges.py",),
    ),
    # issue 30: a cold run parses `run` without typer, and hashes tensors as it writes them
    Mutant(
        "run: typer parses every command line (~30 ms and ~2 MB of each cold run)",
        "trtflow/cli/__init__.py",
        "    if request is not None:\n",
        "    if False:\n",
        ("tests/test_light_imports.py::test_a_plain_run_is_parsed_without_typer",),
    ),
    Mutant(
        "display: a run's report to a pipe is laid out by rich (~20 ms, ~2 MB of each cold run)",
        "trtflow/display.py",
        "table = _plain_table(rows, width) if width is not None and rows else None",
        "table = None",
        ("tests/test_light_imports.py::test_a_plain_run_is_parsed_without_typer",),
    ),
    Mutant(
        "display: the report's seconds are aligned left when rich is not used",
        "trtflow/display.py",
        'f" {cell:>{size}} " if column == 2 else f" {cell:<{size}} "',
        'f" {cell:<{size}} "',
        ("tests/test_display.py",),
    ),
    Mutant(
        "display: an emoji code is written as is when rich is not used",
        "trtflow/display.py",
        "if _EMOJI_CODE.search(text) or not all(",
        "if not all(",
        ("tests/test_display.py",),
    ),
    Mutant(
        "run: `-j 0` is read without typer, as no parallelism at all",
        "trtflow/cli/run_command.py",
        "or int(given) < 1:",
        "or int(given) < 0:",
        ("tests/test_cli_fast_run.py",),
    ),
    Mutant(
        "run: a repeated --set keeps only the last one",
        "trtflow/cli/run_command.py",
        "            repeated[option].append(given)\n",
        "            repeated[option][:] = [given]\n",
        ("tests/test_cli_fast_run.py",),
    ),
    Mutant(
        "packs: a member's CRC leaves out its .npy header",
        "trtflow/tensors/packs.py",
        "info.CRC = zlib.crc32(data, zlib.crc32(header))",
        "info.CRC = zlib.crc32(data)",
        ("tests/run_compare/test_packs.py",),
    ),
    Mutant(
        "store: a digest hashed while written is taken though the file's size changed",
        "trtflow/executor/store.py",
        'if known is not None and os.stat(f"{work_dir}/{name}").st_size == known[1]:',
        "if known is not None:",
        ("tests/run_compare/test_packs.py",),
    ),
    Mutant(
        "run-runners: the results are read back to hash them",
        "trtflow/steps/run_runners.py",
        "        _hashed_while_written(ctx, results)\n",
        "",
        ("tests/run_compare/test_packs.py",),
    ),
    Mutant(
        "bisect-precision: an answer failing fresh samples is not searched again with them",
        "trtflow/sessions/precision/search.py",
        "            sets.append(fresh)\n",
        "            break\n",
        ("tests/quant/test_qdq_fresh_rounds.py",),
    ),
    Mutant(
        "cli: the fast exit skips the atexit functions user code registered",
        "trtflow/cli/__init__.py",
        "    atexit._run_exitfuncs()\n",
        "",
        ("tests/test_cli_exit.py",),
    ),
    Mutant(
        "cli: the fast exit does not wait for a thread Python would wait for",
        "trtflow/cli/__init__.py",
        "    if waited or not (code is None or isinstance(code, int)):",
        "    if not (code is None or isinstance(code, int)):",
        ("tests/test_cli_exit.py",),
    ),
    Mutant(
        "load: its data file's digest, taken while written, is not given to the store",
        "trtflow/steps/load.py",
        'return _save(model, model_path, facts["bytes"], ctx, apart), status, facts',
        'return _save(model, model_path, facts["bytes"], None, apart), status, facts',
        ("tests/test_load.py::test_the_store_reads_no_weight_file_load_or_taps_wrote",),
    ),
    Mutant(
        "taps: the copy of load's data file is given the digest of another file of load's entry",
        "trtflow/steps/surgeon_insert_tap.py",
        "            ctx.copied(*copied)\n",
        '            ctx.copied(copied[0].with_name("model.onnx"), copied[1])\n',
        ("tests/test_load.py::test_the_store_reads_no_weight_file_load_or_taps_wrote",),
    ),
    Mutant(
        "load: a feed refused before every body still opens the user's file",
        "trtflow/steps/load.py",
        "    if opening is None and not inlined and _fails_upstream_of_bodies(model, running):",
        "    if False:",
        ("tests/subgraphs/test_subgraphs.py",),
    ),
    Mutant(
        "load: a feed refused after a body is blamed on the feed",
        "trtflow/steps/load.py",
        '        if any(attribute.HasField("g") or attribute.graphs for attribute in node.attribute):',
        "        if False:",
        ("tests/subgraphs/test_subgraphs.py",),
    ),
    Mutant(
        "sha256 thread: a writer ahead of the hasher holds every chunk it gave",
        "trtflow/sha256_thread.py",
        "lambda: not self._pending or self._pending + length <= PENDING_BYTES",
        "lambda: True",
        ("tests/test_sha256_thread.py",),
    ),
    Mutant(
        "recipe source: a recipe dense with values of its own is blamed on aliases",
        "trtflow/schema/source.py",
        "if len(self.written) > MAX_VALUES",
        "if len(self.written) > 10 * MAX_VALUES",
        ("tests/test_validate_defects.py",),
    ),
    Mutant(
        "recipe source: a text past the pre-count size is composed without being counted first",
        "trtflow/schema/source.py",
        "        if len(text) > PRECOUNT_CHARS:\n            _count_values(text, file)\n",
        "",
        ("tests/test_validate_defects.py",),
    ),
    Mutant(
        "shape inference's weightless copy keeps every raw weight",
        "trtflow/onnxmodel/files.py",
        "        return declared > SMALL_INITIALIZER_BYTES\n",
        "        return False\n",
        (
            "tests/test_onnx_proto.py::test_the_weightless_copy_for_shape_inference_keeps_only_small_weights",
        ),
    ),
)


def _plant(tree: Path, mutant: Mutant) -> str | None:
    """Replace the mutant's text in its file; returns the original file text, None when stale."""
    path = tree / mutant.file
    text = path.read_text()
    if text.count(mutant.original) != 1:
        return None
    path.write_text(text.replace(mutant.original, mutant.planted))
    return text


def _tests_fail(tree: Path, tests: tuple[str, ...], timeout: float) -> bool:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        result = subprocess.run(
            command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return True  # a planted bug that hangs the tests is noticed
    return result.returncode != 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="run only mutants whose name contains this text")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per mutant's test run")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if args.k in m.name]
    ignored = shutil.ignore_patterns(".git", ".trtflow", "trtflow-out", "__pycache__", "*.egg-info")
    verdicts: dict[str, list[str]] = {"killed": [], "survived": [], "stale": []}
    with tempfile.TemporaryDirectory(prefix="trtflow-mutants-") as scratch:
        tree = Path(scratch) / "tree"
        shutil.copytree(REPO, tree, ignore=ignored)
        for mutant in chosen:
            started = time.monotonic()
            original = _plant(tree, mutant)
            if original is None:
                verdict = "stale"
            else:
                try:
                    verdict = (
                        "killed" if _tests_fail(tree, mutant.tests, args.timeout) else "survived"
                    )
                finally:
                    (tree / mutant.file).write_text(original)
            verdicts[verdict].append(mutant.name)
            print(f"{verdict:8} {time.monotonic() - started:6.1f} s  {mutant.name}", flush=True)
    print(", ".join(f"{len(names)} {verdict}" for verdict, names in verdicts.items()))
    return 0 if not verdicts["survived"] and not verdicts["stale"] else 1


if __name__ == "__main__":
    sys.exit(main())
