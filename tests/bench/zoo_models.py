"""The `transformers` zoo as small models: which architectures there are, a small config of each, and
the inputs its ``forward`` needs, written as a model file ``tracelink profile model.py:make`` takes.

Nothing here is a list per model: every size-like field of a config (and of its sub-configs) is shrunk
by its name, and the inputs come from the forward's signature, the model's ``main_input_name`` and the
config. An input layout that a model does not accept eagerly is replaced by the next candidate, so what
reaches ``torch.export`` is a model that runs.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# The model classes the sweep builds, in order of preference: the first mapping naming an architecture gives its class.
MAPPINGS = (
    "MODEL_MAPPING_NAMES",
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
)
# Models that take text and images together (CLIP-style): they get both modalities.
BOTH_MODALITIES = "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES"

LAYERS = 2
WIDTH = 128  # the main width a config is scaled down to (a power of two divides it)
IMAGE_SIZE = 64
SEQUENCE = 16
WAVEFORM = 4000  # samples: a quarter second at 16 kHz
# Size-like fields by name: layer counts are capped, widths divided by one factor per config (so that
# their ratios, and the head counts dividing them, still hold), image sizes set.
LAYER_FIELD = re.compile(r"^(num_(hidden_)?layers|n_layers?|num_(encoder|decoder|text|vision|audio)_layers|(encoder|decoder|text|vision|audio)_layers|depth|num_blocks)$")
WIDTH_FIELD = re.compile(r"^(hidden_size|d_model|n_embd|dim|embed_dim|hidden_dim|embedding_size|embedding_dim|d_embed|"
                         r"projection_dim|intermediate_size|ffn_dim|d_ff|n_inner|head_dim|d_kv|rotary_dim|"
                         r"qk_rope_head_dim|qk_nope_head_dim|qk_head_dim|v_head_dim|kv_lora_rank|q_lora_rank|"
                         r"(encoder|decoder|text|vision|audio)_(ffn_dim|hidden_size|embed_dim|intermediate_size)|"
                         r"hidden_sizes|embed_dims|conv_dim|neck_hidden_sizes|moe_intermediate_size|shared_expert_intermediate_size)$")
MAIN_WIDTH = ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "hidden_dim", "embedding_size")
LIST_DEPTHS = re.compile(r"^(depths|num_layers_per_stage|encoder_layers_per_stage|layers_per_stage)$")
EXPERTS = re.compile(r"^(num_experts|num_local_experts|n_routed_experts|moe_num_experts)$")
IMAGE_FIELD = "image_size"
# Fields holding layer indices (a VLM's vision_feature_layer), which must stay within the fewer layers.
LAYER_INDEX = re.compile(r"(_layer|_layers|_layer_ids|_layer_indices|_layer_idx)$")
COUNT = re.compile(r"^(num|n)_")  # a count of layers, not an index (wav2vec2's num_feat_extract_layers)
TOKEN_ID = re.compile(r"_token_id$|_token_index$|^(pad|bos|eos)_token_id$")


def architectures() -> dict[str, str]:
    """Every architecture (``model_type``) with a base model, a causal LM, an image or an audio class → that class's name."""
    from transformers.models.auto import modeling_auto

    chosen: dict[str, str] = {}
    for mapping in MAPPINGS:
        for model_type, names in getattr(modeling_auto, mapping).items():
            chosen.setdefault(model_type, names[0] if isinstance(names, (tuple, list)) else names)
    return chosen


def sweep_order(names: list[str]) -> list[str]:
    """A fixed order spread over the alphabet (by a hash of the name), so that a ``--limit`` takes a sample of the zoo, not its first letters."""
    return sorted(names, key=lambda name: hashlib.sha1(name.encode()).hexdigest())


def small_config(model_type: str) -> Any:
    """The default config of ``model_type`` with its sizes shrunk (sub-configs too)."""
    from transformers import CONFIG_MAPPING

    config_class = CONFIG_MAPPING[model_type]
    shrunk = shrink(config_class().to_dict())
    return config_class.from_dict(shrunk)


def shrink(fields: dict) -> dict:
    """``fields`` (a config's dict) with fewer layers, narrower widths, smaller images and vocabulary; nested configs too."""
    fields = dict(fields)
    # with a list of stage depths, a layer count is the number of stages (Swin's num_layers): the depths shrink instead
    staged = any(LIST_DEPTHS.match(key) and isinstance(value, list) for key, value in fields.items())
    layers_before = {} if staged else {key: value for key, value in fields.items() if LAYER_FIELD.match(key) and isinstance(value, int)}
    factor = width_factor(fields)
    for key, value in list(fields.items()):
        if isinstance(value, dict) and "model_type" in value:
            fields[key] = shrink(value)
        elif LAYER_FIELD.match(key) and isinstance(value, int) and not isinstance(value, bool) and not staged:
            fields[key] = min(value, LAYERS)
        elif WIDTH_FIELD.match(key):
            fields[key] = divided(value, factor)
        elif LIST_DEPTHS.match(key) and isinstance(value, list):
            fields[key] = [min(depth, 1) if isinstance(depth, int) else depth for depth in value]
        elif EXPERTS.match(key) and isinstance(value, int) and value > 4:
            fields[key] = 4
        elif key == IMAGE_FIELD and "window_size" in fields:
            pass  # windows of patches fix the image's size (Swin's)
        elif key == IMAGE_FIELD and isinstance(value, int) and value > IMAGE_SIZE:
            fields[key] = IMAGE_SIZE
        elif key == IMAGE_FIELD and isinstance(value, list) and value and all(isinstance(side, int) and side > IMAGE_SIZE for side in value):
            fields[key] = [IMAGE_SIZE] * len(value)
    fields = per_layer_lists_cut(fields, layers_before)
    for key, value in list(fields.items()):
        if LAYER_INDEX.search(key) and not LAYER_FIELD.match(key) and not COUNT.match(key):
            fields[key] = layer_index(value)
    if "num_experts_per_tok" in fields and isinstance(fields["num_experts_per_tok"], int):
        fields["num_experts_per_tok"] = min(fields["num_experts_per_tok"], 2)
    if isinstance(fields.get("vocab_size"), int):
        fields["vocab_size"] = min(fields["vocab_size"], max(1024, largest_token_id(fields) + 1))
    return fields


def layer_index(value: Any) -> Any:
    """A layer index (or a list of them) brought within :data:`LAYERS` layers: -9 → -2, 11 → 1."""
    if isinstance(value, int) and not isinstance(value, bool):
        return max(value, -LAYERS) if value < 0 else min(value, LAYERS - 1)
    if isinstance(value, list) and value and all(isinstance(item, int) and not isinstance(item, bool) for item in value):
        return list(dict.fromkeys(layer_index(item) for item in value))
    return value


def width_factor(fields: dict) -> int:
    """The power of two that brings the config's main width to :data:`WIDTH` or below (1 when it is already)."""
    width = next((fields[key] for key in MAIN_WIDTH if isinstance(fields.get(key), int) and fields[key] > 0), 0)
    if not width:  # a convolutional config: its widest stage
        widths = [value for key in ("hidden_sizes", "embed_dims") for value in fields.get(key) or [] if isinstance(value, int)]
        width = max(widths, default=0) // 2
    return 2 ** max(0, math.ceil(math.log2(width / WIDTH))) if width > WIDTH else 1


def divided(value: Any, factor: int) -> Any:
    """A width (or a list of them) divided by ``factor``, no narrower than 8."""
    if isinstance(value, bool) or factor == 1:
        return value
    if isinstance(value, int):
        return max(8, value // factor) if value >= 8 else value
    if isinstance(value, list):
        return [divided(item, factor) for item in value]
    return value


def per_layer_lists_cut(fields: dict, layers_before: dict[str, int]) -> dict:
    """Lists with one entry per layer (``layer_types``, a width per layer, ...) cut to the new number of layers."""
    counts = {before for before in layers_before.values() if before > LAYERS}
    for key, value in list(fields.items()):
        if isinstance(value, list) and len(value) in counts and not LIST_DEPTHS.match(key):
            fields[key] = value[:LAYERS]
    return fields


def largest_token_id(fields: dict) -> int:
    """The largest special token id of a config (a vocabulary must hold it)."""
    ids = [value for key, value in fields.items() if TOKEN_ID.search(key) and isinstance(value, int)]
    ids += [item for key, value in fields.items() if TOKEN_ID.search(key) and isinstance(value, list) for item in value if isinstance(item, int)]
    return max(ids, default=0)


def model_class(name: str) -> type:
    import transformers

    return getattr(transformers, name)


def candidate_inputs(model: Any, config: Any, model_type: str) -> Iterator[dict[str, Any]]:
    """Input sets for ``model``'s forward, most likely first: each is name → tensor, for every input it needs."""
    from transformers.models.auto import modeling_auto

    parameters = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    names = [main]
    if main == "input_ids" and model_type in getattr(modeling_auto, BOTH_MODALITIES) and "pixel_values" in parameters:
        names.append("pixel_values")
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in parameters:
        names.append("decoder_input_ids")
    names += [name for name, parameter in parameters.items() if parameter.default is inspect.Parameter.empty
              and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) and name not in names]
    for layouts in layout_choices(names, config):
        yield layouts


def layout_choices(names: list[str], config: Any) -> Iterator[dict[str, Any]]:
    """Every combination of each input's candidate tensors (most inputs have one)."""
    import itertools

    options = [[(name, tensor) for tensor in tensors_for(name, config)] for name in names]
    missing = [name for name, choices in zip(names, options) if not choices]
    if missing:
        raise ValueError(f"no example input is made for the forward's {', '.join(missing)}")
    for combination in itertools.product(*options):
        yield dict(combination)


def tensors_for(name: str, config: Any) -> list[Any]:
    """Candidate example tensors for an input called ``name`` (an unknown name has none)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    if name in ("input_ids", "decoder_input_ids"):
        vocab = config_value(config, "vocab_size", "decoder_vocab_size") or 1000
        return [torch.randint(3, min(vocab, 1000), (1, SEQUENCE), generator=generator)]
    if name in ("attention_mask", "decoder_attention_mask", "token_type_ids"):
        value = 1 if "mask" in name else 0
        return [torch.full((1, SEQUENCE), value, dtype=torch.long)]
    if name == "pixel_values":
        channels = config_value(config, "num_channels", "in_channels", "in_chans") or 3
        side = config_value(config, IMAGE_FIELD)
        side = side[0] if isinstance(side, (list, tuple)) else side or IMAGE_SIZE
        frames = config_value(config, "num_frames")
        video = [torch.randn(1, frames, channels, side, side, generator=generator)] if isinstance(frames, int) else []
        return [torch.randn(1, channels, side, side, generator=generator), *video]
    if name == "input_values":
        bins = config_value(config, "num_mel_bins")
        frames = config_value(config, "max_length")
        spectrogram = [torch.randn(1, frames, bins, generator=generator)] if bins and frames else []
        return [torch.randn(1, WAVEFORM, generator=generator), torch.randn(1, 1, WAVEFORM, generator=generator), *spectrogram]
    if name == "input_features":
        channels = config_value(config, "input_channels") or 1
        positions = config_value(config, "max_source_positions")
        # a short clip first; some encoders take exactly their full window (two frames per position)
        lengths = [64, *([2 * positions] if isinstance(positions, int) and positions > 32 else [])]
        return [tensor for frames in lengths for bins in feature_sizes(config) for tensor in
                (torch.randn(1, bins, frames, generator=generator), torch.randn(1, frames, bins * channels, generator=generator))]
    if name == "bbox":
        return [torch.zeros(1, SEQUENCE, 4, dtype=torch.long)]
    return []


def feature_sizes(config: Any) -> list[int]:
    """The sizes an audio model's feature vectors may have, by the config's names for them (80 when it has none)."""
    keys = ("num_mel_bins", "input_feat_per_channel", "feature_size", "n_mels", "feature_projection_input_dim", "input_dim")
    sizes = [config_value(config, key) for key in keys]
    return list(dict.fromkeys(size for size in sizes if isinstance(size, int) and size > 0)) or [80]


def config_value(config: Any, *keys: str) -> Any:
    """The first of ``keys`` set on the config or on one of its sub-configs."""
    for key in keys:
        value = getattr(config, key, None)
        if value is not None:
            return value
    for sub in vars(config).values():
        if hasattr(sub, "to_dict") and hasattr(sub, "model_type"):
            value = config_value(sub, *keys)
            if value is not None:
                return value
    return None


MODEL_FILE = '''"""{model_type}: transformers.{class_name} built from a small config (config.json beside this file),
called with the example inputs in inputs.pt; written by tracelink's zoo sweep (tests/bench/zoo.py)."""

from pathlib import Path

import torch
import transformers

HERE = Path(__file__).resolve().parent


class Tensors(torch.nn.Module):
    """The model called with its inputs by name, returning the tensors of its output."""

    def __init__(self, model, names):
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *inputs):
        output = self.model(**dict(zip(self.names, inputs)))
        return tuple(leaf for leaf in torch.utils._pytree.tree_leaves(output) if isinstance(leaf, torch.Tensor))


def make():
    torch.manual_seed(0)
    config = transformers.AutoConfig.from_pretrained(HERE)
    model = transformers.{class_name}(config).eval()
    inputs = torch.load(HERE / "inputs.pt")
    return Tensors(model, list(inputs)), tuple(inputs.values())
'''


def write_model_file(model_type: str, class_name: str, directory: Path, first_working: Callable[[Any, Any], dict | None]) -> Path:
    """Build ``model_type`` small, pick inputs it runs on (``first_working(model, candidates)``), and write
    ``model.py``, ``config.json`` and ``inputs.pt`` into ``directory``; return the model file."""
    import torch

    config = small_config(model_type)
    config.use_cache = False  # a returned key/value cache is no tensor; profiling it is another question
    torch.manual_seed(0)
    model = model_class(class_name)(config).eval()
    inputs = first_working(model, candidate_inputs(model, config, model_type))
    directory.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(directory)
    torch.save(inputs, directory / "inputs.pt")
    path = directory / "model.py"
    path.write_text(MODEL_FILE.format(model_type=model_type, class_name=class_name))
    (directory / "build.json").write_text(json.dumps({"class": class_name, "inputs": {name: list(tensor.shape) for name, tensor in inputs.items()},
                                                      "parameters": sum(p.numel() for p in model.parameters())}))
    return path
