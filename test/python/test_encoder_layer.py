"""`nn.TransformerEncoderLayer` in inference calls the fused `aten._transformer_encoder_layer_fwd`;
tidal decomposes it (`capture._transformer_encoder_layer_fwd`) so that its linears and attention
are compiled code, and keeps it whole when a mask is given. Values against eager."""

import pytest
import torch


def _layer(norm_first, activation):
    torch.manual_seed(3)
    return torch.nn.TransformerEncoderLayer(64, 4, dim_feedforward=96, dropout=0.0, activation=activation,
                                            batch_first=True, norm_first=norm_first).eval()


def _callees(dump_dir):
    return "".join(p.read_text() for p in dump_dir.glob("*/01-tidal.mlir"))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decomposed_layer_matches_eager(norm_first, activation, tmp_path):
    layer = _layer(norm_first, activation)
    x = torch.randn(3, 10, 64)
    compiled = torch.compile(layer, backend="tidal", options={"dump_dir": str(tmp_path)})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), layer(x), rtol=1e-4, atol=1e-4)
    text = _callees(tmp_path)
    assert text and "_transformer_encoder_layer_fwd" not in text


def test_masked_layer_stays_whole(tmp_path):
    layer = _layer(False, "relu")
    x = torch.randn(2, 7, 64)
    padding = torch.tensor([[False] * 7, [False] * 5 + [True] * 2])
    compiled = torch.compile(layer, backend="tidal", options={"dump_dir": str(tmp_path)})
    with torch.no_grad():
        expected = layer(x, src_key_padding_mask=padding)
        torch.testing.assert_close(compiled(x, src_key_padding_mask=padding), expected, rtol=1e-4, atol=1e-4)
    assert "_transformer_encoder_layer_fwd" in _callees(tmp_path)
