"""ffn.torch: ffn's FFN sublayer, and the Transformer encoder around it, as PyTorch
modules with autograd.

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

The encoder: TransformerEncoderLayer and TransformerEncoder take the arguments
of torch.nn's (torch 1.13) and have its parameters under its state_dict names,
computed by ffn.Encoder (the C++ library's ffn::Encoder: attention, FFN and
norms, forward and backward); see their docstrings for the masks they take.

    from ffn.torch import TransformerEncoderLayer, TransformerEncoder
    layer = TransformerEncoderLayer(384, 6, 1536, dropout=0.1, batch_first=True)   # or .from_torch(m)
    enc = TransformerEncoder(layer, 6)       # deep-copies layer, as nn.TransformerEncoder does
    y = enc(x, src_key_padding_mask=pad)     # pad: [N, S] bool, True at the end of shorter rows
"""

from __future__ import annotations

import copy
import math
from typing import Optional

import torch
from torch import nn
import torch.nn.functional as F

from . import _ffn
from ._ffn import Error

__all__ = ["FeedForward", "TransformerEncoderLayer", "TransformerEncoder"]

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
            act = _activation_name(module.activation, "from_torch: TransformerEncoderLayer.activation")
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
            ff = cls(lin[0].in_features, lin[0].out_features, _activation_name(acts[0], "from_torch: activation"),
                     bias=lin[0].bias is not None, norm="none", dropout_hidden=p_hidden, dropout_output=p_output,
                     threads=threads)
            pairs = [(ff.linear1, lin[0]), (ff.linear2, lin[1])]
        elif all(hasattr(module, n) for n in ("gate_proj", "up_proj", "down_proj")):
            act = _activation_name(getattr(module, "act_fn", None), "from_torch: act_fn")
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
    """ffn's name for a PyTorch activation module or function; `what` starts the error message."""
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
    raise Error(f"{what} is {act!r}; ffn has relu, gelu, gelu_tanh and silu")


# ---- the encoder: nn.TransformerEncoderLayer / nn.TransformerEncoder on ffn.Encoder ----

# One layer's parameters, as nn.TransformerEncoderLayer names them (and ffn.Encoder
# after "layers.N.").
_LAYER_PARAMS = ("self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                 "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                 "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias")


class _EncoderFunction(torch.autograd.Function):
    """y = ffn encoder forward on x [B, S, d]; backward = ffn's backward from the forward's cache."""

    @staticmethod
    def forward(ctx, x, encoder, names, lengths, causal, training, seed, threads, *params):  # noqa: D401
        xb = x.detach().contiguous()
        y, cache = encoder.forward(xb.numpy(), lengths=lengths, causal=causal, training=training, seed=seed,
                                   threads=threads, cache=True)
        ctx.encoder, ctx.names, ctx.cache, ctx.threads = encoder, names, cache, threads
        ctx.save_for_backward(xb)  # (ffn's backward checks the shape; the version counter catches in-place edits)
        return torch.from_numpy(y)

    @staticmethod
    @torch.autograd.function.once_differentiable  # no double backward: it raises instead of giving zeros
    def backward(ctx, dy):
        (xb,) = ctx.saved_tensors
        dy = dy.detach().to(torch.float32).contiguous()
        dx, grads = ctx.encoder.backward(xb.numpy(), dy.numpy(), ctx.cache, threads=ctx.threads)
        param_grads = [torch.from_numpy(grads[n]) for n in ctx.names]
        return (torch.from_numpy(dx), None, None, None, None, None, None, None, *param_grads)


def _check_factory(device, dtype) -> None:
    """nn modules' device= and dtype=: ffn's encoder is CPU and float32."""
    if device is not None and torch.device(device).type != "cpu":
        raise Error(f"device: ffn runs on the CPU, got {device!r} (pass None or 'cpu')")
    if dtype is not None and dtype != torch.float32:
        raise Error(f"dtype: ffn's encoder computes in float32, got {dtype} (pass None or torch.float32)")


def _encoder_activation(act, what: str) -> str:
    """ffn's name for a TransformerEncoderLayer activation: the strings 'relu' and 'gelu' (as
    PyTorch), or a function or module _activation_name knows (F.relu, F.gelu, nn.GELU(), nn.SiLU(), ...)."""
    if isinstance(act, str):
        if act in ("relu", "gelu"):
            return act
        raise Error(f"{what}: expected 'relu' or 'gelu' (or F.relu, F.gelu, an nn.ReLU, nn.GELU or nn.SiLU), got {act!r}")
    return _activation_name(act, what)


def _layer_settings(layer: "TransformerEncoderLayer", what: str) -> tuple:
    """(d_model, nhead, d_ff, activation, norm_first, eps, dropout, batch_first) of a layer, read from its
    submodules as they are now: a later change (layer.dropout.p = 0, a new activation) is followed or
    refused, never ignored. ffn's layer has one eps and one dropout p: differing ones are refused."""
    attn = layer.self_attn
    act = _encoder_activation(layer.activation, f"{what}.activation")
    if layer.norm1.eps != layer.norm2.eps:
        raise Error(f"{what}: norm1.eps {layer.norm1.eps:g} and norm2.eps {layer.norm2.eps:g} differ; ffn's encoder "
                    "layer has one layer_norm_eps")
    ps = {"self_attn.dropout": attn.dropout, "dropout.p": layer.dropout.p, "dropout1.p": layer.dropout1.p,
          "dropout2.p": layer.dropout2.p}
    if len(set(ps.values())) != 1:
        raise Error(f"{what}: dropout probabilities differ ({', '.join(f'{k} {v:g}' for k, v in ps.items())}); ffn's "
                    "encoder layer has one dropout at the four sites")
    return (attn.embed_dim, attn.num_heads, layer.linear1.out_features, act, bool(layer.norm_first), layer.norm1.eps,
            float(attn.dropout), bool(attn.batch_first))


def _padding_lengths(mask, batch: int, seq: int, batched: bool, name: str):
    """The sequence lengths a key padding mask stands for (None: no padding); ffn.Error unless every
    row is a run of False (tokens) then a run of True (padding)."""
    if mask is None:
        return None
    want = [batch, seq] if batched else [seq]
    if not isinstance(mask, torch.Tensor):
        raise Error(f"{name}: expected a tensor of shape {want}, got {type(mask).__name__}")
    if list(mask.shape) != want:
        raise Error(f"{name}: shape {list(mask.shape)}, expected {want} ({'[N, S]' if batched else '[S]'}, "
                    "True at padding)")
    if mask.device.type != "cpu":
        raise Error(f"{name}: on {mask.device}, but ffn runs on the CPU (move it with .cpu())")
    if mask.dtype == torch.bool:
        pad = mask
    elif mask.is_floating_point():
        pad = mask == float("-inf")
        if not bool(((mask == 0) | pad).all()):
            raise Error(f"{name}: a float mask may hold 0 (token) and -inf (padding) only; ffn adds no other "
                        "values to the scores")
    else:
        raise Error(f"{name}: expected a bool mask (True = padding) or a float one (-inf = padding), got {mask.dtype}")
    pad = pad.reshape(batch, seq)
    lengths = seq - pad.sum(1)
    suffix = torch.arange(seq)[None, :] >= lengths[:, None]
    bad = (pad != suffix).any(1)
    if bool(bad.any()):
        b = int(bad.nonzero()[0])
        row = "".join("1" if v else "0" for v in pad[b, :40].tolist()) + ("..." if seq > 40 else "")
        raise Error(f"{name}: row {b} is {row} (1 = padding); ffn supports padding at the end of a sequence "
                    "only: each row a run of False (tokens), then a run of True (padding)")
    return [int(n) for n in lengths] if bool(pad.any()) else None


def _is_causal(mask, is_causal, seq: int, name: str) -> bool:
    """Whether the attention mask (with PyTorch's is_causal hint) is the causal mask; ffn.Error for a
    mask ffn's attention cannot apply (anything but causal, or none)."""
    supported = (f"ffn supports {name}=None or the causal mask: bool, True above the diagonal, or float, -inf "
                 "above the diagonal and 0 elsewhere (nn.Transformer.generate_square_subsequent_mask(S))")
    if mask is None:
        return bool(is_causal)
    if not isinstance(mask, torch.Tensor):
        raise Error(f"{name}: expected a tensor of shape [{seq}, {seq}], got {type(mask).__name__}")
    if list(mask.shape) != [seq, seq]:
        raise Error(f"{name}: shape {list(mask.shape)}, expected [{seq}, {seq}]; {supported}")
    if mask.device.type != "cpu":
        raise Error(f"{name}: on {mask.device}, but ffn runs on the CPU (move it with .cpu())")
    if mask.dtype == torch.bool:
        blocked = mask
    elif mask.is_floating_point():
        blocked = mask == float("-inf")
        if not bool(((mask == 0) | blocked).all()):
            raise Error(f"{name}: a float mask with values other than 0 and -inf; {supported}")
    else:
        raise Error(f"{name}: expected a bool or float mask, got {mask.dtype}; {supported}")
    if torch.equal(blocked, torch.ones(seq, seq, dtype=torch.bool).triu(1)):
        return True
    if not bool(blocked.any()) and not is_causal:
        return False  # a mask that masks nothing
    raise Error(f"{name}: not the causal mask{' (is_causal=True)' if is_causal else ''}; {supported}")


class _EncoderModule(nn.Module):
    """What TransformerEncoderLayer and TransformerEncoder share: the ffn.Encoder holding the current
    parameters (re-made when a parameter or setting changed, detected as FeedForward does), copies
    without it, and the forward."""

    def _stack(self):
        """(the layers, the final norm or None, the prefix of messages about a layer)."""
        raise NotImplementedError

    def _settings(self):
        """The stack's settings (_layer_settings of every layer, all equal), its final norm, its
        parameters named as ffn.Encoder takes them, and whether it trains."""
        layers, norm, what = self._stack()
        settings = [_layer_settings(layer, what(i)) for i, layer in enumerate(layers)]
        for i, s in enumerate(settings):
            if s != settings[0]:
                keys = ("d_model", "nhead", "dim_feedforward", "activation", "norm_first", "layer_norm_eps", "dropout",
                        "batch_first")
                diff = ", ".join(f"{k} {a!r} vs {b!r}" for k, a, b in zip(keys, s, settings[0]) if a != b)
                raise Error(f"{what(i)}: settings differ from layer 0's ({diff}); ffn's encoder runs every layer "
                            "with one setting")
        d, eps = settings[0][0], settings[0][5]
        if norm is not None:
            if not isinstance(norm, nn.LayerNorm) or not norm.elementwise_affine or tuple(norm.normalized_shape) != (d,):
                raise Error(f"norm: expected None or nn.LayerNorm({d}) with weight and bias, got {norm!r}")
            if norm.eps != eps:
                raise Error(f"norm: eps {norm.eps:g} differs from the layers' layer_norm_eps {eps:g}; ffn's encoder "
                            "has one eps")
        modes = {layer.training for layer in layers}
        if len(modes) != 1:
            raise Error("layers: some in training mode and some not; call .train() or .eval() on the whole encoder")
        named = [(f"layers.{i}.{n}", layer.get_parameter(n)) for i, layer in enumerate(layers) for n in _LAYER_PARAMS]
        if norm is not None:
            named += [("norm.weight", norm.weight), ("norm.bias", norm.bias)]
        return settings[0], len(layers), norm is not None, named, modes.pop()

    def refresh(self) -> None:
        """Re-pack the weights at the next call (after a write through `p.data`; see FeedForward.refresh)."""
        self._encoder = None

    def __getstate__(self):
        # Copies (deepcopy, pickle, torch.save, nn.TransformerEncoder's clones) leave out the
        # ffn.Encoder: a cache of the parameters that cannot be pickled; the copy makes its own.
        state = self.__dict__.copy()
        state["_encoder"] = None
        state["_stamp"] = None
        return state

    def ffn_encoder(self, prepared=None) -> _ffn.Encoder:
        """The ffn.Encoder holding the current parameters and settings (re-made when any changed)."""
        settings, num_layers, final_norm, named, _ = self._settings() if prepared is None else prepared
        for name, p in named:
            _check_tensor(p, f"{type(self).__name__} parameter {name}")
        stamp = (settings, num_layers, final_norm, tuple((p.data_ptr(), p._version) for _, p in named))
        if self._encoder is None or stamp != self._stamp:
            d, nhead, d_ff, act, norm_first, eps, p, _ = settings
            cfg = _ffn.EncoderConfig(d_model=d, heads=nhead, d_ff=d_ff, layers=num_layers, activation=act,
                                     norm="pre" if norm_first else "post", eps=eps, dropout=p, final_norm=final_norm)
            # A new Encoder, not an edit: a forward still waiting for its backward keeps its weights.
            self._encoder = _ffn.Encoder(cfg, {n: t.detach().contiguous().numpy() for n, t in named})
            self._stamp = stamp
        return self._encoder

    def _run(self, src, mask, src_key_padding_mask, is_causal, mask_name: str):
        prepared = self._settings()
        (d, _, _, _, _, _, p, batch_first), _, _, named, training = prepared
        encoder = self.ffn_encoder(prepared)
        _check_tensor(src, f"{type(self).__name__} src")
        if src.dim() not in (2, 3) or src.shape[-1] != d:
            layout = "[N, S, E]" if batch_first else "[S, N, E]"
            raise Error(f"src: shape {list(src.shape)}, expected {layout} (batch_first={batch_first}) or unbatched "
                        f"[S, E], E = d_model = {d}")
        batched = src.dim() == 3
        x = (src if batch_first else src.transpose(0, 1)) if batched else src.unsqueeze(0)  # [N, S, E]
        lengths = _padding_lengths(src_key_padding_mask, x.shape[0], x.shape[1], batched, "src_key_padding_mask")
        causal = _is_causal(mask, is_causal, x.shape[1], mask_name)
        threads = torch.get_num_threads() if self.threads is None else self.threads
        training = training and p > 0
        seed = int(torch.randint(0, 2**62, (), dtype=torch.int64)) if training else 0
        if torch.is_grad_enabled() and (src.requires_grad or any(t.requires_grad for _, t in named)):
            y = _EncoderFunction.apply(x, encoder, [n for n, _ in named], lengths, causal, training, seed, threads,
                                       *[t for _, t in named])
        else:
            y = torch.from_numpy(encoder.forward(x.detach().contiguous().numpy(), lengths=lengths, causal=causal,
                                                 training=training, seed=seed, threads=threads))
        if not batched:
            return y.squeeze(0)
        return y if batch_first else y.transpose(0, 1).contiguous()  # contiguous [S, N, E], as PyTorch's


def _check_layer_args(d_model, nhead, dim_feedforward, dropout, layer_norm_eps) -> None:
    """TransformerEncoderLayer's arguments, named as PyTorch names them (before PyTorch's own asserts)."""
    if not isinstance(d_model, int) or d_model < 1:
        raise Error(f"d_model: expected a positive int, got {d_model!r}")
    if not isinstance(nhead, int) or nhead < 1 or d_model % nhead != 0:
        raise Error(f"nhead: expected a divisor of d_model ({d_model}), got {nhead!r}")
    if not isinstance(dim_feedforward, int) or dim_feedforward < 1:
        raise Error(f"dim_feedforward: expected a positive int, got {dim_feedforward!r}")
    if not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
        raise Error(f"dropout: expected a probability in [0, 1], got {dropout!r}")
    if not isinstance(layer_norm_eps, (int, float)) or not (layer_norm_eps > 0 and math.isfinite(layer_norm_eps)):
        raise Error(f"layer_norm_eps: expected a positive number, got {layer_norm_eps!r}")


class TransformerEncoderLayer(_EncoderModule):
    """nn.TransformerEncoderLayer (torch 1.13) computed by ffn: the same arguments, submodules and
    state_dict names (self_attn.in_proj_weight, self_attn.in_proj_bias, self_attn.out_proj.*,
    linear1.*, linear2.*, norm1.*, norm2.*) and, for a given torch.manual_seed, the same initial
    values; forward and backward run in ffn's C++ encoder.

    Args as PyTorch's: d_model, nhead, dim_feedforward, dropout (one p, used at PyTorch's four sites),
    activation ('relu', 'gelu', F.relu, F.gelu, or an nn.ReLU/GELU/SiLU module), layer_norm_eps,
    batch_first, norm_first; device and dtype only None, 'cpu', torch.float32. threads: threads ffn
    uses; None follows torch.get_num_threads().

    forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False):
      src: [S, N, E] ([N, S, E] with batch_first) or unbatched [S, E], float32 on the CPU.
      src_key_padding_mask: [N, S] ([S] unbatched), bool (True = padding) or float (-inf = padding),
        each row tokens then padding (suffix padding: ffn takes sequence lengths).
      src_mask: None or the causal mask ([S, S], bool True above the diagonal, or float -inf there
        and 0 elsewhere, as nn.Transformer.generate_square_subsequent_mask gives); is_causal=True
        alone means the same. Any other mask is refused with ffn.Error.
    Differences from PyTorch: outputs at padding positions are zeros (PyTorch's slow path computes
    values there from the valid keys; its nested-tensor fast path returns zeros too), and they do not
    depend on any input, so no gradient flows from them; a fully padded sequence gives zeros (PyTorch:
    NaN). Dropout masks come from ffn's Philox generator seeded from torch's (as FeedForward's).
    Deep-copies, pickles and goes through torch.save/torch.load like any nn.Module.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation=F.relu, layer_norm_eps: float = 1e-5, batch_first: bool = False, norm_first: bool = False,
                 device=None, dtype=None, threads: Optional[int] = None):
        super().__init__()
        _check_factory(device, dtype)
        _check_layer_args(d_model, nhead, dim_feedforward, dropout, layer_norm_eps)
        act = _encoder_activation(activation, "activation")
        # The library's own checks of the rest (sizes up to 2^24), before any parameter is made.
        _ffn.EncoderConfig(d_model=d_model, heads=nhead, d_ff=dim_feedforward, activation=act, eps=layer_norm_eps,
                           dropout=dropout)
        # Made in PyTorch's order, so a seed gives PyTorch's initial values.
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm_first = norm_first
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = {"relu": F.relu, "gelu": F.gelu}[activation] if isinstance(activation, str) else activation
        self.threads = threads
        self._encoder = None
        self._stamp = None

    def _stack(self):
        return [self], None, lambda i: "TransformerEncoderLayer"

    def forward(self, src: torch.Tensor, src_mask: Optional[torch.Tensor] = None,
                src_key_padding_mask: Optional[torch.Tensor] = None, is_causal: bool = False) -> torch.Tensor:
        return self._run(src, src_mask, src_key_padding_mask, is_causal, "src_mask")

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer, threads: Optional[int] = None) -> "TransformerEncoderLayer":
        """The equivalent layer, with a copy of the parameters of an nn.TransformerEncoderLayer."""
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise Error(f"from_torch: expected an nn.TransformerEncoderLayer, got {type(layer).__name__}")
        attn = layer.self_attn
        if (not attn._qkv_same_embed_dim or attn.in_proj_bias is None or attn.out_proj.bias is None
                or attn.bias_k is not None or attn.add_zero_attn):
            raise Error("from_torch: self_attn must be plain self-attention as TransformerEncoderLayer makes it "
                        "(in_proj_weight and biases; no kdim/vdim, bias=False, add_bias_kv or add_zero_attn)")
        for name in ("linear1", "linear2"):
            if getattr(layer, name).bias is None:
                raise Error(f"from_torch: {name} has no bias; ffn's encoder layer has every bias")
        for name in ("norm1", "norm2"):
            norm = getattr(layer, name)
            if not isinstance(norm, nn.LayerNorm) or not norm.elementwise_affine or getattr(norm, "bias", 0) is None:
                raise Error(f"from_torch: {name} is {norm!r}; ffn's encoder layer has LayerNorms with weight and bias")
        for name, p in layer.named_parameters():
            _check_tensor(p, f"from_torch: {name}")
        act = copy.deepcopy(layer.activation) if isinstance(layer.activation, nn.Module) else layer.activation
        d, nhead, d_ff, _, norm_first, eps, p, batch_first = _layer_settings(layer, "from_torch")
        out = cls(d, nhead, d_ff, p, act, eps, batch_first, norm_first, threads=threads)
        out.load_state_dict(layer.state_dict())
        out.train(layer.training)
        return out


class TransformerEncoder(_EncoderModule):
    """nn.TransformerEncoder (torch 1.13) computed by ffn: num_layers deep copies of encoder_layer (an
    ffn.torch.TransformerEncoderLayer; convert PyTorch's with its from_torch) and an optional final
    norm (nn.LayerNorm(d_model) with the layers' eps), state_dict names layers.N.* and norm.*. The
    whole stack runs in one call of ffn's encoder, so every layer must keep the same settings.
    enable_nested_tensor and mask_check are accepted and kept, without effect (padding is never
    computed anyway). threads: threads ffn uses; None follows torch.get_num_threads().

    forward(src, mask=None, src_key_padding_mask=None, is_causal=None): as
    TransformerEncoderLayer.forward (mask is its src_mask); outputs at padding positions are zeros.
    """

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm: Optional[nn.Module] = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True, threads: Optional[int] = None):
        super().__init__()
        if not isinstance(encoder_layer, TransformerEncoderLayer):
            hint = (" (convert it with ffn.torch.TransformerEncoderLayer.from_torch(layer))"
                    if isinstance(encoder_layer, nn.TransformerEncoderLayer) else "")
            raise Error(f"encoder_layer: expected an ffn.torch.TransformerEncoderLayer, got "
                        f"{type(encoder_layer).__module__}.{type(encoder_layer).__name__}{hint}")
        if not isinstance(num_layers, int) or not 1 <= num_layers <= 4096:
            raise Error(f"num_layers: expected 1..4096, got {num_layers!r}")
        self.layers = nn.ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check
        self.threads = threads
        self._encoder = None
        self._stamp = None
        self._settings()  # a norm ffn cannot compute is refused now, not at the first call

    def _stack(self):
        return list(self.layers), self.norm, lambda i: f"layers.{i}"

    def forward(self, src: torch.Tensor, mask: Optional[torch.Tensor] = None,
                src_key_padding_mask: Optional[torch.Tensor] = None, is_causal: Optional[bool] = None) -> torch.Tensor:
        return self._run(src, mask, src_key_padding_mask, bool(is_causal), "mask")

    @classmethod
    def from_torch(cls, encoder: nn.TransformerEncoder, threads: Optional[int] = None) -> "TransformerEncoder":
        """The equivalent encoder, with a copy of the parameters of an nn.TransformerEncoder."""
        if not isinstance(encoder, nn.TransformerEncoder):
            raise Error(f"from_torch: expected an nn.TransformerEncoder, got {type(encoder).__name__}")
        for name, p in encoder.named_parameters():
            _check_tensor(p, f"from_torch: {name}")
        layers = [TransformerEncoderLayer.from_torch(layer) for layer in encoder.layers]
        out = cls(layers[0], len(layers), norm=copy.deepcopy(encoder.norm), threads=threads,
                  enable_nested_tensor=getattr(encoder, "enable_nested_tensor", True),
                  mask_check=getattr(encoder, "mask_check", True))
        out.layers = nn.ModuleList(layers)
        out._settings()  # layers whose settings differ are refused now
        out.train(encoder.training)
        return out
