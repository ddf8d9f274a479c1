"""A vision encoder and its projector beside the language model (docs/models.md §5).

A ViT (Dosovitskiy et al. 2021): the image is cut into patch_size x patch_size patches (times temporal_patch
frames: Qwen2-VL repeats an image twice), each patch is linearly embedded, positions are added (a learned table,
or rotary: none), `layers` bidirectional transformer layers run over the patches of one image, and a projector (a
linear layer, or a two-layer MLP with GELU) maps the features into the language model's hidden size. Neighbouring
spatial_merge x spatial_merge patches may be concatenated first (Qwen2-VL), or the patches pooled to a fixed
`tokens_per_image` (Gemma 3). The language model sees `image_tokens` tokens per image, part of its sequence.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

from .fields import cached_hash, non_negative_int, one_of, positive_int, require, state_without_hash
from .run import RunSpec

PROJECTORS = ("mlp", "linear")
ENCODER_ACTIVATIONS = ("gelu", "relu", "squared_relu", "swiglu", "geglu")  # as ModelSpec's
ENCODER_NORMS = ("layernorm", "rmsnorm")


@dataclass(frozen=True)
class EncoderSpec:
    """A ViT-style image encoder and the projector into a language model of width `output_hidden`."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    patch_size: int
    output_hidden: int  # the language model's hidden size (the projector's output)
    image_size: int = 0  # default image side in pixels; 0 = none (dynamic resolution: the run gives it)
    activation: str = "gelu"
    norm: str = "layernorm"
    linear_bias: bool = True
    channels: int = 3
    temporal_patch: int = 1  # frames per patch (Qwen2-VL: 2, an image counted as two identical frames)
    class_token: bool = False  # CLIP prepends a learned class token
    learned_positions: bool = True  # a learned table of positions per patch; False = rotary (no parameters)
    spatial_merge: int = 1  # merge s x s neighbouring patches into one token before the projector (Qwen2-VL: 2)
    tokens_per_image: int = 0  # language-model tokens per image after pooling (Gemma 3: 256); 0 = patches / s^2
    projector: str = "mlp"  # mlp: linear, GELU, linear (LLaVA-1.5, Qwen2-VL); linear (Gemma 3)
    projector_hidden: int = 0  # the MLP's width; 0 = its input width
    projector_norm: bool = False  # a norm over the encoder output before the projector (Qwen2-VL, Gemma 3)

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "ffn_hidden", "patch_size", "output_hidden", "channels",
                     "temporal_patch", "spatial_merge"):
            positive_int(f"encoder.{name}", getattr(self, name))
        for name in ("image_size", "tokens_per_image", "projector_hidden"):
            non_negative_int(f"encoder.{name}", getattr(self, name))
        one_of("encoder.activation", self.activation, ENCODER_ACTIVATIONS)
        one_of("encoder.norm", self.norm, ENCODER_NORMS)
        one_of("encoder.projector", self.projector, PROJECTORS)
        require(self.hidden % self.heads == 0, "encoder.heads", self.heads,
                f"must divide encoder.hidden ({self.hidden})")
        if self.image_size:
            self.check_image_size(self.image_size, "encoder.image_size")
        require(self.image_size > 0 or not self.learned_positions, "encoder.image_size", self.image_size,
                "a learned position table needs the image size it was trained at (pixels)")

    def check_image_size(self, pixels: int, field: str) -> None:
        """An image side must be a whole number of (merged) patches."""
        step = self.patch_size * self.spatial_merge
        require(pixels % step == 0, field, pixels,
                f"must be a multiple of {step} pixels (patch {self.patch_size} x merge {self.spatial_merge})")

    # -- tokens per image ----------------------------------------------------------------------------------------
    def patches(self, image_size: int) -> int:
        """Encoder tokens of one image_size x image_size image (plus the class token, if any)."""
        return (image_size // self.patch_size) ** 2 + (1 if self.class_token else 0)

    def image_tokens(self, image_size: int) -> int:
        """Language-model tokens of one image: pooled to tokens_per_image, or the patches merged s x s."""
        return self.tokens_per_image or (image_size // self.patch_size) ** 2 // self.spatial_merge ** 2

    @property
    def patch_width(self) -> int:
        """Elements of one flattened patch: channels x frames x patch_size^2 (the patch-embedding GEMM's k)."""
        return self.channels * self.temporal_patch * self.patch_size ** 2

    @property
    def projector_input(self) -> int:
        return self.hidden * self.spatial_merge ** 2

    @property
    def projector_width(self) -> int:
        return self.projector_hidden or self.projector_input

    # -- parameters ----------------------------------------------------------------------------------------------
    def embedding_params(self, image_size: int) -> int:
        """Patch embedding, class token and the learned positions of the encoder's image size. (Its layers are
        counted by ModelSpec.encoder_model, a bidirectional ModelSpec of the same shape.)"""
        positions = self.patches(image_size) * self.hidden if self.learned_positions else 0
        return self.patch_width * self.hidden + (self.hidden if self.class_token else 0) + positions

    @cached_property
    def projector_params(self) -> int:
        """The projector and the norm before it: linear (no bias), or linear-GELU-linear with biases."""
        norm = (2 * self.hidden if self.norm == "layernorm" else self.hidden) if self.projector_norm else 0
        x, w, out = self.projector_input, self.projector_width, self.output_hidden
        if self.projector == "linear":
            return norm + x * out
        return norm + x * w + w + w * out + out


def image_side(encoder: EncoderSpec, run: RunSpec) -> int:
    """The run's image side in pixels: its own, else the encoder's."""
    return run.image_size or encoder.image_size


def encoder_run(encoder: EncoderSpec | None, run: RunSpec) -> RunSpec | None:
    """The run as the encoder's layers see it: one image's patches as the sequence (the images of a micro-batch
    are its batch: attention stays within an image), or None when the run has no images."""
    if encoder is None or not run.images_per_sample:
        return None
    return dataclasses.replace(run, seq_len=encoder.patches(image_side(encoder, run)), images_per_sample=0,
                               image_size=0)


__all__ = ["EncoderSpec", "PROJECTORS", "image_side", "encoder_run"]
