"""Fixtures for the graph tests: the real TensorRT engine graphs kept in pipelines/engine-graphs/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENGINE_GRAPHS = REPO / "pipelines" / "engine-graphs"
ENGINE_STEMS = ("resnet.onnx.engine", "resnet-qat.onnx.engine", "mobilenet.qat.onnx.engine")


class EngineFixture:
    def __init__(self, stem: str):
        self.stem = stem
        self.graph_path = ENGINE_GRAPHS / f"{stem}.graph.json"
        self.profile_path = ENGINE_GRAPHS / f"{stem}.profile.json"
        self.document = json.loads(self.graph_path.read_text())
        self.layers = self.document["Layers"]
        self.records = [r for r in json.loads(self.profile_path.read_text()) if "name" in r]


@pytest.fixture(params=ENGINE_STEMS)
def engine(request) -> EngineFixture:
    return EngineFixture(request.param)


@pytest.fixture
def resnet() -> EngineFixture:
    return EngineFixture("resnet.onnx.engine")


@pytest.fixture
def mobilenet() -> EngineFixture:
    return EngineFixture("mobilenet.qat.onnx.engine")
