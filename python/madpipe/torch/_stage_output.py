"""What a stage sends: one tensor, contiguous and not a view, in the dtype the next stage takes.

A layer may return a view or a non-contiguous tensor (``x.flatten(2).transpose(1, 2)``); within a
stage the next layer takes it as it is, but torch's point-to-point sends need contiguous memory
and its split backward detaches a stage's output in place, which a view refuses. A stage's output
is therefore made contiguous (a copy where it is not) and, when it is a view, a tensor of its own
over the same memory (no copy). ``profile`` measures each layer's output the same way, since any
layer may end a stage.
"""

import torch


def layer_output(value, layer_index, layer_name):
    """``value`` as a stage sends it; a TypeError naming the layer when it is not one tensor."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"layer {layer_index} ({layer_name}) returned a {type(value).__name__}: "
                        f"madpipe.torch needs every layer to take one tensor and return one")
    if not value.is_contiguous():
        return value.contiguous()
    if value._is_view():
        return torch.ops.aten._unsafe_view(value, value.shape)
    return value


class StageOutput(torch.nn.Module):
    """The last module of a stage: its output as ``layer_output`` makes it, checked against the
    floating-point dtype of the next stage's parameters (``expected_dtype``, None: unchecked)
    before it is sent, with the stage and the layer named."""

    def __init__(self, stage, layer_index, layer_name, expected_dtype=None):
        super().__init__()
        self.stage, self.layer_index, self.layer_name = stage, layer_index, layer_name
        self.expected_dtype = expected_dtype

    def forward(self, value):
        value = layer_output(value, self.layer_index, self.layer_name)
        if (self.expected_dtype is not None and value.is_floating_point()
                and value.dtype != self.expected_dtype):
            raise TypeError(f"stage {self.stage} ends with layer {self.layer_index} "
                            f"({self.layer_name}), which returns {value.dtype}, but stage "
                            f"{self.stage + 1} computes in {self.expected_dtype}: give the chain one "
                            f"dtype, or cast in layer {self.layer_index}")
        return value

    def extra_repr(self):
        return f"stage={self.stage}, layer={self.layer_index} ({self.layer_name})"
