"""ffn.torch.TransformerEncoderLayer / TransformerEncoder (on ffn.Encoder) against
PyTorch's nn.TransformerEncoderLayer / nn.TransformerEncoder run in float64:
forward at the valid positions and every gradient, for odd sizes, 1-3 layers,
both layouts, post- and pre-LN, relu and gelu, ragged key padding and the
causal mask; from_torch, PyTorch's initialization, dropout, copies, the masks
and inputs refused, and the ffn.Encoder binding itself.

Tolerance: TOL_PER_LAYER * layers, relative to the largest magnitude of the
reference tensor (as test_torch.py's FeedForward tests, 1e-5). ffn computes in
float32 and PyTorch here in float64, so the difference is float32 rounding:
sums over d_model, d_ff and the keys in another order, each layer's norms
passing it on to the next. Measured over this file's whole matrix: worst
8.0e-7 (1 layer), 1.0e-6 (2), 1.3e-6 (3 layers; dx), 8x to 23x below the
tolerance; test_the_tolerance_detects_a_wrong_encoder shows what it catches
(a mask ignored: 0.3; one attention weight of 3888 off by 1e-3: 3.7e-5).
"""
import copy
import io
import pickle
import threading
import time

import numpy as np
import pytest

import ffn

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from ffn.torch import TransformerEncoder, TransformerEncoderLayer  # noqa: E402
from conftest import ticks_during

TOL_PER_LAYER = 1e-5


def rel(a, b):
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30))


def make_pair(d, nhead, d_ff, layers, final_norm=False, seed=0, **kw):
    """(ours, PyTorch's float64 copy) with the same random parameters: biases and norms perturbed
    (PyTorch starts them at 0 and 1, which would hide a wrong bias or gamma), every layer its own."""
    torch.manual_seed(seed)
    kw.setdefault("dropout", 0.0)
    layer = TransformerEncoderLayer(d, nhead, d_ff, **kw)
    ours = layer if layers == 0 else TransformerEncoder(layer, layers, norm=nn.LayerNorm(d) if final_norm else None)
    with torch.no_grad():
        for p in ours.parameters():
            p.add_((0.1 if p.dim() == 1 else 0.01) * torch.randn_like(p))
    torch_layer = nn.TransformerEncoderLayer(d, nhead, d_ff, **kw)
    ref = torch_layer if layers == 0 else nn.TransformerEncoder(torch_layer, layers,
                                                                norm=nn.LayerNorm(d) if final_norm else None)
    ref.load_state_dict(ours.state_dict())
    return ours, ref.double()


def padding(lengths, seq):
    """The key padding mask [N, S] of these lengths (True = padding)."""
    return torch.arange(seq)[None, :] >= torch.tensor(lengths)[:, None]


def causal_mask(seq):
    return torch.ones(seq, seq, dtype=torch.bool).triu(1)


def run(module, x, mask, pad, stack):
    return module(x, mask=mask, src_key_padding_mask=pad) if stack else module(x, src_mask=mask,
                                                                               src_key_padding_mask=pad)


def check_against_pytorch(ours, ref, x, mask, pad, valid, stack, tol):
    """Forward at the valid positions, dx and every parameter gradient, with a loss over the valid
    positions only (ffn's outputs at padding are zeros, PyTorch's are not: see the docstring)."""
    xa = x.clone().requires_grad_(True)
    xb = x.double().requires_grad_(True)
    ya, yb = run(ours, xa, mask, pad, stack), run(ref, xb, mask, pad, stack)
    assert ya.shape == yb.shape and ya.dtype == torch.float32
    assert rel(ya[valid], yb[valid]) <= tol
    assert not ya[~valid].any()  # padding: zeros
    g = torch.randn(x.shape, dtype=torch.float64) * valid[..., None]
    (ya * g.float()).sum().backward()
    (yb * g).sum().backward()
    assert rel(xa.grad, xb.grad) <= tol
    theirs = dict(ref.named_parameters())
    names = [n for n, _ in ours.named_parameters()]
    assert names == list(theirs)
    for name, p in ours.named_parameters():
        assert p.grad is not None, name
        assert rel(p.grad, theirs[name].grad) <= tol, name


@pytest.mark.parametrize("d,nhead,d_ff", [(36, 3, 50), (60, 5, 97)])
@pytest.mark.parametrize("layers,final_norm", [(0, False), (2, False), (3, True)])  # 0: the layer alone
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_matches_pytorch_forward_and_every_gradient(d, nhead, d_ff, layers, final_norm, batch_first, norm_first,
                                                     activation):
    ours, ref = make_pair(d, nhead, d_ff, layers, final_norm, activation=activation, batch_first=batch_first,
                          norm_first=norm_first)
    tol = TOL_PER_LAYER * max(layers, 1)
    N, S = 3, 7
    torch.manual_seed(1)
    x = torch.randn(N, S, d) if batch_first else torch.randn(S, N, d)
    for lengths, causal in [(None, False), ([7, 4, 1], False), (None, True), ([5, 7, 2], True)]:
        pad = None if lengths is None else padding(lengths, S)
        valid = torch.ones(N, S, dtype=torch.bool) if pad is None else ~pad
        ours.zero_grad()
        ref.zero_grad()
        check_against_pytorch(ours, ref, x, causal_mask(S) if causal else None, pad,
                              valid if batch_first else valid.t(), layers > 0, tol)


def test_the_tolerance_detects_a_wrong_encoder():
    ours, ref = make_pair(36, 3, 50, 0, batch_first=True)
    x = torch.randn(3, 7, 36)
    pad = padding([7, 4, 1], 7)
    y = ours(x, src_key_padding_mask=pad)
    assert rel(y[~pad], ref(x.double(), src_key_padding_mask=pad)[~pad]) <= TOL_PER_LAYER
    assert rel(y[~pad], ref(x.double())[~pad]) > 1000 * TOL_PER_LAYER  # the padding not masked
    assert rel(y[~pad], ref(x.double(), src_key_padding_mask=pad, src_mask=causal_mask(7))[~pad]) > 1000 * TOL_PER_LAYER
    with torch.no_grad():
        ref.self_attn.in_proj_weight[40, 3] += 1e-3  # one W_k element, ~1% of its value
    assert rel(y[~pad], ref(x.double(), src_key_padding_mask=pad)[~pad]) > 2 * TOL_PER_LAYER


def test_same_initialization_and_names_as_pytorch():
    for kw in [dict(), dict(activation="gelu", batch_first=True, norm_first=True, layer_norm_eps=1e-6)]:
        torch.manual_seed(2)
        ours = TransformerEncoderLayer(24, 4, 40, **kw)
        torch.manual_seed(2)
        theirs = nn.TransformerEncoderLayer(24, 4, 40, **kw)
        a, b = ours.state_dict(), theirs.state_dict()
        assert list(a) == list(b)
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert ours.activation is theirs.activation and ours.norm1.eps == theirs.norm1.eps
        enc = TransformerEncoder(ours, 2, norm=nn.LayerNorm(24, eps=ours.norm1.eps))
        assert list(enc.state_dict()) == list(nn.TransformerEncoder(theirs, 2, norm=nn.LayerNorm(24)).state_dict())
        assert enc.layers[0] is not ours and enc.layers[0] is not enc.layers[1]  # deep copies, as PyTorch's


def test_from_torch():
    torch.manual_seed(3)
    m = nn.TransformerEncoderLayer(20, 5, 33, dropout=0.25, activation=nn.GELU(), batch_first=True, norm_first=True,
                                   layer_norm_eps=1e-6).eval()
    layer = TransformerEncoderLayer.from_torch(m, threads=1)
    assert not layer.training and layer.threads == 1 and layer.norm_first and layer.self_attn.batch_first
    assert isinstance(layer.activation, nn.GELU) and layer.activation is not m.activation
    assert layer.dropout.p == 0.25 and layer.self_attn.dropout == 0.25 and layer.norm2.eps == 1e-6
    assert all(torch.equal(a, b) for a, b in zip(layer.state_dict().values(), m.state_dict().values()))
    x = torch.randn(2, 6, 20)
    with torch.no_grad():
        assert rel(layer(x), m.double()(x.double())) <= TOL_PER_LAYER
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(20, 5, 33, dropout=0.0), 2, norm=nn.LayerNorm(20))
    ours = TransformerEncoder.from_torch(enc)
    assert list(ours.state_dict()) == list(enc.state_dict()) and ours.norm is not enc.norm
    x = torch.randn(6, 2, 20)
    with torch.no_grad():
        assert rel(ours(x), enc.double()(x.double())) <= 2 * TOL_PER_LAYER
    with pytest.raises(ffn.Error, match="from_torch: expected an nn.TransformerEncoderLayer, got Linear"):
        TransformerEncoderLayer.from_torch(nn.Linear(2, 2))
    bad = nn.TransformerEncoderLayer(8, 2, 16)
    bad.dropout1.p = 0.5
    with pytest.raises(ffn.Error, match=r"dropout probabilities differ \(self_attn.dropout 0.1, dropout.p 0.1, "
                                        r"dropout1.p 0.5, dropout2.p 0.1\)"):
        TransformerEncoderLayer.from_torch(bad)
    bad = nn.TransformerEncoderLayer(8, 2, 16, activation=nn.Tanh())
    with pytest.raises(ffn.Error, match="activation is Tanh"):
        TransformerEncoderLayer.from_torch(bad)
    with pytest.raises(ffn.Error, match="from_torch: self_attn.in_proj_weight: expected torch.float32"):
        TransformerEncoderLayer.from_torch(nn.TransformerEncoderLayer(8, 2, 16).double())
    mixed = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2)
    mixed.layers[1].norm_first = True
    with pytest.raises(ffn.Error, match=r"layers.1: settings differ from layer 0's \(norm_first True vs False\)"):
        TransformerEncoder.from_torch(mixed)


def test_unbatched_input_and_equivalent_masks():
    torch.manual_seed(4)
    layer = TransformerEncoderLayer(12, 3, 20, dropout=0.0)
    x = torch.randn(5, 1, 12)  # [S, N, E]
    with torch.no_grad():
        assert torch.equal(layer(x[:, 0]), layer(x)[:, 0])
        pad = padding([3], 5)
        assert torch.equal(layer(x[:, 0], src_key_padding_mask=pad[0]), layer(x, src_key_padding_mask=pad)[:, 0])
        # The same masks in their other spellings give the same bits.
        xs = torch.randn(5, 3, 12)
        pad = padding([5, 2, 4], 5)
        fpad = torch.zeros(3, 5).masked_fill(pad, float("-inf"))
        assert torch.equal(layer(xs, src_key_padding_mask=fpad), layer(xs, src_key_padding_mask=pad))
        causal = layer(xs, src_mask=causal_mask(5))
        assert torch.equal(layer(xs, src_mask=nn.Transformer.generate_square_subsequent_mask(5)), causal)
        assert torch.equal(layer(xs, is_causal=True), causal)
        assert torch.equal(layer(xs, src_mask=causal_mask(5), is_causal=True), causal)
        assert not torch.equal(layer(xs), causal)
        assert torch.equal(layer(xs, src_mask=torch.zeros(5, 5, dtype=torch.bool)), layer(xs))  # masks nothing
        assert torch.equal(layer(xs, src_key_padding_mask=padding([5, 5, 5], 5)), layer(xs))
        # A fully padded sequence: zeros (PyTorch gives NaN); the others as without it.
        y = layer(xs, src_key_padding_mask=padding([5, 0, 4], 5))
        assert not y[:, 1].any() and torch.equal(y[:, 0], layer(xs[:, :1])[:, 0])


def test_dropout_is_seeded_from_torch_and_backward_follows_its_masks():
    torch.manual_seed(5)
    layer = TransformerEncoderLayer(16, 4, 24, dropout=0.3, activation="gelu", batch_first=True)
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        eval_y = layer.eval()(x)
        layer.train()
        torch.manual_seed(9)
        a = layer(x)
        torch.manual_seed(9)
        b = layer(x)
        c = layer(x)
    assert torch.equal(a, b) and not torch.equal(b, c) and not torch.equal(a, eval_y)
    layer.dropout.p = layer.dropout1.p = layer.dropout2.p = layer.self_attn.dropout = 0.0  # followed, not ignored
    with torch.no_grad():
        assert torch.equal(layer(x), eval_y)
    layer.dropout.p = layer.dropout1.p = layer.dropout2.p = layer.self_attn.dropout = 0.3
    # The gradient of the function each seed picks: autograd's directional derivative against a
    # central difference with the same masks. Tolerance 1e-2 relative: float32 rounding of the two
    # forwards (~1e-7) over the step 2h = 2e-2, plus the O(h^2) truncation of a smooth (gelu)
    # function; measured at most 5.6e-4 over 20 seeds (1.7e-5 for this one). Backward with other
    # masks (another seed's) is off by 0.11 to 4.3 over those seeds (4.3 for this one).
    v = torch.randn_like(x)
    g = torch.randn_like(x)

    def gradient(seed):
        xa = x.clone().requires_grad_(True)
        torch.manual_seed(seed)
        (layer(xa) * g).sum().backward()
        return float((xa.grad.double() * v).sum())

    def f(z):
        torch.manual_seed(11)
        with torch.no_grad():
            return float((layer(z).double() * g).sum())

    h = 1e-2
    numeric = (f(x + h * v) - f(x - h * v)) / (2 * h)
    assert abs(numeric - gradient(11)) <= 1e-2 * abs(numeric)
    assert abs(numeric - gradient(12)) > 1e-2 * abs(numeric)  # what the tolerance catches


def test_optimizer_steps_and_load_state_dict_repack():
    ours, ref = make_pair(12, 2, 20, 2, final_norm=True)
    x = torch.randn(4, 3, 12)
    opt = torch.optim.Adam(ours.parameters(), lr=1e-2)
    before = ours(x).detach()
    ours(x).pow(2).sum().backward()
    opt.step()
    after = ours(x).detach()
    assert not torch.equal(before, after)  # the step reached ffn's copy of the weights
    ref.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert rel(after, ref(x.double())) <= 2 * TOL_PER_LAYER
    # A setting changed on every layer (norm eps) is followed too.
    for layer in ours.layers:
        layer.norm1.eps = layer.norm2.eps = 0.5
    ours.norm.eps = 0.5
    assert not torch.equal(ours(x), after)


def _copies(module):
    saved = io.BytesIO()
    torch.save(module, saved)
    saved.seek(0)
    return [("deepcopy", copy.deepcopy(module)), ("pickle", pickle.loads(pickle.dumps(module))),
            ("torch.save", torch.load(saved))]


@pytest.mark.parametrize("stack", [False, True])
def test_copies_give_the_same_bits_and_are_independent(stack):
    torch.manual_seed(6)
    layer = TransformerEncoderLayer(12, 3, 20, dropout=0.2, activation=F.gelu, batch_first=True)
    module = TransformerEncoder(layer, 2, norm=nn.LayerNorm(12)) if stack else layer
    x = torch.randn(2, 5, 12)
    pad = padding([5, 3], 5)
    module(x, src_key_padding_mask=pad).sum().backward()  # packed and used before it is copied
    torch.manual_seed(7)
    expected_train = module(x, src_key_padding_mask=pad)
    expected = module.eval()(x, src_key_padding_mask=pad)
    module.train()
    for how, c in _copies(module):
        assert type(c) is type(module) and c.training, how
        torch.manual_seed(7)
        assert torch.equal(c(x, src_key_padding_mask=pad), expected_train), how
        c.eval()
        assert torch.equal(c(x, src_key_padding_mask=pad), expected), how
        opt = torch.optim.SGD(c.parameters(), lr=0.1)
        c(x).pow(2).sum().backward()
        opt.step()
        assert not torch.equal(c(x, src_key_padding_mask=pad), expected), how
        module.eval()
        assert torch.equal(module(x, src_key_padding_mask=pad), expected), how
        module.train()


def test_double_backward_raises():
    layer = TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    x = torch.randn(3, 2, 8, requires_grad=True)
    (gx,) = torch.autograd.grad(layer(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate|does not require grad"):  # an error, never zeros
        gx.pow(2).sum().backward()


S = 5


@pytest.mark.parametrize("call,match", [
    (lambda m, x: m(x.double()), "src: expected torch.float32, got torch.float64"),
    (lambda m, x: m(torch.empty(S, 2, 12, device="meta")), "on meta, but ffn runs on the CPU"),
    (lambda m, x: m(x[..., :10]), r"src: shape \[5, 2, 10\], expected \[S, N, E\] \(batch_first=False\) or "
                                  r"unbatched \[S, E\], E = d_model = 12"),
    (lambda m, x: m(x[0, 0]), r"src: shape \[12\]"),
    (lambda m, x: m(x, src_key_padding_mask=padding([5, 3], S).t()), r"src_key_padding_mask: shape \[5, 2\], "
                                                                     r"expected \[2, 5\]"),
    (lambda m, x: m(x, src_key_padding_mask=torch.tensor([[0, 0, 1, 0, 0], [0] * 5], dtype=torch.bool)),
     r"src_key_padding_mask: row 0 is 00100 \(1 = padding\); ffn supports padding at the end"),
    (lambda m, x: m(x, src_key_padding_mask=torch.tensor([[1, 0, 0, 0, 0], [0] * 5], dtype=torch.bool)),
     "row 0 is 10000"),  # left padding
    (lambda m, x: m(x, src_key_padding_mask=torch.zeros(2, S, dtype=torch.int64)), "expected a bool mask"),
    (lambda m, x: m(x, src_key_padding_mask=torch.full((2, S), -1.0)), "may hold 0 \\(token\\) and -inf"),
    (lambda m, x: m(x, src_key_padding_mask=[[False] * S] * 2), "src_key_padding_mask: expected a tensor"),
    (lambda m, x: m.layers[0](x, src_mask=causal_mask(S).t()), "src_mask: not the causal mask; ffn supports src_mask=None "
                                                     "or the causal mask"),
    (lambda m, x: m.layers[0](x, src_mask=torch.zeros(S, S).fill_diagonal_(-1.0)), "src_mask: a float mask with values"),
    (lambda m, x: m.layers[0](x, src_mask=torch.zeros(S, S, dtype=torch.bool), is_causal=True),
     r"not the causal mask \(is_causal=True\)"),
    (lambda m, x: m.layers[0](x, src_mask=causal_mask(S)[None].expand(6, S, S)), r"src_mask: shape \[6, 5, 5\], expected "
                                                                       r"\[5, 5\]"),
    (lambda m, x: m.layers[0](x, src_mask=causal_mask(S).int()), "src_mask: expected a bool or float mask, got torch.int32"),
    (lambda m, x: m(x, mask=causal_mask(S).t()), "mask: not the causal mask; ffn supports mask=None"),
    (lambda m, x: m.double()(x), "parameter layers.0.self_attn.in_proj_weight: expected torch.float32"),
    (lambda m, x: TransformerEncoderLayer(12, 5), r"nhead: expected a divisor of d_model \(12\), got 5"),
    (lambda m, x: TransformerEncoderLayer(12, 3, 0), "dim_feedforward: expected a positive int, got 0"),
    (lambda m, x: TransformerEncoderLayer(12, 3, dropout=1.5), r"dropout: expected a probability in \[0, 1\]"),
    (lambda m, x: TransformerEncoderLayer(12, 3, layer_norm_eps=0.0), "layer_norm_eps: expected a positive"),
    (lambda m, x: TransformerEncoderLayer(12, 3, activation="tanh"), "activation: expected 'relu' or 'gelu'"),
    (lambda m, x: TransformerEncoderLayer(12, 3, activation=torch.tanh), "activation is <built-in"),
    (lambda m, x: TransformerEncoderLayer(12, 3, device="meta"), "device: ffn runs on the CPU"),
    (lambda m, x: TransformerEncoderLayer(12, 3, dtype=torch.float64), "dtype: ffn's encoder computes in float32"),
    (lambda m, x: TransformerEncoder(nn.TransformerEncoderLayer(12, 3), 2),
     r"encoder_layer: expected an ffn.torch.TransformerEncoderLayer, got torch.nn.modules.transformer."
     r"TransformerEncoderLayer \(convert it with ffn.torch.TransformerEncoderLayer.from_torch\(layer\)\)"),
    (lambda m, x: TransformerEncoder(m.layers[0], 0), "num_layers: expected 1..4096, got 0"),
    (lambda m, x: TransformerEncoder(m.layers[0], 2, norm=nn.LayerNorm(12, eps=1e-6)),
     "norm: eps 1e-06 differs from the layers' layer_norm_eps 1e-05"),
    (lambda m, x: TransformerEncoder(m.layers[0], 2, norm=nn.BatchNorm1d(12)), r"norm: expected None or "
                                                                              r"nn.LayerNorm\(12\)"),
])
def test_bad_input_is_ffn_error_with_one_line(call, match):
    torch.manual_seed(8)
    m = TransformerEncoder(TransformerEncoderLayer(12, 3, 20), 2)
    x = torch.randn(S, 2, 12)
    with pytest.raises(ffn.Error, match=match) as e:
        call(m, x)
    assert isinstance(e.value, ValueError)
    assert "\n" not in str(e.value)


def test_settings_that_ffn_cannot_follow_are_refused_at_the_call():
    layer = TransformerEncoderLayer(12, 3, 20)
    x = torch.randn(S, 2, 12)
    layer.dropout1.p = 0.5  # PyTorch would use it; ffn has one p
    with pytest.raises(ffn.Error, match="TransformerEncoderLayer: dropout probabilities differ"):
        layer(x)
    layer.dropout1.p = 0.1
    layer.norm2.eps = 1e-3
    with pytest.raises(ffn.Error, match="norm1.eps 1e-05 and norm2.eps 0.001 differ"):
        layer(x)
    enc = TransformerEncoder(TransformerEncoderLayer(12, 3, 20), 2)
    enc.layers[1].activation = F.gelu
    with pytest.raises(ffn.Error, match=r"layers.1: settings differ from layer 0's \(activation 'gelu' vs 'relu'\)"):
        enc(x)
    enc.layers[1].activation = F.relu
    enc.layers[0].eval()
    with pytest.raises(ffn.Error, match="some in training mode and some not"):
        enc(x)


def test_encoder_binding_names_shapes_and_cache():
    torch.manual_seed(9)
    theirs = nn.TransformerEncoder(nn.TransformerEncoderLayer(12, 3, 20, dropout=0.0, batch_first=True), 2,
                                   norm=nn.LayerNorm(12))
    weights = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    cfg = ffn.EncoderConfig(d_model=12, heads=3, d_ff=20, layers=2, final_norm=True)
    assert pickle.loads(pickle.dumps(cfg)).__reduce__() == cfg.__reduce__()
    enc = ffn.Encoder(cfg, weights)
    got = enc.weights
    assert set(got) == set(weights)
    assert all(np.array_equal(got[k], weights[k]) for k in weights)
    x = np.random.default_rng(0).standard_normal((2, 5, 12)).astype(np.float32)
    y, cache = enc.forward(x, lengths=[5, 3], cache=True)
    assert not y[1, 3:].any() and cache.nbytes > 0
    dx, grads = enc.backward(x, np.ones_like(x), cache)
    assert set(grads) == set(weights) and all(grads[k].shape == weights[k].shape for k in weights)
    assert not dx[1, 3:].any()
    assert np.array_equal(enc.forward(x[0]), enc.forward(x[:1])[0])  # one sequence [S, d]
    other = ffn.Encoder(cfg, weights)
    for call, match in [
        (lambda: ffn.Encoder(cfg, {**weights, "layers.2.norm1.weight": weights["norm.weight"]}),
         r"unexpected tensor 'layers.2.norm1.weight'; an encoder of 2 layer\(s\) has layers.N.\{self_attn."),
        (lambda: ffn.Encoder(cfg, {k: v for k, v in weights.items() if k != "layers.1.norm2.bias"}),
         "missing tensor 'layers.1.norm2.bias'"),
        (lambda: ffn.Encoder(cfg, {**weights, "norm.bias": np.zeros(3, np.float32)}),
         r"weights\['norm.bias'\]: shape \[3\], expected \[12\]"),
        (lambda: ffn.Encoder(cfg, {**weights, "norm.bias": weights["norm.bias"].astype(np.float64)}),
         r"weights\['norm.bias'\]: expected float32, got float64"),
        (lambda: enc.forward(x[..., :8].copy()), r"x: shape \[2, 5, 8\], expected \[S, 12\] or \[B, S, 12\]"),
        (lambda: enc.forward(x, lengths=[5, 6]), "lengths: sequence 1 has length 6, expected 0..5"),
        (lambda: enc.forward(x, threads=-1), "threads"),
        (lambda: other.backward(x, np.ones_like(x), cache), "cache: from another encoder's forward"),
        (lambda: enc.backward(x[:1].copy(), np.ones_like(x[:1]), cache), r"cache: from a forward on shape \[2, 5, 12\]"),
        (lambda: enc.backward(x, np.ones_like(x[:1]), cache), r"dy: shape \[1, 5, 12\], expected x's shape"),
        (lambda: enc.forward(x.astype(">f4")), "x: expected float32 in this machine's byte order, got >f4"),
        (lambda: enc.forward(x.tobytes()), "x: expected a float32 array, got bytes"),
        (lambda: enc.backward(x, np.ones_like(x).astype(">f4"), cache), "dy: expected float32 in this machine's"),
        (lambda: ffn.Encoder(cfg, {**weights, "norm.bias": weights["norm.bias"].astype(">f4")}),
         r"weights\['norm.bias'\]: expected float32 in this machine's byte order"),
        (lambda: ffn.EncoderConfig(d_model=12, heads=5), "heads must divide d_model"),
        (lambda: ffn.EncoderConfig(norm="none"), "norm"),
    ]:
        with pytest.raises(ffn.Error, match=match) as e:
            call()
        assert "\n" not in str(e.value)


def test_the_gil_is_released_while_computing():
    torch.manual_seed(10)
    layer = TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True, threads=1)
    x = torch.randn(8, 128, 128, requires_grad=True)

    def work():
        for _ in range(3):
            layer(x).sum().backward()

    during, seconds = ticks_during(work)
    # With the GIL held through ffn's forward and backward the other thread could tick only
    # between them (PyTorch's own ops around them are short).
    assert seconds > 0.02, "the calls were too short to tell"
    assert during > 10, f"{during} ticks in {seconds:.3f} s"
