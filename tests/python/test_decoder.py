"""ffn.torch.TransformerDecoderLayer / TransformerDecoder (on ffn.Decoder) against
PyTorch's nn.TransformerDecoderLayer / nn.TransformerDecoder run in float64:
forward at the valid positions and every gradient (tgt, memory, each parameter),
for odd sizes (d_model 20 with 5 heads, d_ff 36), the layer alone and stacks of
1-2 layers, both layouts, post- and pre-LN, relu and gelu, ragged target and
memory padding, with and without the causal mask; generation (ffn.Decoder.start
and DecoderState.step) bitwise equal to the forward on the whole prefix;
from_torch, PyTorch's initialization, dropout, copies, the masks and inputs
refused, and the ffn.Decoder binding itself.

Tolerance: the encoder's (test_torch_encoder.py), TOL_PER_LAYER * layers
relative to the largest magnitude of the reference tensor. ffn computes in
float32 and PyTorch here in float64, so the difference is float32 rounding
(sums over d_model, d_ff and the keys in another order, passed on by each
layer's norms). Measured over this file's matrix: worst 7.8e-7 (1 layer; a
parameter gradient), 1.0e-6 (2 layers; multihead_attn.in_proj_bias's), 13x and
19x below the tolerance (y 2.5e-7, dtgt 6.7e-7, dmemory 4.3e-7); against
PyTorch in float32 instead, 7.8e-7 and 1.2e-6.
test_the_tolerance_detects_a_wrong_decoder shows what it catches (the memory's
padding not masked: 0.15; no causal mask: 0.32; one cross-attention weight of
1200 off by 1e-3, ~1% of it: 5.8e-5).
"""
import copy
import io
import pickle
import warnings

import numpy as np
import pytest

import ffn

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from ffn.torch import TransformerDecoder, TransformerDecoderLayer  # noqa: E402
from conftest import ticks_during

TOL_PER_LAYER = 1e-5
D, NHEAD, D_FF = 20, 5, 36


def rel(a, b):
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30))


def make_pair(d=D, nhead=NHEAD, d_ff=D_FF, layers=0, final_norm=False, seed=0, **kw):
    """(ours, PyTorch's float64 copy) with the same random parameters: biases and norms perturbed
    (PyTorch starts them at 0 and 1, which would hide a wrong bias or gamma), every layer its own.
    layers 0: the layer alone."""
    torch.manual_seed(seed)
    kw.setdefault("dropout", 0.0)
    layer = TransformerDecoderLayer(d, nhead, d_ff, **kw)
    ours = layer if layers == 0 else TransformerDecoder(layer, layers, norm=nn.LayerNorm(d) if final_norm else None)
    with torch.no_grad():
        for p in ours.parameters():
            p.add_((0.1 if p.dim() == 1 else 0.01) * torch.randn_like(p))
    torch_layer = nn.TransformerDecoderLayer(d, nhead, d_ff, **kw)
    ref = torch_layer if layers == 0 else nn.TransformerDecoder(torch_layer, layers,
                                                                norm=nn.LayerNorm(d) if final_norm else None)
    ref.load_state_dict(ours.state_dict())
    return ours, ref.double()


def padding(lengths, seq):
    """The key padding mask [N, S] of these lengths (True = padding)."""
    return torch.arange(seq)[None, :] >= torch.tensor(lengths)[:, None]


def causal_mask(seq):
    return torch.ones(seq, seq, dtype=torch.bool).triu(1)


def errors_against_pytorch(ours, ref, tgt, memory, tgt_mask, tgt_pad, memory_pad, valid):
    """Relative errors of the forward at the valid target positions, dtgt, dmemory and every
    parameter gradient, with a loss over the valid target positions only (ffn's outputs at target
    padding are zeros, PyTorch's are not)."""
    ta, ma = tgt.clone().requires_grad_(True), memory.clone().requires_grad_(True)
    tb, mb = tgt.double().requires_grad_(True), memory.double().requires_grad_(True)
    kw = dict(tgt_mask=tgt_mask, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=memory_pad)
    ya, yb = ours(ta, ma, **kw), ref(tb, mb, **kw)
    assert ya.shape == yb.shape and ya.dtype == torch.float32
    assert not ya[~valid].any()  # target padding: zeros
    errors = {"y": rel(ya[valid], yb[valid])}
    g = torch.randn(ya.shape, dtype=torch.float64) * valid[..., None]
    (ya * g.float()).sum().backward()
    (yb * g).sum().backward()
    errors["dtgt"] = rel(ta.grad, tb.grad)
    errors["dmemory"] = rel(ma.grad, mb.grad)
    theirs = dict(ref.named_parameters())
    assert [n for n, _ in ours.named_parameters()] == list(theirs)
    for name, p in ours.named_parameters():
        assert p.grad is not None, name
        errors[name] = rel(p.grad, theirs[name].grad)
    return errors


@pytest.mark.parametrize("layers,final_norm", [(0, False), (1, True), (2, False), (2, True)])  # 0: the layer alone
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_matches_pytorch_forward_and_every_gradient(layers, final_norm, batch_first, norm_first, activation):
    ours, ref = make_pair(layers=layers, final_norm=final_norm, activation=activation, batch_first=batch_first,
                          norm_first=norm_first)
    tol = TOL_PER_LAYER * max(layers, 1)
    N, T, S = 3, 6, 5
    torch.manual_seed(1)
    tgt = torch.randn(N, T, D) if batch_first else torch.randn(T, N, D)
    memory = torch.randn(N, S, D) if batch_first else torch.randn(S, N, D)
    for tgt_lengths, memory_lengths, causal in [(None, None, True), ([6, 3, 1], [5, 2, 4], True),
                                                (None, [1, 5, 3], False), ([2, 6, 5], None, False)]:
        tgt_pad = None if tgt_lengths is None else padding(tgt_lengths, T)
        memory_pad = None if memory_lengths is None else padding(memory_lengths, S)
        valid = torch.ones(N, T, dtype=torch.bool) if tgt_pad is None else ~tgt_pad
        ours.zero_grad()
        ref.zero_grad()
        errors = errors_against_pytorch(ours, ref, tgt, memory, causal_mask(T) if causal else None, tgt_pad,
                                        memory_pad, valid if batch_first else valid.t())
        worst = max(errors, key=errors.get)
        assert errors[worst] <= tol, (worst, errors[worst], tgt_lengths, memory_lengths, causal)


def test_the_tolerance_detects_a_wrong_decoder():
    ours, ref = make_pair(batch_first=True)
    tgt, memory = torch.randn(3, 6, D), torch.randn(3, 5, D)
    pad, mpad = padding([6, 4, 2], 6), padding([5, 2, 3], 5)
    kw = dict(tgt_mask=causal_mask(6), tgt_key_padding_mask=pad, memory_key_padding_mask=mpad)
    y = ours(tgt, memory, **kw)
    t, m = tgt.double(), memory.double()
    assert rel(y[~pad], ref(t, m, **kw)[~pad]) <= TOL_PER_LAYER
    assert rel(y[~pad], ref(t, m, tgt_mask=causal_mask(6), tgt_key_padding_mask=pad)[~pad]) > 1000 * TOL_PER_LAYER
    assert rel(y[~pad], ref(t, m, tgt_key_padding_mask=pad, memory_key_padding_mask=mpad)[~pad]) > 1000 * TOL_PER_LAYER
    with torch.no_grad():
        ref.multihead_attn.in_proj_weight[25, 3] += 1e-3  # one cross-attention W_k element, ~1% of its value
    assert rel(y[~pad], ref(t, m, **kw)[~pad]) > 2 * TOL_PER_LAYER


def test_same_initialization_and_names_as_pytorch():
    for kw in [dict(), dict(activation="gelu", batch_first=True, norm_first=True, layer_norm_eps=1e-6)]:
        torch.manual_seed(2)
        ours = TransformerDecoderLayer(D, NHEAD, D_FF, **kw)
        torch.manual_seed(2)
        theirs = nn.TransformerDecoderLayer(D, NHEAD, D_FF, **kw)
        a, b = ours.state_dict(), theirs.state_dict()
        assert list(a) == list(b)
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert ours.activation is theirs.activation and ours.norm3.eps == theirs.norm3.eps
        dec = TransformerDecoder(ours, 2, norm=nn.LayerNorm(D, eps=ours.norm1.eps))
        assert list(dec.state_dict()) == list(nn.TransformerDecoder(theirs, 2, norm=nn.LayerNorm(D)).state_dict())
        assert dec.layers[0] is not ours and dec.layers[0] is not dec.layers[1]  # deep copies, as PyTorch's


def test_from_torch():
    torch.manual_seed(3)
    m = nn.TransformerDecoderLayer(D, NHEAD, D_FF, dropout=0.25, activation=nn.GELU(), batch_first=True,
                                   norm_first=True, layer_norm_eps=1e-6).eval()
    layer = TransformerDecoderLayer.from_torch(m, threads=1)
    assert not layer.training and layer.threads == 1 and layer.norm_first and layer.multihead_attn.batch_first
    assert isinstance(layer.activation, nn.GELU) and layer.activation is not m.activation
    assert layer.dropout.p == 0.25 and layer.multihead_attn.dropout == 0.25 and layer.norm3.eps == 1e-6
    assert all(torch.equal(a, b) for a, b in zip(layer.state_dict().values(), m.state_dict().values()))
    tgt, memory = torch.randn(2, 6, D), torch.randn(2, 4, D)
    with torch.no_grad():
        assert rel(layer(tgt, memory), m.double()(tgt.double(), memory.double())) <= TOL_PER_LAYER
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(D, NHEAD, D_FF, dropout=0.0), 2, norm=nn.LayerNorm(D))
    ours = TransformerDecoder.from_torch(dec)
    assert list(ours.state_dict()) == list(dec.state_dict()) and ours.norm is not dec.norm
    tgt, memory = torch.randn(6, 2, D), torch.randn(4, 2, D)
    with torch.no_grad():
        assert rel(ours(tgt, memory), dec.double()(tgt.double(), memory.double())) <= 2 * TOL_PER_LAYER
    with pytest.raises(ffn.Error, match="from_torch: expected an nn.TransformerDecoderLayer, got "
                                        "TransformerEncoderLayer"):
        TransformerDecoderLayer.from_torch(nn.TransformerEncoderLayer(8, 2, 16))
    bad = nn.TransformerDecoderLayer(8, 2, 16)
    bad.dropout3.p = 0.5
    with pytest.raises(ffn.Error, match=r"dropout probabilities differ \(self_attn.dropout 0.1, multihead_attn.dropout "
                                        r"0.1, dropout.p 0.1, dropout1.p 0.1, dropout2.p 0.1, dropout3.p 0.5\); ffn's "
                                        r"decoder layer has one dropout at the six sites"):
        TransformerDecoderLayer.from_torch(bad)
    bad = nn.TransformerDecoderLayer(8, 2, 16)
    bad.norm3.eps = 1e-3
    with pytest.raises(ffn.Error, match="norm1.eps 1e-05, norm2.eps 1e-05 and norm3.eps 0.001 differ; ffn's decoder"):
        TransformerDecoderLayer.from_torch(bad)
    bad = nn.TransformerDecoderLayer(8, 2, 16)
    bad.multihead_attn = nn.MultiheadAttention(8, 2, kdim=4, vdim=4)
    with pytest.raises(ffn.Error, match="from_torch: multihead_attn must be plain attention as "
                                        "TransformerDecoderLayer makes it"):
        TransformerDecoderLayer.from_torch(bad)
    with pytest.raises(ffn.Error, match="from_torch: self_attn.in_proj_weight: expected torch.float32"):
        TransformerDecoderLayer.from_torch(nn.TransformerDecoderLayer(8, 2, 16).double())
    mixed = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16), 2)
    mixed.layers[1].norm_first = True
    with pytest.raises(ffn.Error, match=r"layers.1: settings differ from layer 0's \(norm_first True vs False\); "
                                        r"ffn's decoder runs every layer with one setting"):
        TransformerDecoder.from_torch(mixed)


def test_unbatched_input_and_equivalent_masks():
    torch.manual_seed(4)
    layer = TransformerDecoderLayer(12, 3, 20, dropout=0.0)
    tgt, memory = torch.randn(5, 3, 12), torch.randn(4, 3, 12)  # [T, N, E], [S, N, E]
    with torch.no_grad():
        assert torch.equal(layer(tgt[:, 0], memory[:, 0]), layer(tgt[:, :1], memory[:, :1])[:, 0])
        pad, mpad = padding([5, 2, 4], 5), padding([4, 4, 1], 4)
        assert torch.equal(layer(tgt[:, 2], memory[:, 2], tgt_key_padding_mask=pad[2], memory_key_padding_mask=mpad[2]),
                           layer(tgt, memory, tgt_key_padding_mask=pad, memory_key_padding_mask=mpad)[:, 2])
        # The same masks in their other spellings give the same bits.
        fpad = torch.zeros(3, 4).masked_fill(mpad, float("-inf"))
        assert torch.equal(layer(tgt, memory, memory_key_padding_mask=fpad),
                           layer(tgt, memory, memory_key_padding_mask=mpad))
        causal = layer(tgt, memory, tgt_mask=causal_mask(5))
        assert torch.equal(layer(tgt, memory, tgt_mask=nn.Transformer.generate_square_subsequent_mask(5)), causal)
        assert torch.equal(layer(tgt, memory, tgt_is_causal=True), causal)
        assert not torch.equal(layer(tgt, memory), causal)  # as PyTorch's: no mask, no causal masking
        assert torch.equal(layer(tgt, memory, memory_mask=torch.zeros(5, 4)), layer(tgt, memory))  # masks nothing
        assert torch.equal(layer(tgt, memory, memory_key_padding_mask=padding([4, 4, 4], 4)), layer(tgt, memory))
        # A fully padded target: zeros; the others as without it.
        y = layer(tgt, memory, tgt_key_padding_mask=padding([5, 0, 4], 5))
        assert not y[:, 1].any() and torch.equal(y[:, 0], layer(tgt[:, :1], memory[:, :1])[:, 0])
        stack = TransformerDecoder(layer, 2)
        assert torch.equal(stack(tgt, memory, tgt_mask=causal_mask(5)), stack(tgt, memory, tgt_is_causal=True))


def test_dropout_is_seeded_from_torch_and_backward_follows_its_masks():
    torch.manual_seed(5)
    layer = TransformerDecoderLayer(16, 4, 24, dropout=0.3, activation="gelu", batch_first=True)
    tgt, memory = torch.randn(2, 6, 16), torch.randn(2, 5, 16)
    with torch.no_grad():
        eval_y = layer.eval()(tgt, memory)
        layer.train()
        torch.manual_seed(9)
        a = layer(tgt, memory)
        torch.manual_seed(9)
        b = layer(tgt, memory)
        c = layer(tgt, memory)
    assert torch.equal(a, b) and not torch.equal(b, c) and not torch.equal(a, eval_y)
    for m in (layer.dropout, layer.dropout1, layer.dropout2, layer.dropout3):
        m.p = 0.0
    layer.self_attn.dropout = layer.multihead_attn.dropout = 0.0  # followed, not ignored
    with torch.no_grad():
        assert torch.equal(layer(tgt, memory), eval_y)
    for m in (layer.dropout, layer.dropout1, layer.dropout2, layer.dropout3):
        m.p = 0.3
    layer.self_attn.dropout = layer.multihead_attn.dropout = 0.3
    # The gradient of the function each seed picks, in the memory's direction v (as the encoder's
    # test, with its tolerance, 1e-2 relative): autograd against a central difference with the same
    # masks, and backward with another seed's masks, which the tolerance must catch.
    v, g = torch.randn_like(memory), torch.randn_like(tgt)

    def gradient(seed):
        ma = memory.clone().requires_grad_(True)
        torch.manual_seed(seed)
        (layer(tgt, ma) * g).sum().backward()
        return float((ma.grad.double() * v).sum())

    def f(z):
        torch.manual_seed(11)
        with torch.no_grad():
            return float((layer(tgt, z).double() * g).sum())

    h = 1e-2
    numeric = (f(memory + h * v) - f(memory - h * v)) / (2 * h)
    assert abs(numeric - gradient(11)) <= 1e-2 * abs(numeric)
    assert abs(numeric - gradient(12)) > 1e-2 * abs(numeric)


def test_optimizer_steps_and_load_state_dict_repack():
    ours, ref = make_pair(12, 2, 20, 2, final_norm=True)
    tgt, memory = torch.randn(4, 3, 12), torch.randn(5, 3, 12)
    opt = torch.optim.Adam(ours.parameters(), lr=1e-2)
    before = ours(tgt, memory).detach()
    ours(tgt, memory).pow(2).sum().backward()
    opt.step()
    after = ours(tgt, memory).detach()
    assert not torch.equal(before, after)  # the step reached ffn's copy of the weights
    ref.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert rel(after, ref(tgt.double(), memory.double())) <= 2 * TOL_PER_LAYER
    for layer in ours.layers:  # a setting changed on every layer is followed too
        layer.norm1.eps = layer.norm2.eps = layer.norm3.eps = 0.5
    ours.norm.eps = 0.5
    assert not torch.equal(ours(tgt, memory), after)


def test_gradients_reach_only_what_requires_them():
    torch.manual_seed(6)
    layer = TransformerDecoderLayer(12, 3, 20, dropout=0.0)
    tgt, memory = torch.randn(4, 2, 12), torch.randn(3, 2, 12, requires_grad=True)
    layer.requires_grad_(False)
    layer(tgt, memory).sum().backward()  # the memory alone (an encoder below trains, the decoder is frozen)
    assert memory.grad is not None and memory.grad.abs().sum() > 0
    assert all(p.grad is None for p in layer.parameters())
    with torch.no_grad():
        assert not layer(tgt, memory).requires_grad


def _copies(module):
    saved = io.BytesIO()
    torch.save(module, saved)
    saved.seek(0)
    return [("deepcopy", copy.deepcopy(module)), ("pickle", pickle.loads(pickle.dumps(module))),
            ("torch.save", torch.load(saved))]


@pytest.mark.parametrize("stack", [False, True])
def test_copies_give_the_same_bits_and_are_independent(stack):
    torch.manual_seed(7)
    layer = TransformerDecoderLayer(12, 3, 20, dropout=0.2, activation=F.gelu, batch_first=True)
    module = TransformerDecoder(layer, 2, norm=nn.LayerNorm(12)) if stack else layer
    tgt, memory = torch.randn(2, 5, 12), torch.randn(2, 4, 12)
    kw = dict(tgt_key_padding_mask=padding([5, 3], 5), memory_key_padding_mask=padding([2, 4], 4), tgt_is_causal=True)
    module(tgt, memory, **kw).sum().backward()  # packed and used before it is copied
    torch.manual_seed(8)
    expected_train = module(tgt, memory, **kw)
    expected = module.eval()(tgt, memory, **kw)
    module.train()
    for how, c in _copies(module):
        assert type(c) is type(module) and c.training, how
        torch.manual_seed(8)
        assert torch.equal(c(tgt, memory, **kw), expected_train), how
        c.eval()
        assert torch.equal(c(tgt, memory, **kw), expected), how
        opt = torch.optim.SGD(c.parameters(), lr=0.1)
        c(tgt, memory).pow(2).sum().backward()
        opt.step()
        assert not torch.equal(c(tgt, memory, **kw), expected), how
        module.eval()
        assert torch.equal(module(tgt, memory, **kw), expected), how
        module.train()


def test_double_backward_raises():
    layer = TransformerDecoderLayer(8, 2, 16, dropout=0.0)
    tgt = torch.randn(3, 2, 8, requires_grad=True)
    (gx,) = torch.autograd.grad(layer(tgt, torch.randn(4, 2, 8)).sum(), tgt, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate|does not require grad"):  # an error, never zeros
        gx.pow(2).sum().backward()


T, S = 5, 4
SUPPORTED_TGT = "ffn supports tgt_mask=None or the causal mask"
SUPPORTED_MEMORY = r"ffn supports memory_mask=None only \(every target position attends to every memory position"


@pytest.mark.parametrize("call,match", [
    (lambda m, t, s: m(t, s, tgt_mask=causal_mask(T).t()), f"tgt_mask: not the causal mask; {SUPPORTED_TGT}"),
    (lambda m, t, s: m(t, s, tgt_mask=torch.zeros(T, T).fill_diagonal_(-1.0)), "tgt_mask: a float mask with values"),
    (lambda m, t, s: m(t, s, tgt_mask=torch.zeros(T, T, dtype=torch.bool), tgt_is_causal=True),
     r"tgt_mask: not the causal mask \(is_causal=True\)"),
    (lambda m, t, s: m(t, s, tgt_mask=causal_mask(T)[None].expand(6, T, T)),
     r"tgt_mask: shape \[6, 5, 5\], expected \[5, 5\]"),
    (lambda m, t, s: m(t, s, memory_mask=torch.zeros(T, S, dtype=torch.bool).fill_diagonal_(True)),
     f"memory_mask: masks some memory positions; {SUPPORTED_MEMORY}"),
    (lambda m, t, s: m(t, s, memory_mask=torch.zeros(S, T)), rf"memory_mask: shape \[4, 5\], expected \[5, 4\]; "
                                                             rf"{SUPPORTED_MEMORY}"),
    (lambda m, t, s: m(t, s, memory_mask=torch.zeros(T, S).fill_diagonal_(-1.0)), "memory_mask: a float mask with"),
    (lambda m, t, s: m(t, s, memory_is_causal=True), "memory_is_causal: True, but ffn's cross-attention is not causal"),
    (lambda m, t, s: m(t, s, memory_key_padding_mask=torch.tensor([[0, 1, 0, 0], [0] * 4], dtype=torch.bool)),
     r"memory_key_padding_mask: row 0 is 0100 \(1 = padding\); ffn supports padding at the end"),
    (lambda m, t, s: m(t, s, tgt_key_padding_mask=padding([5, 3], T).t()),
     r"tgt_key_padding_mask: shape \[5, 2\], expected \[2, 5\]"),
    (lambda m, t, s: m(t, s, memory_key_padding_mask=padding([4, 0], S)),
     r"memory: sequence 1 has no valid memory position to attend to \(length 0\)"),
    (lambda m, t, s: m(t.double(), s), "tgt: expected torch.float32, got torch.float64"),
    (lambda m, t, s: m(t, s.double()), "memory: expected torch.float32, got torch.float64"),
    (lambda m, t, s: m(t, s[..., :10]), r"memory: shape \[4, 2, 10\], expected \[S, N, E\] \(batch_first=False\) "
                                        r"as tgt \[5, 2, 12\], E = d_model = 12"),
    (lambda m, t, s: m(t, s[:, 0]), r"memory: shape \[4, 12\], expected \[S, N, E\]"),
    (lambda m, t, s: m(t[..., :10], s), r"tgt: shape \[5, 2, 10\], expected \[T, N, E\] \(batch_first=False\) or "
                                        r"unbatched \[T, E\], E = d_model = 12"),
    (lambda m, t, s: m(t, s[:, :1]), r"memory: batch N = 1, but tgt's is 2"),
    (lambda m, t, s: m.double()(t, s), "parameter layers.0.self_attn.in_proj_weight: expected torch.float32"),
    (lambda m, t, s: TransformerDecoderLayer(12, 5), r"nhead: expected a divisor of d_model \(12\), got 5"),
    (lambda m, t, s: TransformerDecoderLayer(12, 3, activation="tanh"), "activation: expected 'relu' or 'gelu'"),
    (lambda m, t, s: TransformerDecoderLayer(12, 3, dtype=torch.float64), "dtype: ffn's decoder computes in float32"),
    (lambda m, t, s: TransformerDecoder(nn.TransformerDecoderLayer(12, 3), 2),
     r"decoder_layer: expected an ffn.torch.TransformerDecoderLayer, got torch.nn.modules.transformer."
     r"TransformerDecoderLayer \(convert it with ffn.torch.TransformerDecoderLayer.from_torch\(layer\)\)"),
    (lambda m, t, s: TransformerDecoder(m.layers[0], 0), "num_layers: expected 1..4096, got 0"),
    (lambda m, t, s: TransformerDecoder(m.layers[0], 2, norm=nn.LayerNorm(12, eps=1e-6)),
     "norm: eps 1e-06 differs from the layers' layer_norm_eps 1e-05; ffn's decoder has one eps"),
])
def test_bad_input_is_ffn_error_with_one_line(call, match):
    torch.manual_seed(9)
    m = TransformerDecoder(TransformerDecoderLayer(12, 3, 20), 2)
    tgt, memory = torch.randn(T, 2, 12), torch.randn(S, 2, 12)
    with pytest.raises(ffn.Error, match=match) as e:
        call(m, tgt, memory)
    assert isinstance(e.value, ValueError)
    assert "\n" not in str(e.value)


def test_settings_that_ffn_cannot_follow_are_refused_at_the_call():
    layer = TransformerDecoderLayer(12, 3, 20)
    tgt, memory = torch.randn(T, 2, 12), torch.randn(S, 2, 12)
    layer.multihead_attn.dropout = 0.5  # PyTorch would use it; ffn has one p
    with pytest.raises(ffn.Error, match="TransformerDecoderLayer: dropout probabilities differ"):
        layer(tgt, memory)
    layer.multihead_attn.dropout = 0.1
    layer.multihead_attn.batch_first = True
    with pytest.raises(ffn.Error, match=r"multihead_attn has embed_dim, num_heads, batch_first \(12, 3, True\), "
                                        r"self_attn \(12, 3, False\)"):
        layer(tgt, memory)
    dec = TransformerDecoder(TransformerDecoderLayer(12, 3, 20), 2)
    dec.layers[1].activation = F.gelu
    with pytest.raises(ffn.Error, match=r"layers.1: settings differ from layer 0's \(activation 'gelu' vs 'relu'\)"):
        dec(tgt, memory)
    dec.layers[1].activation = F.relu
    dec.layers[0].eval()
    with pytest.raises(ffn.Error, match="some in training mode and some not; call .train.. or .eval.. on the whole "
                                        "decoder"):
        dec(tgt, memory)


# ---- the binding: ffn.Decoder and generation ----

def torch_decoder(d=12, nhead=3, d_ff=20, layers=2, final_norm=True, norm_first=False, seed=10):
    """(nn.TransformerDecoder with perturbed parameters, its ffn.DecoderConfig, its weights as NumPy)."""
    torch.manual_seed(seed)
    theirs = nn.TransformerDecoder(nn.TransformerDecoderLayer(d, nhead, d_ff, dropout=0.0, batch_first=True,
                                                              norm_first=norm_first), layers,
                                   norm=nn.LayerNorm(d) if final_norm else None)
    with torch.no_grad():
        for p in theirs.parameters():
            p.add_((0.1 if p.dim() == 1 else 0.01) * torch.randn_like(p))
    cfg = ffn.DecoderConfig(d_model=d, heads=nhead, d_ff=d_ff, layers=layers, norm="pre" if norm_first else "post",
                            final_norm=final_norm)
    return theirs, cfg, {k: v.detach().numpy() for k, v in theirs.state_dict().items()}


def test_decoder_binding_names_shapes_cache_and_files(tmp_path):
    theirs, cfg, weights = torch_decoder()
    assert ffn.DecoderConfig is ffn.EncoderConfig
    dec = ffn.Decoder(cfg, weights)
    got = dec.weights
    assert set(got) == set(weights) and all(np.array_equal(got[k], weights[k]) for k in weights)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 12), dtype=np.float32)
    mem = rng.standard_normal((2, 4, 12), dtype=np.float32)
    y, cache = dec.forward(x, mem, lengths=[5, 3], memory_lengths=[2, 4], cache=True)
    assert not y[1, 3:].any() and cache.nbytes > 0
    with torch.no_grad():
        ref = theirs.double()(torch.from_numpy(x).double(), torch.from_numpy(mem).double(), tgt_mask=causal_mask(5),
                              tgt_key_padding_mask=padding([5, 3], 5), memory_key_padding_mask=padding([2, 4], 4))
    valid = ~padding([5, 3], 5)
    assert rel(torch.from_numpy(y)[valid], ref[valid]) <= 2 * TOL_PER_LAYER  # causal is the binding's default
    dx, dmem, grads = dec.backward(x, mem, np.ones_like(x), cache)
    assert dx.shape == x.shape and dmem.shape == mem.shape
    assert not dx[1, 3:].any() and not dmem[0, 2:].any() and dmem[0, :2].any()
    assert set(grads) == set(weights) and all(grads[k].shape == weights[k].shape for k in weights)
    assert np.array_equal(dec.forward(x[0], mem[0]), dec.forward(x[:1], mem[:1])[0])  # one sequence [T, d]
    assert not np.array_equal(dec.forward(x, mem, causal=False), dec.forward(x, mem))
    # Files: save and load give the same decoder; PyTorch's own state_dict loads too, with warnings
    # for the settings it does not state.
    dec.save(str(tmp_path / "dec.safetensors"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = ffn.Decoder.load(str(tmp_path / "dec.safetensors"))
    assert np.array_equal(again.forward(x, mem, lengths=[5, 3]), dec.forward(x, mem, lengths=[5, 3]))
    safetensors_torch = pytest.importorskip("safetensors.torch")
    safetensors_torch.save_file({k: v.contiguous() for k, v in theirs.float().state_dict().items()},
                                str(tmp_path / "torch.safetensors"))
    with pytest.warns(UserWarning, match="no metadata for"):
        loaded = ffn.Decoder.load(str(tmp_path / "torch.safetensors"), heads=3)
    assert np.array_equal(loaded.forward(x, mem), dec.forward(x, mem))
    other = ffn.Decoder(cfg, weights)
    for call, match in [
        (lambda: ffn.Decoder(cfg, {**weights, "layers.2.norm3.weight": weights["norm.weight"]}),
         r"unexpected tensor 'layers.2.norm3.weight'; a decoder of 2 layer\(s\) has "
         r"layers.N.\{self_attn.in_proj_weight"),
        (lambda: ffn.Decoder(cfg, {k: v for k, v in weights.items() if k != "layers.1.multihead_attn.in_proj_bias"}),
         "missing tensor 'layers.1.multihead_attn.in_proj_bias'"),
        (lambda: ffn.Decoder(cfg, {**weights, "layers.0.norm3.bias": np.zeros(3, np.float32)}),
         r"weights\['layers.0.norm3.bias'\]: shape \[3\], expected \[12\]"),
        (lambda: dec.forward(x, mem[..., :8].copy()), r"memory: shape \[2, 4, 8\], expected \[S, 12\] or \[B, S, 12\]"),
        (lambda: dec.forward(x, mem[:1]), "memory: batch 1, but the target's is 2"),
        (lambda: dec.forward(x, mem, memory_lengths=[5, 1]), "lengths: sequence 0 has length 5, expected 0..4"),
        (lambda: dec.forward(x, mem, memory_lengths=[0, 1]), "memory: sequence 0 has no valid memory position"),
        (lambda: dec.forward(x, mem.astype(np.float64)), "memory: expected float32, got float64"),
        (lambda: dec.forward(x, mem, threads=-1), "threads"),
        (lambda: other.backward(x, mem, np.ones_like(x), cache), "cache: from another decoder's forward"),
        (lambda: dec.backward(x, mem[:, :3].copy(), np.ones_like(x), cache),
         r"cache: from a forward on memory of shape \[2, 4, 12\], but memory has shape \[2, 3, 12\]"),
        (lambda: dec.backward(x, mem, np.ones_like(x[:1]), cache), r"dy: shape \[1, 5, 12\], expected x's shape"),
        (lambda: ffn.Decoder.load(str(tmp_path / "torch.safetensors")), "heads"),
    ]:
        with pytest.raises(ffn.Error, match=match) as e:
            call()
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("norm_first,final_norm", [(False, True), (True, False)])
def test_generation_steps_are_bitwise_the_forward_on_the_prefix(norm_first, final_norm):
    _, cfg, weights = torch_decoder(d=D, nhead=NHEAD, d_ff=D_FF, layers=2, final_norm=final_norm,
                                    norm_first=norm_first)
    dec = ffn.Decoder(cfg, weights)
    rng = np.random.default_rng(1)
    B, steps, S_ = 3, 6, 5
    memory = rng.standard_normal((B, S_, D), dtype=np.float32)
    memory_lengths = [5, 2, 4]
    x = rng.standard_normal((B, steps, D), dtype=np.float32)
    state = dec.start(memory, memory_lengths, capacity=steps + 2)
    assert state.live == B and state.capacity == steps + 2 and state.nbytes > 0
    assert [state.source(i) for i in range(B)] == [0, 1, 2] and state.length(0) == 0
    for t in range(4):
        y = state.step(x[:, t].copy())
        whole = dec.forward(x[:, :t + 1].copy(), memory, memory_lengths=memory_lengths)  # causal
        assert np.array_equal(y, whole[:, t]), t
        assert [state.length(i) for i in range(B)] == [t + 1] * B
    # Beam search's reordering: new live sequence i continues old sequence `keep[i]`; each step is
    # then bitwise the forward on its own prefix, against its own memory.
    prefixes = [x[b, :4] for b in range(B)]
    keep = [2, 0, 0, 1]
    state.select(keep)
    prefixes = [prefixes[k] for k in keep]
    assert state.live == 4 and [state.source(i) for i in range(4)] == [2, 0, 0, 1]
    for t in range(2):
        new = rng.standard_normal((4, D), dtype=np.float32)
        y = state.step(new)
        prefixes = [np.concatenate([p, new[i:i + 1]]) for i, p in enumerate(prefixes)]
        src = [state.source(i) for i in range(4)]
        whole = dec.forward(np.stack(prefixes), memory[src], memory_lengths=[memory_lengths[s] for s in src])
        assert np.array_equal(y, whole[:, -1]), t
    assert state.length(3) == steps
    state.select([1])  # finished sequences leave
    assert state.live == 1 and state.source(0) == 0
    for call, match, kind in [
        (lambda: state.step(new), r"x: shape \[4, 20\], expected \[live, d_model\] = \[1, 20\]", ffn.Error),
        (lambda: state.step(new[:1].astype(np.float64)), "x: expected float32, got float64", ffn.Error),
        (lambda: state.select([1]), r"select: live sequence 1 does not exist \(1 live\)", ffn.Error),
        (lambda: state.length(1), r"length: live sequence 1 does not exist \(1 live\)", ffn.Error),
        (lambda: dec.start(memory, [0, 1, 1], capacity=2), "memory: sequence 0 has no valid memory position",
         ffn.Error),
        (lambda: dec.start(memory, capacity=0), "start: capacity must be at least 1, got 0", ffn.Error),
    ]:
        with pytest.raises(kind, match=match):
            call()
    state.step(new[:1])
    state.step(new[:1])
    with pytest.raises(ffn.Error, match="step: live sequence 0 already has 8 positions, the state's capacity"):
        state.step(new[:1])
    state.select([])
    assert state.live == 0 and state.step(np.zeros((0, D), np.float32)).shape == (0, D)


def test_the_state_keeps_its_decoder_alive():
    _, cfg, weights = torch_decoder()
    dec = ffn.Decoder(cfg, weights)
    memory = np.random.default_rng(2).standard_normal((2, 3, 12), dtype=np.float32)
    x = np.random.default_rng(3).standard_normal((2, 12), dtype=np.float32)
    expected = dec.start(memory, capacity=1).step(x)
    state = dec.start(memory, capacity=1)
    del dec
    assert np.array_equal(state.step(x), expected)


def test_the_gil_is_released_while_computing():
    torch.manual_seed(11)
    layer = TransformerDecoderLayer(128, 4, 512, dropout=0.0, batch_first=True, threads=1)
    tgt = torch.randn(8, 96, 128, requires_grad=True)
    memory = torch.randn(8, 96, 128, requires_grad=True)

    def work():
        for _ in range(3):
            layer(tgt, memory, tgt_is_causal=True).sum().backward()

    during, seconds = ticks_during(work)
    # With the GIL held through ffn's forward and backward the other thread could tick only
    # between them (PyTorch's own ops around them are short).
    assert seconds > 0.02, "the calls were too short to tell"
    assert during > 10, f"{during} ticks in {seconds:.3f} s"
