"""ffn.torch: ffn's FFN sublayer as a PyTorch module with autograd.

    from ffn.torch import FeedForward
    ff = FeedForward(512, 2048, activation="gelu", norm="pre")   # or FeedForward.from_torch(m)
    y = ff(x)                  # x: float32 CPU tensor [..., d_model]
    y.sum().backward()         # fills ff.linear1.weight.grad, ... as PyTorch's layers would

The parameters are ordinary nn.Parameters in ordinary submodules, named as
ffn's weight files name them (linear1, gate, linear2, norm), so optimizers,
state_dict and load_state_dict work as usual and a state_dict saved as
safetensors loads in `ffn run` and ffn.Layer.load. Forward and backward run in
ffn's C++ kernels; the weights are re-packed when a parameter changed (an
optimizer step, load_state_dict), detected by the tensors' version counters.
A write through `p.data` bypasses those counters: call `refresh()` after one.
Backward is once-differentiable (create_graph=True through it raises).
The module deep-copies, pickles and goes through torch.save/torch.load like any
nn.Module (the copy re-packs its own parameters at its first call).

Dropout (training mode) draws its masks from ffn's Philox generator keyed by a
seed taken from PyTorch's generator at each call (so torch.manual_seed makes
runs repeatable); the masks differ from nn.Dropout's, the distribution does
not. CPU and float32 only: other devices and dtypes are refused with
ffn.Error (a ValueError).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn
import torch.nn.functional as F

from . import _ffn
from ._ffn import Error

__all__ = ["FeedForward"]

_GATED = ("swiglu", "geglu", "reglu")


class RMSNorm(nn.Module):
    """The RMSNorm parameters (gamma) of a FeedForward with norm_type="rmsnorm"; ffn computes it."""

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # the reference, for users who call it alone
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class _Function(torch.autograd.Function):
    """y = ffn forward; backward = ffn backward from the forward's cache."""

    @staticmethod
    def forward(ctx, x, layer, names, training, seed, threads, *params):  # noqa: D401
        x2 = x.detach().contiguous().reshape(-1, x.shape[-1])
        y, cache = layer.forward(x2.numpy(), training=training, seed=seed, threads=threads, cache=True)
        ctx.layer, ctx.names, ctx.cache, ctx.threads = layer, names, cache, threads
        ctx.save_for_backward(x2)  # ffn's backward reads x again
        ctx.x_shape = x.shape
        return torch.from_numpy(y).reshape(x.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable  # no double backward: it raises instead of giving zeros
    def backward(ctx, dy):
        dy2 = dy.detach().to(torch.float32).contiguous().reshape(-1, ctx.x_shape[-1])
        (x2,) = ctx.saved_tensors
        dx, grads = ctx.layer.backward(x2.numpy(), dy2.numpy(), cache=ctx.cache, threads=ctx.threads)
        param_grads = [torch.from_numpy(grads[n]) for n in ctx.names]
        return (torch.from_numpy(dx).reshape(ctx.x_shape), None, None, None, None, None, *param_grads)


def _check_tensor(t: torch.Tensor, what: str) -> None:
    if t.device.type != "cpu":
        raise Error(f"{what}: on {t.device}, but ffn runs on the CPU (move it with .cpu())")
    if t.dtype != torch.float32:
        raise Error(f"{what}: expected torch.float32, got {t.dtype} (convert with .float())")


class FeedForward(nn.Module):
    """The FFN sublayer, computed by ffn: post-LN Norm(x + Dropout(FFN(x))) (the paper), pre-LN
    x + Dropout(FFN(Norm(x))) or bare Dropout(FFN(x)).

    Args:
        d_model, d_ff: widths (d_model -> d_ff -> d_model).
        activation: relu, gelu, gelu_tanh, silu, or gated swiglu, geglu, reglu.
        bias: biases on the linear maps (False: LLaMA style).
        norm: post, pre or none; norm_type: layernorm or rmsnorm; eps.
        dropout: p after the activation and after W2 (training mode);
            dropout_hidden / dropout_output set one site each (override dropout there).
        threads: threads ffn uses; None follows torch.get_num_threads().
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", bias: bool = True, norm: str = "post",
                 norm_type: str = "layernorm", eps: float = 1e-5, dropout: float = 0.0,
                 dropout_hidden: Optional[float] = None, dropout_output: Optional[float] = None,
                 threads: Optional[int] = None):
        super().__init__()
        p_hidden = dropout if dropout_hidden is None else dropout_hidden
        p_output = dropout if dropout_output is None else dropout_output
        # Validates every setting with the library's own messages.
        self.config = _ffn.Config(d_model=d_model, d_ff=d_ff, activation=activation, bias=bias, norm=norm,
                                  norm_type=norm_type, eps=eps, dropout_hidden=p_hidden, dropout_output=p_output)
        self.threads = threads
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        if activation in _GATED:
            self.gate = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        if norm != "none":
            self.norm = nn.LayerNorm(d_model, eps=eps) if norm_type == "layernorm" else RMSNorm(d_model, eps)
        self._layer = None
        self._stamp = None

    def __getstate__(self):
        # What copy.deepcopy, pickle and torch.save store: the module without its
        # packed ffn.Layer, a cache of the parameters that cannot be pickled and
        # that the copy re-packs from its own parameters at its first call.
        # (config pickles itself: ffn.Config has __getstate__.)
        state = self.__dict__.copy()
        state["_layer"] = None
        state["_stamp"] = None
        return state

    def extra_repr(self) -> str:
        c = self.config
        return (f"activation={c.activation!r}, norm={c.norm!r}, norm_type={c.norm_type!r}, eps={c.eps:g}, "
                f"dropout_hidden={c.dropout_hidden:g}, dropout_output={c.dropout_output:g}")

    def _named_params(self):
        """(ffn name, parameter) in ffn's order; the names are the state_dict's."""
        out = [("linear1.weight", self.linear1.weight)]
        if self.linear1.bias is not None:
            out.append(("linear1.bias", self.linear1.bias))
        if hasattr(self, "gate"):
            out.append(("gate.weight", self.gate.weight))
            if self.gate.bias is not None:
                out.append(("gate.bias", self.gate.bias))
        out.append(("linear2.weight", self.linear2.weight))
        if self.linear2.bias is not None:
            out.append(("linear2.bias", self.linear2.bias))
        if hasattr(self, "norm"):
            out.append(("norm.weight", self.norm.weight))
            if getattr(self.norm, "bias", None) is not None:
                out.append(("norm.bias", self.norm.bias))
        return out

    def refresh(self) -> None:
        """Re-pack the weights at the next call. Needed only after writing a parameter
        through `.data` (p.data.copy_(...)), which PyTorch does not count as a change;
        optimizer steps and load_state_dict are detected by themselves."""
        self._layer = None

    def ffn_layer(self, named=None) -> _ffn.Layer:
        """The ffn.Layer holding the current parameters (re-packed when any changed)."""
        named = self._named_params() if named is None else named
        for name, p in named:
            _check_tensor(p, f"FeedForward parameter {name}")
        stamp = tuple((p.data_ptr(), p._version) for _, p in named)
        if self._layer is None or stamp != self._stamp:
            # A new Layer (not set_weights): a forward still waiting for its
            # backward keeps the weights it ran with.
            weights = {name: p.detach().contiguous().numpy() for name, p in named}
            self._layer = _ffn.Layer(self.config, weights)
            self._stamp = stamp
        return self._layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_tensor(x, "FeedForward input")
        d = self.config.d_model
        if x.dim() < 1 or x.shape[-1] != d:
            raise Error(f"FeedForward input: shape {list(x.shape)}, expected [..., {d}] (d_model {d})")
        named = self._named_params()
        layer = self.ffn_layer(named)
        threads = torch.get_num_threads() if self.threads is None else self.threads
        training = self.training and (self.config.dropout_hidden > 0 or self.config.dropout_output > 0)
        seed = int(torch.randint(0, 2**62, (), dtype=torch.int64)) if training else 0
        if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for _, p in named)):
            return _Function.apply(x, layer, [n for n, _ in named], training, seed, threads, *[p for _, p in named])
        x2 = x.detach().contiguous().reshape(-1, d)
        y = layer.forward(x2.numpy(), training=training, seed=seed, threads=threads)
        return torch.from_numpy(y).reshape(x.shape)

    @classmethod
    def from_torch(cls, module: nn.Module, threads: Optional[int] = None) -> "FeedForward":
        """The equivalent FeedForward, with a copy of the module's parameters:
        - nn.Sequential(Linear, act[, Dropout], Linear[, Dropout]), act ReLU, GELU or SiLU (norm none);
        - nn.TransformerEncoderLayer: its FFN half (linear1, activation, dropout, linear2, dropout2,
          norm2; post- or pre-LN from norm_first);
        - a LLaMA-style MLP with gate_proj, up_proj, down_proj and act_fn SiLU (swiglu), GELU (geglu)
          or ReLU (reglu), norm none.
        """
        if isinstance(module, nn.TransformerEncoderLayer):
            act = _activation_name(module.activation, "TransformerEncoderLayer.activation")
            if not module.norm2.elementwise_affine:
                raise Error("from_torch: norm2 has no weight and bias (elementwise_affine=False); ffn's norm has them")
            ff = cls(module.linear1.in_features, module.linear1.out_features, act,
                     bias=module.linear1.bias is not None, norm="pre" if module.norm_first else "post",
                     eps=module.norm2.eps, dropout_hidden=module.dropout.p, dropout_output=module.dropout2.p,
                     threads=threads)
            pairs = [(ff.linear1, module.linear1), (ff.linear2, module.linear2), (ff.norm, module.norm2)]
        elif isinstance(module, nn.Sequential):
            layers = list(module)
            kinds = [type(m).__name__ for m in layers]
            lin = [m for m in layers if isinstance(m, nn.Linear)]
            acts = [m for m in layers if not isinstance(m, (nn.Linear, nn.Dropout))]
            ok = (len(lin) == 2 and len(acts) == 1 and isinstance(layers[0], nn.Linear)
                  and layers.index(lin[1]) > layers.index(acts[0]) > 0)
            if not ok:
                raise Error(f"from_torch: nn.Sequential of {kinds}; expected Linear, activation[, Dropout], "
                            "Linear[, Dropout]")
            drops = [m for m in layers if isinstance(m, nn.Dropout)]
            i2 = layers.index(lin[1])
            p_hidden = sum(m.p for m in layers[:i2] if isinstance(m, nn.Dropout))
            p_output = sum(m.p for m in layers[i2:] if isinstance(m, nn.Dropout))
            if len(drops) > 2:
                raise Error(f"from_torch: nn.Sequential of {kinds}; at most one Dropout before and one after the "
                            "second Linear")
            ff = cls(lin[0].in_features, lin[0].out_features, _activation_name(acts[0], "activation"),
                     bias=lin[0].bias is not None, norm="none", dropout_hidden=p_hidden, dropout_output=p_output,
                     threads=threads)
            pairs = [(ff.linear1, lin[0]), (ff.linear2, lin[1])]
        elif all(hasattr(module, n) for n in ("gate_proj", "up_proj", "down_proj")):
            act = _activation_name(getattr(module, "act_fn", None), "act_fn")
            gated = {"silu": "swiglu", "gelu": "geglu", "relu": "reglu"}.get(act)
            if gated is None:
                raise Error(f"from_torch: act_fn is {act}; a gated MLP needs SiLU, GELU (erf) or ReLU")
            ff = cls(module.up_proj.in_features, module.up_proj.out_features, gated,
                     bias=module.up_proj.bias is not None, norm="none", threads=threads)
            pairs = [(ff.linear1, module.up_proj), (ff.gate, module.gate_proj), (ff.linear2, module.down_proj)]
        else:
            raise Error(f"from_torch: unsupported module {type(module).__name__}; expected nn.Sequential(Linear, "
                        "act, Linear), nn.TransformerEncoderLayer or a LLaMA-style MLP (gate_proj, up_proj, "
                        "down_proj)")
        with torch.no_grad():
            for mine, theirs in pairs:
                for name, p in mine.named_parameters(recurse=False):
                    src = getattr(theirs, name)
                    _check_tensor(src, f"from_torch: {type(theirs).__name__}.{name}")
                    if src.shape != p.shape:
                        raise Error(f"from_torch: {type(theirs).__name__}.{name} has shape {list(src.shape)}, "
                                    f"expected {list(p.shape)}")
                    p.copy_(src)
        ff.train(module.training)
        return ff


def _activation_name(act, what: str) -> str:
    """ffn's name for a PyTorch activation module or function."""
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu:
        return "gelu"
    if isinstance(act, nn.GELU):
        return "gelu_tanh" if getattr(act, "approximate", "none") == "tanh" else "gelu"
    if act is F.silu or isinstance(act, nn.SiLU):
        return "silu"
    # Hugging Face transformers' own activation classes, by exact name.
    hf = {"SiLUActivation": "silu", "GELUActivation": "gelu", "NewGELUActivation": "gelu_tanh",
          "GELUTanh": "gelu_tanh", "PytorchGELUTanh": "gelu_tanh"}
    if type(act).__name__ in hf:
        return hf[type(act).__name__]
    raise Error(f"from_torch: {what} is {act!r}; ffn has relu, gelu, gelu_tanh and silu")
