"""ampc for PyTorch users: export a model and its loss so that ampc trains what torch trains.

    import ampc
    ampc.export(model_with_loss, (x, target), "model.onnx")

then ``amp-opt model.onnx --train --precision=bf16 --optimizer=adamw -o model.plan``.
Pure Python; needs only torch and onnx.
"""

from .export import TRAINABLE_KEY, export, trainable_parameters

__all__ = ["export", "trainable_parameters", "TRAINABLE_KEY"]
__version__ = "0.1.0"
