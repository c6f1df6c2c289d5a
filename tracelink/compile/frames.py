"""Which frames of a Python call stack are the user's model and which are library code.

A frame rule is a file glob; a rule that starts with ``!`` marks the files it matches as the model's
own code. The last rule that matches a file decides, as in a ``.gitignore``, so a later rule (one the
user gives with ``--library-frames``) overrides the defaults in either direction. A file no rule
matches is the user's.

The defaults count installed packages and the standard library as library code, except the model
definitions that packages ship (``transformers/models``, ``diffusers/models``, ``timm/models``,
``torchvision/models``, ...): a Hugging Face BERT is the user's model even though its code lives in
``site-packages``. Framework internals (``torch/nn/modules``, ``torch/_*``, ``jax/_src``,
``flax/linen``) and a model package's shared helpers (``transformers/masking_utils.py``,
``transformers/integrations``) stay library code, so their time lands on the model line calling them.

Below every stage: the compile stage names the user's line of an op IREE cannot lower, the aggregate
stage folds library frames into their callers.
"""

from __future__ import annotations

import fnmatch
import functools

MODEL_MARK = "!"
LIBRARY_FRAMES = (
    "*/site-packages/*", "*/dist-packages/*", "*/lib/python3*/*", "*/lib64/python3*/*", "<frozen *>",
    # model definitions inside installed packages: the user's model
    "!*/transformers/models/*", "!*/diffusers/models/*", "!*/timm/models/*", "!*/torchvision/models/*",
    "!*/keras_hub/src/models/*", "!*/open_clip/*model*.py", "!*/sentence_transformers/models/*",
)


@functools.lru_cache(maxsize=8192)  # a program's ops name the same few hundred files thousands of times
def is_library(path: str, rules: tuple[str, ...] = LIBRARY_FRAMES) -> bool:
    """Whether the frame file ``path`` is library code under ``rules`` (the last matching rule decides).

    >>> is_library("/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py")
    True
    >>> is_library("/venv/lib/python3.11/site-packages/transformers/models/bert/modeling_bert.py")
    False
    >>> is_library("/venv/site-packages/transformers/models/bert/modeling_bert.py", (*LIBRARY_FRAMES, "*/bert/*"))
    True
    >>> is_library("/home/me/model.py")
    False
    """
    for rule in reversed(rules):
        model = rule.startswith(MODEL_MARK)
        if fnmatch.fnmatchcase(path, rule[1:] if model else rule):
            return not model
    return False


def user_frame(files: list[str], rules: tuple[str, ...] = LIBRARY_FRAMES) -> int:
    """The index of the innermost frame (of ``files``, innermost first) that is not library code, else 0.

    >>> user_frame(["/x/site-packages/torch/nn/functional.py", "/home/me/model.py"])
    1
    """
    return next((index for index, path in enumerate(files) if not is_library(path, rules)), 0)
