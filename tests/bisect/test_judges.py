"""One Judge protocol for every check block: `check.judge(setting)` gives verdicts, refusals and
evidence in the same shape, whichever kind of check the recipe wrote (no caller asks which)."""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

from trtflow.tensors.comparison import Tolerances
from trtflow.tensors.judges import Candidate, CommandCheck, JudgeSetting
from trtflow.tensors.task_metrics import MetricCheck

REFERENCE = [{"y": np.array([[0.1, 0.9], [0.8, 0.2]], np.float32)}]
DRIFTED = [{"y": np.array([[0.2, 0.7], [0.9, 0.1]], np.float32)}]  # same argmax, off by 0.1-0.2
FLIPPED = [{"y": np.array([[0.9, 0.1], [0.8, 0.2]], np.float32)}]  # row 0 picks another class


def identity_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"], name="id")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
    )
    return helper.make_model(graph)


def candidate(outputs) -> Candidate:
    return Candidate([{"x": REFERENCE[0]["y"]}], REFERENCE, iter(outputs), identity_model)


def test_every_check_block_judges_through_the_same_protocol(tmp_path):
    notices: list[str] = []
    setting = JudgeSetting(["y"], tmp_path, "check", notices.append)
    script = tmp_path / "argmax.py"
    script.write_text(
        "import glob, os, sys, numpy as np\n"
        "ref = np.load(glob.glob(os.environ['TRTFLOW_REFERENCE_RESULTS'] + '/*.npz')[0])['y']\n"
        "got = np.load(glob.glob(os.environ['TRTFLOW_CANDIDATE_RESULTS'] + '/*.npz')[0])['y']\n"
        "sys.exit(0 if (ref.argmax(-1) == got.argmax(-1)).all() else 1)\n"
    )
    judges = {
        "tolerances": Tolerances(atol=0.05, rtol=0.05).judge(setting),
        "metric": MetricCheck(metric="top1_agreement", min=1.0).judge(setting),
        "command": CommandCheck(command=[sys.executable, "argmax.py"]).judge(setting),
    }
    drifted = {kind: judge.verdict(candidate(DRIFTED)).passed for kind, judge in judges.items()}
    flipped = {kind: judge.verdict(candidate(FLIPPED)).passed for kind, judge in judges.items()}
    assert drifted == {"tolerances": False, "metric": True, "command": True}
    assert flipped == {"tolerances": False, "metric": False, "command": False}
    assert all(judge.refusal(candidate(REFERENCE)) is None for judge in judges.values())
    assert notices == [
        "check.command reads argmax.py, which check.files does not list: editing it will not re-run this step"
    ]

    failed = {kind: judge.verdict(candidate(FLIPPED)).metrics for kind, judge in judges.items()}
    assert judges["tolerances"].evidence(failed["tolerances"]).startswith("y max abs error 0.8")
    assert judges["metric"].evidence(failed["metric"]).startswith("top1_agreement 0.5")
    assert judges["command"].evidence(failed["command"]) == ""


def test_a_judge_refuses_a_check_nothing_can_pass(tmp_path):
    setting = JudgeSetting(["y"], tmp_path)
    impossible = MetricCheck(metric="cosine", min=1.5)
    broken = CommandCheck(command=[sys.executable, "-c", "import sys; sys.exit(3)"])
    assert "fails even for the FP32 outputs" in impossible.judge(setting).refusal(
        candidate(REFERENCE)
    )
    assert "exited with code 3" in broken.judge(setting).refusal(candidate(REFERENCE))
