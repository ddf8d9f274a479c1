"""Hybrid layers in the model spec (specs/mixers.py, specs/model.py; docs/models.md §6): the layer pattern, the mixer
specs it names, their parameters, and the combinations refused."""
import dataclasses

import pytest

from ndcp.specs.fields import SpecError
from ndcp.specs.mixers import LinearAttentionSpec, MambaSpec
from ndcp.specs.model import ModelSpec

GDN = LinearAttentionSpec(key_heads=2, value_heads=4, key_head_dim=16, value_head_dim=32, conv_kernel=4)
MAMBA = MambaSpec(heads=8, head_dim=16, state=32, groups=2)
BASE = ModelSpec("hybrid", 4, 256, 4, 512, 1000, kv_heads=2)


def test_each_mixer_counts_its_own_weights():
    # Gated DeltaNet: in (q, k 32 each, v, z 128 each, b, a 4 each), out 128 -> 256, conv over 192 channels x 4,
    # dt_bias and A_log per value head, the gated norm over 32
    assert GDN.parameters(256) == 256 * (2 * 32 + 2 * 128 + 8) + 128 * 256 + 192 * 4 + 8 + 32
    # Mamba-2: in (z, x 128 each, B, C 64 each, dt 8), out 128 -> 256, conv with bias over 256 channels x 4,
    # dt_bias, A_log and D per head, the gated norm over 128
    assert MAMBA.parameters(256) == 256 * (2 * 128 + 2 * 64 + 8) + 128 * 256 + 256 * 5 + 3 * 8 + 128
    model = dataclasses.replace(BASE, layer_mixers="GMAG", linear_attention=GDN, mamba=MAMBA)
    mlp, norms = 3 * 256 * 512, 2 * 256
    assert [model.layer(i).total for i in range(4)] == [
        GDN.parameters(256) + mlp + norms, MAMBA.parameters(256) + mlp + norms, BASE.dense_layer.total,
        GDN.parameters(256) + mlp + norms]
    assert model.mixer_shares("dense") == (0.25, 0.5, 0.25, 1.0)
    assert model.dense_layer == model.layer(2)  # the largest dense layer (attention here): what ZeRO-3 gathers


def test_hybrid_blocks_hold_a_mixer_or_an_mlp():
    model = dataclasses.replace(BASE, layer_mixers="M-A-", hybrid_blocks=True, mamba=MAMBA)
    assert [model.has_mlp(i) for i in range(4)] == [False, True, False, True]
    assert [model.layer(i).total for i in range(4)] == [MAMBA.parameters(256) + 256, 3 * 256 * 512 + 256,
                                                        BASE.attention_params + 256, 3 * 256 * 512 + 256]
    assert model.mixer_shares("dense") == (0.25, 0.0, 0.25, 0.5)


def test_gated_attention_widens_the_query_projection():
    gated = dataclasses.replace(BASE, gated_attention=True)
    assert gated.attention_params - BASE.attention_params == 256 * 4 * 64


@pytest.mark.parametrize("fields, message", [
    ({"layer_mixers": "GA"}, r"layer_mixers='GA' is not valid; expected 4 characters"),
    ({"layer_mixers": "GM-A", "linear_attention": GDN, "mamba": MAMBA}, r"each one of A, G, M \("),
    ({"layer_mixers": "AAAG"}, r"linear_attention=None is not valid; give it exactly when layer_mixers has G"),
    ({"layer_mixers": "AAAA", "mamba": MAMBA}, r"mamba=.* give it exactly when layer_mixers has M"),
    ({"layer_mixers": "GAAA", "linear_attention": GDN, "sliding_window": 128}, r"sliding_window=128 .*not modelled"),
    ({"hybrid_blocks": True}, r"hybrid_blocks=True .*needs layer_mixers"),
])
def test_refused_combinations_name_the_field(fields, message):
    with pytest.raises(SpecError, match=message):
        dataclasses.replace(BASE, **fields)
