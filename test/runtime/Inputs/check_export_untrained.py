"""Prints what test/runtime/export-untrained.onnxtxt checks in an exported model."""
import sys

import numpy as np
import onnx
from onnx import numpy_helper

model = onnx.load(sys.argv[1])
values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
print("initializers:", " ".join(sorted(values)))
print("b kept:", values["b"].tolist())
w0 = np.arange(1, 10, dtype=np.float32).reshape(3, 3) / 10
print("w trained:", "changed" if not np.allclose(values["w"], w0) else "unchanged")
onnx.checker.check_model(model)
print("checker ok")
