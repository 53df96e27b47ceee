"""Per-layer profiles are written as `trtexec --exportProfile` writes them, so every reader reads ours."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtflow.trt.profiler import LayerTimes, write_profile

TRTEXEC_PROFILE = (
    Path(__file__).parent / "fixtures" / "resnet.onnx.engine.profile.json"
)  # from TREX, real trtexec output


def test_statistics_follow_trtexec():
    times = LayerTimes()
    for run in ([1.0, 4.0], [3.0, 4.0], [2.0, 10.0]):  # three inferences of two layers
        times.start_inference()
        times.report("conv", run[0])
        times.report("relu", run[1])
    count, conv, relu = times.records()
    assert count == {"count": 3}
    assert conv == {
        "name": "conv",
        "timeMs": 6.0,
        "averageMs": 2.0,
        "medianMs": 2.0,
        "percentage": pytest.approx(25.0),
    }
    assert (
        relu["medianMs"] == 4.0
        and relu["averageMs"] == 6.0
        and relu["percentage"] == pytest.approx(75.0)
    )


def test_layout_matches_a_real_trtexec_profile_and_the_graph_reader_reads_it(tmp_path):
    from trtflow.graph.timing import read_profile

    real = json.loads(TRTEXEC_PROFILE.read_text())
    times = LayerTimes()
    times.start_inference()
    times.report("Conv_0 + Relu_1", 0.25)
    path = tmp_path / "profile.json"
    write_profile(times, path)
    ours = json.loads(path.read_text())
    assert list(ours[0]) == list(real[0]) == ["count"]
    assert list(ours[1]) == list(
        real[1]
    )  # name, timeMs, averageMs, medianMs, percentage — same keys, same order
    assert [(t.name, t.ms) for t in read_profile(path)] == [("Conv_0 + Relu_1", 0.25)]


def test_profiler_subclasses_tensorrts_base(trt):
    from trtflow.trt.profiler import make_profiler

    times = LayerTimes()
    profiler = make_profiler(trt.module, times)
    assert isinstance(profiler, trt.module.IProfiler)
    profiler.report_layer_time("layer", 0.5)
    assert times.times == {"layer": [0.5]}
