"""ampc.export: torch.onnx.export with the settings that keep training semantics.

What a default ``torch.onnx.export`` loses for training, and what this keeps:

* training mode: BatchNormalization keeps its batch statistics and updates its
  running statistics, Dropout stays a Dropout (the default exports eval mode);
* no constant folding and no initializer merging: every parameter stays one
  initializer under its own name (folding turns ``W.t()`` into a new tensor,
  breaks weight tying, and merging makes equal LayerNorm weights one tensor);
* the names of the parameters with ``requires_grad``, written into the model's
  ``metadata_props`` under ``ampc.trainable_parameters`` (comma-separated), so
  amp-opt trains exactly those and leaves buffers (masks, rotary or positional
  tables, BatchNorm statistics) and frozen parameters alone.

The export uses TorchScript's exporter (``dynamo=False``): PyTorch's dynamo
exporter writes BatchNormalization in inference mode even for a model in
training mode.
"""

import inspect
import warnings

TRAINABLE_KEY = "ampc.trainable_parameters"
# The newest default-domain opset amp-opt reads (include/ampc/ONNX/OpsetAdapter.h).
MAX_OPSET = 22


def trainable_parameters(model):
    """The names of the parameters torch trains: requires_grad, each tensor once
    (tied weights appear under their first name, as named_parameters gives them)."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def _input_names(model, args):
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:len(args)]
    if len(names) != len(args):
        names = ["input%d" % i for i in range(len(args))]
    return names


def export(model, args, path, input_names=None, output_names=("loss",), opset_version=None,
           dynamic_batch=False):
    """Exports ``model`` (a torch.nn.Module whose forward returns the loss, or the
    loss and other outputs) called on ``args`` to the ONNX file ``path``.

    input_names: the graph inputs' names (default: the forward's argument names,
    which become amp-run's --feed names and the keys of a --data .npz).
    output_names: the graph outputs' names; the first is the loss.
    opset_version: default the newest amp-opt reads (22).
    dynamic_batch: mark dimension 0 of every input dynamic (bind it with
    amp-opt --batch=N); by default the shapes of ``args`` are fixed.
    Returns the list of trained parameter names written into the model.
    """
    import onnx
    import onnx.numpy_helper
    import torch

    if not isinstance(args, tuple):
        args = (args,)
    input_names = list(input_names or _input_names(model, args))
    output_names = list(output_names)
    dynamic_axes = {name: {0: "batch"} for name in input_names} if dynamic_batch else None
    # Tracing runs forward in training mode, which moves BatchNorm's running
    # statistics: the model and the file keep the values from before.
    state = {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}
    was_training = model.training
    model.train()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, args, path, dynamo=False, export_params=True,
                              training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, keep_initializers_as_inputs=False,
                              opset_version=opset_version or MAX_OPSET,
                              input_names=input_names, output_names=output_names,
                              dynamic_axes=dynamic_axes)
    finally:
        model.train(was_training)
        with torch.no_grad():
            for key, value in model.state_dict(keep_vars=True).items():
                value.copy_(state[key])

    proto = onnx.load(path)
    initializers = {t.name for t in proto.graph.initializer}
    trained = trainable_parameters(model)
    missing = [name for name in trained if name not in initializers]
    # A parameter the loss does not use is left out of the graph by the exporter;
    # one that is used but renamed would silently not train.
    used = set()
    for node in proto.graph.node:
        used.update(node.input)
    renamed = [name for name in missing if name in used]
    if renamed:
        raise RuntimeError("ampc.export: parameters %s were renamed by the exporter" % renamed)
    listed = [name for name in trained if name in initializers]
    for tensor in proto.graph.initializer:
        if tensor.name in state:
            value = state[tensor.name].cpu().numpy()
            tensor.CopyFrom(onnx.numpy_helper.from_array(value, tensor.name))
    for prop in list(proto.metadata_props):
        if prop.key == TRAINABLE_KEY:
            proto.metadata_props.remove(prop)
    entry = proto.metadata_props.add()
    entry.key = TRAINABLE_KEY
    entry.value = ",".join(listed)
    onnx.save(proto, path)
    return listed
