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
# waveform samples: a quarter second at 16 kHz, then a length the usual hops divide (320, 512, 640, 960, 1920 samples)
WAVEFORMS = (4000, 7680)
# Inputs that are frames of audio features.
FEATURE_INPUTS = ("input_features", "audio_mel")
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
EXPERTS_PER_TOKEN = re.compile(r"^num_experts_per_tok$")
HEAD_SIZE = re.compile(r"^(head_dim|d_kv|rotary_dim|qk_rope_head_dim|qk_nope_head_dim|qk_head_dim|v_head_dim)$")
HEADS = re.compile(r"^(num_attention_heads|num_key_value_heads|n_head|num_heads|(encoder|decoder)_attention_heads|mamba_n_heads|n_mamba_heads)$")
# Parts of a width in a group of fields (rotary sections summing to half a head): divided with the widths.
PART_FIELD = re.compile(r"^mrope_section$")
MOST_LAYERS = 4  # layers kept at most, where one of each kind of layer takes more than LAYERS
# A backbone's chosen stages, which must be among its (fewer) layers.
STAGE_CHOICE = ("out_features", "out_indices")
IMAGE_FIELD = "image_size"
MOST_WIDTH = 1024  # the widest main width a less shrunk config may have
# Inputs of another modality a forward may take beside the ones it needs (see candidate_inputs).
OTHER_MODALITIES = ("input_ids", "pixel_values", "bbox")
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


def config_class(model_type: str, model: type) -> type:
    """The config class ``model`` takes: ``model_type``'s, unless the model takes one of its sub-configs (Musicgen's
    decoder takes the decoder's config, not the whole model's)."""
    from transformers import CONFIG_MAPPING

    mapped, own = CONFIG_MAPPING[model_type], getattr(model, "config_class", None)
    subs = [getattr(spec, "config_class", spec) for spec in (getattr(mapped, "sub_configs", None) or {}).values()]
    return own if own is not mapped and own in subs else mapped


def shrunk_fields(config_class: type) -> Iterator[dict]:
    """The default config of ``config_class`` (its dict) with its sizes shrunk (sub-configs too), less and less: first
    each config's widths divided by its own divisor; then every config's by one divisor that fits them all (widths that
    must agree across configs, SAM's vision output and mask decoder's width, still do), halved again and again to 1."""
    fields = transformers_backbone(config_class().to_dict())
    yield shrink(fields)
    yield shrink(fields, by_heads=True)
    factor = common_factor(fields)
    while True:
        yield shrink(fields, factor=factor)
        if factor == 1:
            return
        factor //= 2


def shrink(fields: dict, token_floor: int = 0, factor: int | None = None, by_heads: bool = False) -> dict:
    """``fields`` (a config's dict) with fewer layers, narrower widths (divided by ``factor``, else by the config's own
    :func:`target_factor` as far as it :func:`fitting`; ``by_heads``: fewer heads of the same size, for a model that
    assumes its head size, as Qwen2-VL's default rotary sections do), smaller images and vocabulary; nested configs
    too (their vocabulary holds ``token_floor``, the largest token id of the configs around them)."""
    fields = transformers_backbone(dict(fields))
    named = roles(fields)
    # with a list of stage depths, a layer count is the number of stages (Swin's num_layers): the depths shrink instead
    staged = any(LIST_DEPTHS.match(key) and isinstance(value, list) for key, value in fields.items())
    counts = set() if staged else {value for key, value in fields.items() if named(LAYER_FIELD, key) and is_int(value) and value > LAYERS}
    plan = {count: kept_layers(fields, count) for count in counts}
    own_factor = factor or fitting(fields, named, target_factor(fields), by_heads)
    floor = max(token_floor, largest_token_id(fields))
    for key, value in list(fields.items()):
        if isinstance(value, dict) and "model_type" in value:
            fields[key] = shrink(value, floor, factor, by_heads)
        elif isinstance(value, dict):  # a group of fields (rope_parameters' mrope_section): the config's widths
            fields[key] = {name: divided(item, own_factor, 1) if PART_FIELD.match(str(name)) else item for name, item in value.items()}
        elif named(LAYER_FIELD, key) and is_int(value) and value in plan:
            fields[key] = len(plan[value])
        elif by_heads and named(HEAD_SIZE, key):
            pass
        elif by_heads and named(HEADS, key) and is_int(value):
            fields[key] = max(1, value // own_factor)
        elif named(WIDTH_FIELD, key):
            fields[key] = divided(value, own_factor)
        elif LIST_DEPTHS.match(key) and isinstance(value, list):
            fields[key] = [min(depth, 1) if isinstance(depth, int) else depth for depth in value]
        elif named(EXPERTS, key) and is_int(value) and value > 4:
            fields[key] = 4
        elif named(EXPERTS_PER_TOKEN, key) and is_int(value):
            fields[key] = min(value, 2)
        elif key == IMAGE_FIELD and "window_size" in fields:
            pass  # windows of patches fix the image's size (Swin's)
        elif key == IMAGE_FIELD and isinstance(value, int) and value > IMAGE_SIZE:
            fields[key] = IMAGE_SIZE
        elif key == IMAGE_FIELD and isinstance(value, list) and value and all(isinstance(side, int) and side > IMAGE_SIZE for side in value):
            fields[key] = [IMAGE_SIZE] * len(value)
    fields = per_layer_cut(fields, plan)
    kept = next(iter(plan.values())) if len(plan) == 1 else list(range(LAYERS))
    for key, value in list(fields.items()):
        if LAYER_INDEX.search(key) and not named(LAYER_FIELD, key) and not COUNT.match(key) and not staged:
            fields[key] = layer_index(value, kept)
        elif key in STAGE_CHOICE and counts:  # a backbone's stages are its layers here (ViT's): they are fewer
            fields[key] = stages_within(value, len(kept))
    if isinstance(fields.get("vocab_size"), int):
        fields["vocab_size"] = min(fields["vocab_size"], max(1024, floor + 1))
    return fields


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def roles(fields: dict) -> Callable[[re.Pattern[str], str], bool]:
    """Whether a field answers a pattern by its name or by an alias its config class maps to it
    (``attribute_map``: Ernie's ``moe_k`` is ``num_experts_per_tok``)."""
    from transformers import CONFIG_MAPPING

    model_type = fields.get("model_type", "")
    config_class = CONFIG_MAPPING[model_type] if model_type in CONFIG_MAPPING else None  # a lazy mapping: its get() finds nothing
    aliases: dict[str, list[str]] = {}
    for alias, real in (getattr(config_class, "attribute_map", None) or {}).items():
        aliases.setdefault(real, []).append(alias)
    return lambda pattern, key: any(pattern.match(name) for name in (key, *aliases.get(key, ())))


def transformers_backbone(fields: dict) -> dict:
    """A timm backbone (DETR's default) replaced by transformers' ResNet with the same stages: timm is not installed
    beside the CPU torch (its torchvision is built for CUDA), and the configs take either."""
    from transformers import ResNetConfig

    for key, value in list(fields.items()):
        if isinstance(value, dict) and value.get("model_type") == "timm_backbone":
            fields[key] = ResNetConfig(num_channels=value.get("num_channels", 3), out_indices=value.get("out_indices")).to_dict()
    return fields


def kept_layers(fields: dict, count: int) -> list[int]:
    """Which of ``count`` layers to keep: at least :data:`LAYERS`, and one of each kind the lists with one entry per
    layer name (``layer_types``' linear and full attention, dense and sparse MLPs), as few as cover them all."""
    kinds = [value for value in fields.values() if isinstance(value, list) and len(value) == count and all(isinstance(item, str) for item in value)]
    uncovered = {(number, kind) for number, values in enumerate(kinds) for kind in values}
    kept: list[int] = []
    while uncovered and len(kept) < MOST_LAYERS:
        best = max(range(count), key=lambda index: (sum((number, values[index]) in uncovered for number, values in enumerate(kinds)), -index))
        kept.append(best)
        uncovered -= {(number, values[best]) for number, values in enumerate(kinds)}
    kept += [index for index in range(count) if index not in kept][:max(0, LAYERS - len(kept))]
    return sorted(kept)


def per_layer_cut(fields: dict, plan: dict[int, list[int]]) -> dict:
    """Lists with one entry per layer (``layer_types``, a width per layer, ...) and dicts keyed by layer (Gemma 4's
    ``per_layer_config``) cut to the layers kept, renumbered."""
    for key, value in list(fields.items()):
        if isinstance(value, list) and len(value) in plan and not LIST_DEPTHS.match(key):
            fields[key] = [value[index] for index in plan[len(value)]]
        elif isinstance(value, dict) and "layer" in key and len(plan) == 1 and value and all(str(name).isdigit() for name in value):
            kept = next(iter(plan.values()))
            fields[key] = {type(name)(kept.index(int(name))): item for name, item in value.items() if int(name) in kept}
    return fields


def layer_index(value: Any, kept: list[int]) -> Any:
    """A layer index (or a list of them) brought within the layers kept: a kept layer's index is its new one, others
    the nearest that exists (-9 → -2, 11 → 1 of 2)."""
    if is_int(value):
        if value in kept:
            return kept.index(value)
        return max(value, -len(kept)) if value < 0 else min(value, len(kept) - 1)
    if isinstance(value, list) and value and all(is_int(item) for item in value):
        return list(dict.fromkeys(layer_index(item, kept) for item in value))
    return value


def stages_within(value: Any, layers: int) -> Any:
    """A backbone's chosen stages (``out_features`` names, ``out_indices`` numbers; 0 is the stem) within ``layers``."""
    if not isinstance(value, list):
        return value
    chosen = [f"stage{min(int(item[5:]), layers)}" if isinstance(item, str) and item[5:].isdigit() and item.startswith("stage")
              else min(item, layers) if is_int(item) and item > 0 else item for item in value]
    return list(dict.fromkeys(chosen))


def own_width(fields: dict) -> int:
    """A config's main width (a convolutional config's: half its widest stage)."""
    width = next((fields[key] for key in MAIN_WIDTH if is_int(fields.get(key)) and fields[key] > 0), 0)
    if not width:
        widths = [value for key in ("hidden_sizes", "embed_dims") for value in fields.get(key) or [] if isinstance(value, int)]
        width = max(widths, default=0) // 2
    return width


def target_factor(fields: dict) -> int:
    """The power of two that brings the config's main width to :data:`WIDTH` or below (1 when it is already)."""
    width = own_width(fields)
    return 2 ** max(0, math.ceil(math.log2(width / WIDTH))) if width > WIDTH else 1


def common_factor(fields: dict) -> int:
    """One divisor for a config and all its sub-configs: the largest of their targets, halved until it fits each."""
    configs = list(nested_configs(fields))
    factor = max(target_factor(config) for config in configs)
    for config in configs:
        factor = fitting(config, roles(config), factor)
    return factor


def nested_configs(fields: dict) -> Iterator[dict]:
    yield fields
    for value in fields.values():
        if isinstance(value, dict) and "model_type" in value:
            yield from nested_configs(value)


def fitting(fields: dict, named: Callable[[re.Pattern[str], str], bool], factor: int, by_heads: bool = False) -> int:
    """``factor`` halved until it divides every width of the config exactly and leaves none of its width fields under
    8: every sum and product of widths (heads × head size, the rotary sections' sum) still holds. ``by_heads``: the
    head counts are divided instead of the head sizes, which stay, so it must divide the head counts."""
    width = own_width(fields)
    heads = [value for key, value in fields.items() if named(HEADS, key) and is_int(value) and value > 0]
    widths = [item for key, value in fields.items() if named(WIDTH_FIELD, key) and not (by_heads and named(HEAD_SIZE, key))
              for item in integers(value) if item >= 8]
    if by_heads:
        exact = heads
    else:  # the rotary sections, and a head's size where the config derives it
        exact = [item for value in fields.values() if isinstance(value, dict) and "model_type" not in value
                 for name, part in value.items() if PART_FIELD.match(str(name)) for item in integers(part) if item > 0]
        exact += [width // count for count in heads if width % count == 0]
    while factor > 1 and (any(item % factor or item // factor < 8 for item in widths) or any(item % factor for item in exact)):
        factor //= 2
    return factor


def integers(value: Any) -> list[int]:
    """The integers of a field that is one or a list of them."""
    return [value] if is_int(value) else [item for item in value if is_int(item)] if isinstance(value, list) else []


def divided(value: Any, factor: int, least: int = 8) -> Any:
    """A width (or a list of them) divided by ``factor``; one under ``least`` is left as it is."""
    if isinstance(value, bool) or factor == 1:
        return value
    if isinstance(value, int):
        return value // factor if value >= least else value
    if isinstance(value, list):
        return [divided(item, factor, least) for item in value]
    return value


def largest_token_id(fields: dict) -> int:
    """The largest special token id of a config (a vocabulary must hold it)."""
    ids = [value for key, value in fields.items() if TOKEN_ID.search(key) and isinstance(value, int)]
    ids += [item for key, value in fields.items() if TOKEN_ID.search(key) and isinstance(value, list) for item in value if isinstance(item, int)]
    return max(ids, default=0)


class NotTried(Exception):
    """The sweep cannot try the architecture here: a library it needs is not installed, or there is no class or
    ``forward`` to call. Its row says why and is not counted as tried."""


class MissingInput(ValueError):
    """The sweep makes no example tensor for an input the forward needs (a less shrunk config would not help)."""


def model_class(name: str) -> type:
    """The model class ``transformers`` exports by ``name``, which must have a ``forward`` of its own."""
    import torch
    import transformers

    try:
        found = getattr(transformers, name)
    except AttributeError as error:  # a mapping naming a class that transformers does not export
        raise NotTried(f"transformers has no class {name}") from error
    if found.forward is torch.nn.Module.forward:
        raise NotTried(f"{name} has no forward (a component called by its own methods)")
    return found


# ``requires_backends``' message for a library that is not installed
NEEDS = re.compile(r"requires the (\S+) library")


def built(model_type: str, class_name: str, first_working: Callable[[Any, Any], dict]) -> tuple[Any, Any, dict]:
    """The config, model and inputs of the most shrunk config of ``model_type`` (:func:`shrunk_fields`) that builds
    and runs eagerly, of those whose main widths stay within :data:`MOST_WIDTH`; the most shrunk one's failure when
    none does."""
    import torch

    cls = model_class(class_name)
    kind = config_class(model_type, cls)
    failures: list[Exception] = []
    tried: list[dict] = []
    for fields in shrunk_fields(kind):
        if fields in tried or (tried and widest(fields) > MOST_WIDTH):
            continue  # as shrunk as one before, or too wide to build
        tried.append(fields)
        try:
            config = kind.from_dict(fields)
            config.use_cache = False  # a returned key/value cache is no tensor; profiling it is another question
            torch.manual_seed(0)
            model = cls(config).eval()
            return config, model, first_working(model, candidate_inputs(model, config, model_type))
        except ImportError as error:
            libraries = NEEDS.findall(str(error))
            if not libraries:
                raise
            raise NotTried(f"needs {', '.join(dict.fromkeys(libraries))}") from error
        except MissingInput:
            raise
        except Exception as error:  # a less shrunk config may fit: the next one
            print(f"shrunk config {len(tried)} does not build: {type(error).__name__}: {error}"[:2000], flush=True)
            failures.append(error)
    raise failures[0]


def widest(fields: dict) -> int:
    """The widest main width of a config and its sub-configs."""
    return max(own_width(config) for config in nested_configs(fields))


def candidate_inputs(model: Any, config: Any, model_type: str) -> Iterator[dict[str, Any]]:
    """Input sets for ``model``'s forward, most likely first: each is name → tensor, for every input it needs; then
    each with the other modalities the forward takes (SAM 3's text beside its image, UDOP's boxes)."""
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
    yield from layout_choices(names, config, parameters)
    others = [name for name in OTHER_MODALITIES if name in parameters and name not in names]
    if others:
        yield from layout_choices(names + others, config, parameters)


def layout_choices(names: list[str], config: Any, parameters: Any) -> Iterator[dict[str, Any]]:
    """Every combination of each input's candidate tensors (most inputs have one); an input about another one (its
    mask, its padding) made to fit the other's tensor."""
    import itertools

    about = {name: stem for name in names if (stem := name.rsplit("_", 1)[0]) in names and name.endswith(("_mask", "_padding"))}
    own = [name for name in names if name not in about]
    options = [[(name, tensor) for tensor in tensors_for(name, config)] for name in own]
    missing = [name for name, choices in zip(own, options) if not choices]
    if missing:
        raise MissingInput(f"no example input is made for the forward's {', '.join(missing)}")
    for combination in itertools.product(*options):
        inputs = dict(combination)
        inputs.update({name: derived(name, inputs[stem], parameters[name].annotation) for name, stem in about.items()})
        yield {name: inputs[name] for name in names}


def tensors_for(name: str, config: Any) -> list[Any]:
    """Candidate example tensors for an input called ``name`` (an unknown name has none)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    if name in ("input_ids", "decoder_input_ids"):
        vocab = config_value(config, "vocab_size", "decoder_vocab_size") or 1000
        # then a sequence per codebook (an audio decoder's: Musicgen's), the batch's rows
        codebooks = [config_value(config, "num_codebooks")] if is_int(config_value(config, "num_codebooks")) else []
        return [torch.randint(3, min(vocab, 1000), (rows, SEQUENCE), generator=generator) for rows in (1, *codebooks)]
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
        waves = [torch.randn(*batch, samples, generator=generator) for samples in WAVEFORMS for batch in ((1,), (1, 1))]
        return [*waves, *spectrogram]
    if name in FEATURE_INPUTS:
        channels = config_value(config, "input_channels") or 1
        positions = config_value(config, "max_source_positions")
        # a short clip first; some encoders take exactly their full window (two frames per position)
        lengths = [64, *([2 * positions] if isinstance(positions, int) and positions > 32 else [])]
        return [tensor for frames in lengths for bins in feature_sizes(config) for tensor in
                (torch.randn(1, bins, frames, generator=generator), torch.randn(1, frames, bins * channels, generator=generator))]
    if name == "bbox":
        return [torch.zeros(1, SEQUENCE, 4, dtype=torch.long)]
    if name == "inputs":  # a model without its own preprocessing (Perceiver's) takes vectors of its width
        return [torch.randn(1, SEQUENCE, config_value(config, "d_model", "hidden_size"), generator=generator)]
    if name == "past_values":  # a time series: its context window
        return [torch.randn(1, config_value(config, "context_length") or 64, generator=generator)]
    if name == "freq":
        return [torch.zeros(1, 1, dtype=torch.long)]
    if name in ("grid_thw", "hidden_states"):  # a vision tower fed flat patches (Qwen-VL's): a 1 × 4 × 4 grid of them
        return [flat_patches(name, config)]
    return []


def flat_patches(name: str, config: Any) -> Any:
    """A grid of 1 × 4 × 4 patches (``grid_thw``), or its patches flattened, each of channels × frames × patch² values."""
    import torch

    if name == "grid_thw":
        return torch.tensor([[1, 4, 4]])
    size = (config_value(config, "in_channels", "num_channels") or 3) * (config_value(config, "temporal_patch_size") or 1) * (config_value(config, "patch_size") or 14) ** 2
    return torch.randn(16, size, generator=torch.Generator().manual_seed(0))


def derived(name: str, base: Any, annotation: Any) -> Any:
    """The tensor of an input about another one (``audio_mel_mask`` of ``audio_mel``, ``past_values_padding``): over its
    first two dimensions, nothing padded, everything attended to; a boolean mask (padding marked) all false."""
    import torch

    if name.endswith("_padding") or "Bool" in str(annotation):
        return torch.zeros(base.shape[:2], dtype=torch.bool if "Bool" in str(annotation) else torch.long)
    return torch.ones(base.shape[:2], dtype=torch.long)


def feature_sizes(config: Any) -> list[int]:
    """The sizes an audio model's feature vectors may have, by the config's names for them (the usual 80 and 128 mel
    bins when it has none), then each of them stacked 2 and 4 frames at a time, as some feature extractors do."""
    keys = ("num_mel_bins", "input_feat_per_channel", "feature_size", "n_mels", "feature_projection_input_dim", "input_dim", "input_feat_size")
    sizes = [size for key in keys if is_int(size := config_value(config, key)) and size > 0] or [80, 128]
    return list(dict.fromkeys(size * stacked for stacked in (1, 2, 4) for size in sizes))


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


def write_model_file(model_type: str, class_name: str, directory: Path, first_working: Callable[[Any, Any], dict]) -> Path:
    """Build ``model_type`` small, pick inputs it runs on (``first_working(model, candidates)``), and write
    ``model.py``, ``config.json`` and ``inputs.pt`` into ``directory``; return the model file."""
    import torch

    config, model, inputs = built(model_type, class_name, first_working)
    directory.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(directory)
    torch.save(inputs, directory / "inputs.pt")
    path = directory / "model.py"
    path.write_text(MODEL_FILE.format(model_type=model_type, class_name=class_name))
    (directory / "build.json").write_text(json.dumps({"class": class_name, "inputs": {name: list(tensor.shape) for name, tensor in inputs.items()},
                                                      "parameters": sum(p.numel() for p in model.parameters())}))
    return path
