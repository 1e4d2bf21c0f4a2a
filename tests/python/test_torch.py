"""ffn.torch.FeedForward against PyTorch's own layers: forward and every
gradient (1e-5 relative, as tests/python/test_layer.py), from_torch for the
three module kinds, optimizer and state_dict round trips, copies (deepcopy,
pickle, torch.save), a 50-step training run, and bad inputs."""
import copy
import io
import pickle

import numpy as np
import pytest

import ffn

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from ffn.torch import FeedForward  # noqa: E402

TOL = 1e-5
GATE = {"swiglu": F.silu, "geglu": F.gelu, "reglu": F.relu}
PLAIN = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"), "silu": F.silu}


def rel(a, b):
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30))


class TorchFFN(nn.Module):
    """The same sublayer in plain PyTorch, with FeedForward's parameter names."""

    def __init__(self, d, f, activation, bias, norm, norm_type, eps=1e-5):
        super().__init__()
        self.activation, self.norm_place, self.norm_type, self.eps = activation, norm, norm_type, eps
        self.linear1 = nn.Linear(d, f, bias=bias)
        if activation in GATE:
            self.gate = nn.Linear(d, f, bias=bias)
        self.linear2 = nn.Linear(f, d, bias=bias)
        if norm != "none":
            self.norm = nn.LayerNorm(d, eps=eps) if norm_type == "layernorm" else None
            if self.norm is None:
                self.norm = nn.Module()
                self.norm.weight = nn.Parameter(torch.ones(d))

    def _norm(self, z):
        if self.norm_type == "layernorm":
            return self.norm(z)
        return z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm.weight

    def _ffn(self, z):
        if self.activation in GATE:
            return self.linear2(GATE[self.activation](self.gate(z)) * self.linear1(z))
        return self.linear2(PLAIN[self.activation](self.linear1(z)))

    def forward(self, x):
        if self.norm_place == "post":
            return self._norm(x + self._ffn(x))
        if self.norm_place == "pre":
            return x + self._ffn(self._norm(x))
        return self._ffn(x)


def check_same(ours, theirs, x):
    """Forward and every gradient of ours and theirs (parameters matched by name)."""
    xa = x.clone().requires_grad_(True)
    xb = x.clone().requires_grad_(True)
    ya, yb = ours(xa), theirs(xb)
    assert rel(ya, yb) <= TOL
    g = torch.randn_like(yb)
    ya.backward(g)
    yb.backward(g)
    assert rel(xa.grad, xb.grad) <= TOL
    theirs_params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert p.grad is not None, name
        assert rel(p.grad, theirs_params[name].grad) <= TOL, name


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu", "reglu"])
@pytest.mark.parametrize("norm,norm_type", [("post", "layernorm"), ("pre", "layernorm"), ("pre", "rmsnorm"),
                                            ("post", "rmsnorm"), ("none", "layernorm")])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_pytorch_forward_and_gradients(activation, norm, norm_type, bias):
    torch.manual_seed(0)
    ref = TorchFFN(12, 30, activation, bias, norm, norm_type)
    with torch.no_grad():  # non-trivial norm parameters
        for name, p in ref.named_parameters():
            if name.startswith("norm"):
                p.add_(0.1 * torch.randn_like(p))
    ours = FeedForward(12, 30, activation, bias=bias, norm=norm, norm_type=norm_type)
    assert set(ours.state_dict()) == set(ref.state_dict())
    ours.load_state_dict(ref.state_dict())
    check_same(ours, ref, torch.randn(3, 5, 12))


def test_from_torch_transformer_encoder_layer():
    torch.manual_seed(1)
    for activation in ["relu", "gelu"]:
        for norm_first in [False, True]:
            m = nn.TransformerEncoderLayer(16, 2, 40, dropout=0.0, activation=activation, norm_first=norm_first)
            ff = FeedForward.from_torch(m)
            assert ff.config.norm == ("pre" if norm_first else "post")

            class Half(nn.Module):  # the FFN half of the encoder layer, as PyTorch computes it
                def __init__(self):
                    super().__init__()
                    self.linear1, self.linear2, self.norm = m.linear1, m.linear2, m.norm2

                def forward(self, x):
                    return x + m._ff_block(m.norm2(x)) if norm_first else m.norm2(x + m._ff_block(x))

            check_same(ff, Half(), torch.randn(4, 3, 16))


def test_from_torch_sequential_and_llama_mlp():
    torch.manual_seed(2)
    for act in [nn.ReLU(), nn.GELU(), nn.GELU(approximate="tanh"), nn.SiLU()]:
        seq = nn.Sequential(nn.Linear(10, 24), act, nn.Dropout(0.1), nn.Linear(24, 10)).eval()
        ff = FeedForward.from_torch(seq)
        assert ff.config.dropout_hidden == pytest.approx(0.1) and not ff.training
        x = torch.randn(7, 10)
        assert rel(ff(x), seq(x)) <= TOL

    class LlamaMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(10, 28, bias=False)
            self.up_proj = nn.Linear(10, 28, bias=False)
            self.down_proj = nn.Linear(28, 10, bias=False)
            self.act_fn = nn.SiLU()

        def forward(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    mlp = LlamaMLP()
    ff = FeedForward.from_torch(mlp)
    assert ff.config.activation == "swiglu" and not ff.config.bias
    x = torch.randn(2, 6, 10)
    assert rel(ff(x), mlp(x)) <= TOL
    with pytest.raises(ffn.Error, match="unsupported module Conv1d"):
        FeedForward.from_torch(nn.Conv1d(3, 3, 1))
    with pytest.raises(ffn.Error, match="nn.Sequential of"):
        FeedForward.from_torch(nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 3)))


def test_optimizer_steps_and_load_state_dict_repack():
    torch.manual_seed(3)
    ff = FeedForward(8, 16, "gelu", norm="pre")
    ref = TorchFFN(8, 16, "gelu", True, "pre", "layernorm")
    ref.load_state_dict(ff.state_dict())
    opt = torch.optim.SGD(ff.parameters(), lr=0.5)
    x = torch.randn(5, 8)
    before = ff(x).detach()
    ff(x).pow(2).sum().backward()
    opt.step()
    after = ff(x).detach()
    assert not torch.equal(before, after)  # the step reached ffn's packed weights
    ref.load_state_dict(ff.state_dict())
    assert rel(after, ref(x)) <= TOL
    # load_state_dict into a module that has already run: re-packed.
    ff2 = FeedForward(8, 16, "gelu", norm="pre")
    assert not torch.equal(ff2(x), after)
    ff2.load_state_dict(ff.state_dict())
    assert torch.equal(ff2(x), after)
    # A write through .data is invisible to version counters: refresh() says so.
    with torch.no_grad():
        ff2.linear1.weight.data.mul_(2)
    ff2.refresh()
    ref.load_state_dict(ff2.state_dict())
    assert rel(ff2(x), ref(x)) <= TOL


def test_double_backward_raises_and_unsupported_activations_are_refused():
    ff = FeedForward(8, 16)
    x = torch.randn(3, 8, requires_grad=True)
    (gx,) = torch.autograd.grad(ff(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate|does not require grad"):  # an error, never zeros
        gx.pow(2).sum().backward()
    for act in (nn.LeakyReLU(), nn.ReLU6(), nn.Tanh()):
        with pytest.raises(ffn.Error, match="activation"):
            FeedForward.from_torch(nn.Sequential(nn.Linear(4, 8), act, nn.Linear(8, 4)))


def test_no_grad_inference_mode_and_dropout():
    torch.manual_seed(4)
    ff = FeedForward(8, 32, dropout=0.5)
    x = torch.randn(6, 8)
    with torch.no_grad():
        a = ff.eval()(x)
    with torch.inference_mode():
        b = ff(x)
    assert torch.equal(a, b) and not a.requires_grad
    ff.train()
    torch.manual_seed(9)
    c = ff(x)
    torch.manual_seed(9)
    d = ff(x)
    e = ff(x)
    assert torch.equal(c, d)  # the seed comes from torch's generator
    assert not torch.equal(d, e) and not torch.equal(c, a)


def test_fifty_training_steps_give_pytorchs_loss_curve():
    # A small classifier whose middle is the FFN sublayer; the same
    # initialization, data and Adam steps with PyTorch's FFN and with ours.
    # Tolerance 1e-5 relative per step: the two FFNs differ by float32 rounding
    # (~1e-7 relative) at every step; over these 50 Adam steps the losses
    # differed by at most 2.0e-7 relative (measured 2026-11-23), so 1e-5 is a
    # 50x margin, while a real difference (a wrong gradient, a missed re-pack
    # after opt.step()) moves the loss by percents within a few steps.
    def model(ff):
        torch.manual_seed(5)
        m = nn.Sequential(nn.Linear(6, 16), ff, nn.Linear(16, 3))
        return m

    torch.manual_seed(6)
    ref_ff = TorchFFN(16, 48, "gelu", True, "post", "layernorm")
    ours_ff = FeedForward(16, 48, "gelu", norm="post")
    ours_ff.load_state_dict(ref_ff.state_dict())
    start = {k: v.clone() for k, v in ref_ff.state_dict().items()}
    x = torch.randn(256, 6)
    labels = (x[:, 0] * x[:, 1] > 0).long() + (x[:, 2] > 1).long()
    curves = []
    for ff in (ref_ff, ours_ff):
        m = model(ff)
        m[1].load_state_dict(start)
        opt = torch.optim.Adam(m.parameters(), lr=1e-2)
        losses = []
        for step in range(50):
            batch = slice((step * 64) % 256, (step * 64) % 256 + 64)
            loss = F.cross_entropy(m(x[batch]), labels[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        curves.append(np.array(losses))
    ref, ours = curves
    assert ref[-1] < 0.8 * ref[0]  # it learned something
    rel_diff = np.abs(ours - ref) / np.abs(ref)
    print(f"max relative loss difference over 50 steps: {rel_diff.max():.2e}")
    assert rel_diff.max() <= 1e-5


def test_bad_inputs_are_refused_clearly():
    ff = FeedForward(8, 16)
    with pytest.raises(ffn.Error, match="expected torch.float32, got torch.float64"):
        ff(torch.randn(3, 8, dtype=torch.float64))
    with pytest.raises(ffn.Error, match="on meta, but ffn runs on the CPU"):
        ff(torch.empty(3, 8, device="meta"))
    with pytest.raises(ffn.Error, match=r"shape \[3, 7\], expected \[..., 8\]"):
        ff(torch.randn(3, 7))
    with pytest.raises(ffn.Error, match="parameter linear1.weight: expected torch.float32"):
        FeedForward(8, 16).double()(torch.randn(3, 8))
    with pytest.raises(ffn.Error, match="activation"):
        FeedForward(8, 16, activation="tanh")
    # A non-contiguous input is fine (PyTorch semantics): read through a copy.
    x = torch.randn(8, 3).t()
    assert torch.equal(ff(x), ff(x.contiguous()))


def _copies(ff):
    """ff copied each way a user copies a module: (how, copy)."""
    saved = io.BytesIO()
    torch.save(ff, saved)
    saved.seek(0)
    state = io.BytesIO()
    torch.save(ff.state_dict(), state)
    state.seek(0)
    c = ff.config
    fresh = FeedForward(c.d_model, c.d_ff, c.activation, bias=c.bias, norm=c.norm, norm_type=c.norm_type, eps=c.eps,
                        dropout_hidden=c.dropout_hidden, dropout_output=c.dropout_output)
    fresh.load_state_dict(torch.load(state))
    fresh.train(ff.training)
    return [("deepcopy", copy.deepcopy(ff)), ("pickle", pickle.loads(pickle.dumps(ff))),
            ("torch.save", torch.load(saved)), ("state_dict", fresh)]


@pytest.mark.parametrize("settings", [dict(activation="gelu", norm="pre", dropout=0.2),
                                      dict(activation="swiglu", bias=False, norm="post", norm_type="rmsnorm", eps=1e-6),
                                      dict(activation="relu", norm="none", dropout_hidden=0.1, dropout_output=0.3)])
@pytest.mark.parametrize("ran", [False, True])
def test_copies_give_the_same_bits_and_are_independent(settings, ran):
    # ran: the original has already packed its weights (the ffn.Layer a copy must not carry along).
    torch.manual_seed(10)
    ff = FeedForward(8, 20, **settings)
    with torch.no_grad():  # non-trivial norm parameters
        for name, p in ff.named_parameters():
            if name.startswith("norm"):
                p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(2, 5, 8)
    if ran:
        ff(x).sum().backward()
    ff.eval()
    expected = ff(x)
    ff.train()
    torch.manual_seed(11)
    expected_train = ff(x)  # dropout: the seed comes from torch's generator
    for how, c in _copies(ff):
        assert type(c) is FeedForward and c.training, how
        assert c.config.__reduce__() == ff.config.__reduce__(), how  # every setting
        torch.manual_seed(11)
        assert torch.equal(c(x), expected_train), how
        c.eval()
        assert torch.equal(c(x), expected), how
        assert all(p.data_ptr() != q.data_ptr() for p, q in zip(c.parameters(), ff.parameters())), how
        # Independent: a step on the copy leaves the original as it was, and the copy runs its new weights.
        c.train()
        opt = torch.optim.SGD(c.parameters(), lr=0.1)
        c(x).pow(2).sum().backward()
        opt.step()
        c.eval()
        ff.eval()
        assert not torch.equal(c(x), expected), how
        assert torch.equal(ff(x), expected), how
        ff.train()


def test_a_stack_that_deep_copies_its_layer():
    # nn.TransformerEncoder deep-copies the layer it is given, N times.
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ff = FeedForward(8, 16, "gelu", norm="pre")

        def forward(self, src, src_mask=None, src_key_padding_mask=None):
            return self.ff(src)

    torch.manual_seed(12)
    block = Block()
    x = torch.randn(4, 2, 8)
    block(x)  # packed before it is copied
    enc = nn.TransformerEncoder(block, 3)
    assert len({id(layer.ff.linear1.weight) for layer in enc.layers}) == 3
    assert torch.equal(enc(x), block(block(block(x))))
    with torch.no_grad():
        enc.layers[1].ff.linear2.bias.add_(1.0)
    assert torch.equal(enc.layers[0](x), block(x)) and not torch.equal(enc.layers[1](x), block(x))


def test_to_dtype_train_and_eval_as_a_module():
    torch.manual_seed(13)
    ff = FeedForward(8, 16, dropout=0.5)
    x = torch.randn(3, 8)
    before = ff.eval()(x)
    assert ff.to(torch.float64) is ff
    with pytest.raises(ffn.Error, match="input: expected torch.float32, got torch.float64"):
        ff(x.double())
    with pytest.raises(ffn.Error, match="parameter linear1.weight: expected torch.float32, got torch.float64"):
        ff(x)
    ff.to(torch.float32)  # float32 -> float64 -> float32 is exact: the same bits
    assert torch.equal(ff(x), before)
    assert ff.train() is ff and ff.training and not torch.equal(ff(x), before)  # dropout on
    assert not ff.eval().training and torch.equal(ff(x), before)
