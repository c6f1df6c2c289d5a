"""The text of a `model.py` with a ViT as `transformers` defines it, for the tests and the bench.

Random weights from a seeded config (no download). ``make()`` is the model users bring (SDPA attention),
``eager()`` the same weights with matmul-softmax-matmul attention.
"""

from __future__ import annotations

TEMPLATE = """
import torch
import transformers as T


class Encoder(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixels):
        return self.model(pixel_values=pixels).last_hidden_state


def vit(attention):
    torch.manual_seed(0)
    config = T.ViTConfig(hidden_size={hidden}, num_attention_heads={heads}, num_hidden_layers={layers},
                         intermediate_size={intermediate}, image_size={image}, patch_size=16, attn_implementation=attention)
    return Encoder(T.ViTModel(config, add_pooling_layer=False).eval()), (torch.randn(1, 3, {image}, {image}),)


def make():
    return vit("sdpa")


def eager():
    return vit("eager")
"""


def vit_source(hidden: int, heads: int, layers: int, image: int) -> str:
    """The model file of a ViT ``hidden`` wide with ``heads`` heads and ``layers`` layers, on ``image``² pixels in 16² patches."""
    return TEMPLATE.format(hidden=hidden, heads=heads, layers=layers, intermediate=4 * hidden, image=image)
