"""Writing a model whose graph alone was edited (taps), without reading its weights in.

`surgeon-insert-tap` adds graph outputs and changes no weight. Read with its weights and saved, a
model with external data (69 MB MiniLM) had every weight read, held, written out and hashed again,
the step's largest costs. Read without them (`load_model(load_weights=False)`), the model is its
graph; when the data file beside it is the one `save_model` writes for it (`load` wrote it:
`proto.written_data_file`), a copy of that file is what saving it with external data writes, byte
for byte. Any other model gets its weights read and goes through `save_model`.

The data file is copied, not hard-linked: onnx refuses external data with more than one link.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx


def save_edited(model: onnx.ModelProto, source: Path, target: Path) -> tuple[Path, Path] | None:
    """Write `model`, read from `source` without its weights and its graph edited since, to `target`:
    with a copy of its data file where that is the one `save_model(external_data=True)` would write
    (so the weights stay apart whatever their size: `load` puts them apart from 16 MB, `save_model`
    from 64 MB), else as `save_model` writes it with its weights. Returns the data file and its
    copy, when copied (`StepContext.copied`)."""
    from trtflow.onnxmodel import proto
    from trtflow.onnxmodel.files import EXTERNAL_DATA, save_model

    data = proto.written_data_file(model, source, EXTERNAL_DATA.format(file=source.name))
    if data is None:
        proto.read_weights(model, source)
        save_model(model, target)
        return None
    location = EXTERNAL_DATA.format(file=target.name)
    for tensor in proto.initializers(model.graph):
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(data, target.parent / location)
    proto.save(model, target)
    return data, target.parent / location
