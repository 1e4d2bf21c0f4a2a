"""ffn.torch: ffn's FFN sublayer, and the Transformer encoder and decoder around it, as
PyTorch modules with autograd.

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

The decoder: TransformerDecoderLayer and TransformerDecoder, the same for nn.TransformerDecoderLayer
and nn.TransformerDecoder on ffn.Decoder (self-attention, cross-attention to the memory, FFN;
gradients of the target, the memory and every parameter):

    from ffn.torch import TransformerDecoderLayer, TransformerDecoder
    dec = TransformerDecoder(TransformerDecoderLayer(384, 6, 1536, batch_first=True), 6)   # or .from_torch(m)
    y = dec(tgt, memory, tgt_mask=nn.Transformer.generate_square_subsequent_mask(T),
            tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=memory_pad)
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

__all__ = ["FeedForward", "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
           "TransformerDecoder"]

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


# ---- the encoder and decoder: nn.TransformerEncoder(Layer) on ffn.Encoder, nn.TransformerDecoder(Layer) on ffn.Decoder


class _Spec:
    """What differs between the encoder's and the decoder's layers: the word for messages, the
    attention submodules, norms and dropouts of one layer, its parameters as PyTorch names them
    (and ffn.Encoder / ffn.Decoder after "layers.N."), PyTorch's layer class."""

    def __init__(self, kind, attentions, norms, dropouts, params, torch_layer):
        self.kind, self.attentions, self.norms, self.dropouts = kind, attentions, norms, dropouts
        self.params, self.torch_layer = params, torch_layer


def _attention_params(name):
    return tuple(f"{name}.{p}" for p in ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"))


_ENCODER = _Spec("encoder", ("self_attn",), ("norm1", "norm2"), ("dropout", "dropout1", "dropout2"),
                 _attention_params("self_attn") + ("linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                                                   "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"),
                 nn.TransformerEncoderLayer)
_DECODER = _Spec("decoder", ("self_attn", "multihead_attn"), ("norm1", "norm2", "norm3"),
                 ("dropout", "dropout1", "dropout2", "dropout3"),
                 _attention_params("self_attn") + _attention_params("multihead_attn")
                 + ("linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight", "norm1.bias",
                    "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias"),
                 nn.TransformerDecoderLayer)


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


class _DecoderFunction(torch.autograd.Function):
    """y = ffn decoder forward on x [B, T, d] and memory [B, S, d]; backward = ffn's backward (dx,
    dmemory and the parameters' gradients) from the forward's cache."""

    @staticmethod
    def forward(ctx, x, memory, decoder, names, lengths, memory_lengths, causal, training, seed, threads,
                *params):  # noqa: D401
        xb, mb = x.detach().contiguous(), memory.detach().contiguous()
        y, cache = decoder.forward(xb.numpy(), mb.numpy(), lengths=lengths, memory_lengths=memory_lengths,
                                   causal=causal, training=training, seed=seed, threads=threads, cache=True)
        ctx.decoder, ctx.names, ctx.cache, ctx.threads = decoder, names, cache, threads
        ctx.save_for_backward(xb, mb)  # ffn's backward reads the memory again
        return torch.from_numpy(y)

    @staticmethod
    @torch.autograd.function.once_differentiable  # no double backward: it raises instead of giving zeros
    def backward(ctx, dy):
        xb, mb = ctx.saved_tensors
        dy = dy.detach().to(torch.float32).contiguous()
        dx, dmemory, grads = ctx.decoder.backward(xb.numpy(), mb.numpy(), dy.numpy(), ctx.cache, threads=ctx.threads)
        param_grads = [torch.from_numpy(grads[n]) for n in ctx.names]
        return (torch.from_numpy(dx), torch.from_numpy(dmemory), None, None, None, None, None, None, None, None,
                *param_grads)


def _check_factory(device, dtype, kind: str = "encoder") -> None:
    """nn modules' device= and dtype=: ffn's encoder and decoder are CPU and float32."""
    if device is not None and torch.device(device).type != "cpu":
        raise Error(f"device: ffn runs on the CPU, got {device!r} (pass None or 'cpu')")
    if dtype is not None and dtype != torch.float32:
        raise Error(f"dtype: ffn's {kind} computes in float32, got {dtype} (pass None or torch.float32)")


def _encoder_activation(act, what: str) -> str:
    """ffn's name for a TransformerEncoderLayer (or DecoderLayer) activation: the strings 'relu' and
    'gelu' (as PyTorch), or a function or module _activation_name knows (F.relu, F.gelu, nn.GELU(), ...)."""
    if isinstance(act, str):
        if act in ("relu", "gelu"):
            return act
        raise Error(f"{what}: expected 'relu' or 'gelu' (or F.relu, F.gelu, an nn.ReLU, nn.GELU or nn.SiLU), got {act!r}")
    return _activation_name(act, what)


_SITES = {4: "four", 6: "six"}


def _layer_settings(layer, what: str, spec: _Spec) -> tuple:
    """(d_model, nhead, d_ff, activation, norm_first, eps, dropout, batch_first) of an encoder or decoder
    layer (ours or PyTorch's), read from its submodules as they are now: a later change (layer.dropout.p
    = 0, a new activation) is followed or refused, never ignored. ffn's layer has one eps and one dropout
    p: differing ones are refused."""
    attn = getattr(layer, spec.attentions[0])
    act = _encoder_activation(layer.activation, f"{what}.activation")
    eps = [f"{n}.eps {getattr(layer, n).eps:g}" for n in spec.norms]
    if len({getattr(layer, n).eps for n in spec.norms}) != 1:
        raise Error(f"{what}: {', '.join(eps[:-1])} and {eps[-1]} differ; ffn's {spec.kind} layer has one "
                    "layer_norm_eps")
    ps = {f"{n}.dropout": getattr(layer, n).dropout for n in spec.attentions}
    ps.update({f"{n}.p": getattr(layer, n).p for n in spec.dropouts})
    if len(set(ps.values())) != 1:
        raise Error(f"{what}: dropout probabilities differ ({', '.join(f'{k} {v:g}' for k, v in ps.items())}); ffn's "
                    f"{spec.kind} layer has one dropout at the {_SITES.get(len(ps), len(ps))} sites")
    for name in spec.attentions[1:]:
        other = getattr(layer, name)
        mine, theirs = (attn.embed_dim, attn.num_heads, attn.batch_first), (other.embed_dim, other.num_heads,
                                                                           other.batch_first)
        if mine != theirs:
            raise Error(f"{what}: {name} has embed_dim, num_heads, batch_first {theirs}, {spec.attentions[0]} {mine}; "
                        f"ffn's {spec.kind} layer has one setting")
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


def _blocked(mask, rows: int, cols: int, name: str, supported: str) -> torch.Tensor:
    """The positions an attention mask [rows, cols] blocks (bool True, or float -inf; 0 elsewhere);
    ffn.Error for anything else, ending with `supported`."""
    if not isinstance(mask, torch.Tensor):
        raise Error(f"{name}: expected a tensor of shape [{rows}, {cols}], got {type(mask).__name__}")
    if list(mask.shape) != [rows, cols]:
        raise Error(f"{name}: shape {list(mask.shape)}, expected [{rows}, {cols}]; {supported}")
    if mask.device.type != "cpu":
        raise Error(f"{name}: on {mask.device}, but ffn runs on the CPU (move it with .cpu())")
    if mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point():
        blocked = mask == float("-inf")
        if not bool(((mask == 0) | blocked).all()):
            raise Error(f"{name}: a float mask with values other than 0 and -inf; {supported}")
        return blocked
    raise Error(f"{name}: expected a bool or float mask, got {mask.dtype}; {supported}")


def _is_causal(mask, is_causal, seq: int, name: str) -> bool:
    """Whether the attention mask (with PyTorch's is_causal hint) is the causal mask; ffn.Error for a
    mask ffn's attention cannot apply (anything but causal, or none)."""
    supported = (f"ffn supports {name}=None or the causal mask: bool, True above the diagonal, or float, -inf "
                 "above the diagonal and 0 elsewhere (nn.Transformer.generate_square_subsequent_mask(S))")
    if mask is None:
        return bool(is_causal)
    blocked = _blocked(mask, seq, seq, name, supported)
    if torch.equal(blocked, torch.ones(seq, seq, dtype=torch.bool).triu(1)):
        return True
    if not bool(blocked.any()) and not is_causal:
        return False  # a mask that masks nothing
    raise Error(f"{name}: not the causal mask{' (is_causal=True)' if is_causal else ''}; {supported}")


def _check_memory_mask(mask, is_causal, tgt_len: int, memory_len: int) -> None:
    """ffn's cross-attention sees every valid memory position: memory_mask None (or one that masks
    nothing), memory_is_causal False; ffn.Error otherwise."""
    supported = ("ffn supports memory_mask=None only (every target position attends to every memory position "
                 "that is not padding; give padding as memory_key_padding_mask)")
    if is_causal:
        raise Error(f"memory_is_causal: True, but ffn's cross-attention is not causal; {supported}")
    if mask is not None and bool(_blocked(mask, tgt_len, memory_len, "memory_mask", supported).any()):
        raise Error(f"memory_mask: masks some memory positions; {supported}")


class _StackModule(nn.Module):
    """What the encoder's and decoder's layers and stacks share: the ffn.Encoder or ffn.Decoder holding
    the current parameters (re-made when a parameter or setting changed, detected as FeedForward does)
    and copies without it. Subclasses set _SPEC, _FFN (the ffn class) and _HELD (the attribute holding
    one)."""

    _SPEC: _Spec
    _FFN: type
    _HELD: str

    def _stack(self):
        """(the layers, the final norm or None, the prefix of messages about a layer)."""
        raise NotImplementedError

    def _settings(self):
        """The stack's settings (_layer_settings of every layer, all equal), its final norm, its
        parameters named as ffn.Encoder / ffn.Decoder take them, and whether it trains."""
        spec = self._SPEC
        layers, norm, what = self._stack()
        settings = [_layer_settings(layer, what(i), spec) for i, layer in enumerate(layers)]
        for i, s in enumerate(settings):
            if s != settings[0]:
                keys = ("d_model", "nhead", "dim_feedforward", "activation", "norm_first", "layer_norm_eps", "dropout",
                        "batch_first")
                diff = ", ".join(f"{k} {a!r} vs {b!r}" for k, a, b in zip(keys, s, settings[0]) if a != b)
                raise Error(f"{what(i)}: settings differ from layer 0's ({diff}); ffn's {spec.kind} runs every layer "
                            "with one setting")
        d, eps = settings[0][0], settings[0][5]
        if norm is not None:
            if not isinstance(norm, nn.LayerNorm) or not norm.elementwise_affine or tuple(norm.normalized_shape) != (d,):
                raise Error(f"norm: expected None or nn.LayerNorm({d}) with weight and bias, got {norm!r}")
            if norm.eps != eps:
                raise Error(f"norm: eps {norm.eps:g} differs from the layers' layer_norm_eps {eps:g}; ffn's "
                            f"{spec.kind} has one eps")
        modes = {layer.training for layer in layers}
        if len(modes) != 1:
            raise Error(f"layers: some in training mode and some not; call .train() or .eval() on the whole "
                        f"{spec.kind}")
        named = [(f"layers.{i}.{n}", layer.get_parameter(n)) for i, layer in enumerate(layers) for n in spec.params]
        if norm is not None:
            named += [("norm.weight", norm.weight), ("norm.bias", norm.bias)]
        return settings[0], len(layers), norm is not None, named, modes.pop()

    def refresh(self) -> None:
        """Re-pack the weights at the next call (after a write through `p.data`; see FeedForward.refresh)."""
        setattr(self, self._HELD, None)

    def __getstate__(self):
        # Copies (deepcopy, pickle, torch.save, nn.TransformerEncoder's clones) leave out the
        # ffn.Encoder / ffn.Decoder: a cache of the parameters that cannot be pickled; the copy makes its own.
        state = self.__dict__.copy()
        state[self._HELD] = None
        state["_stamp"] = None
        return state

    def _held(self, prepared):
        """The ffn object holding the current parameters and settings (re-made when any changed)."""
        settings, num_layers, final_norm, named, _ = prepared
        for name, p in named:
            _check_tensor(p, f"{type(self).__name__} parameter {name}")
        stamp = (settings, num_layers, final_norm, tuple((p.data_ptr(), p._version) for _, p in named))
        held = getattr(self, self._HELD)
        if held is None or stamp != self._stamp:
            d, nhead, d_ff, act, norm_first, eps, p, _ = settings
            cfg = _ffn.EncoderConfig(d_model=d, heads=nhead, d_ff=d_ff, layers=num_layers, activation=act,
                                     norm="pre" if norm_first else "post", eps=eps, dropout=p, final_norm=final_norm)
            # A new object, not an edit: a forward still waiting for its backward keeps its weights.
            held = type(self)._FFN(cfg, {n: t.detach().contiguous().numpy() for n, t in named})
            setattr(self, self._HELD, held)
            self._stamp = stamp
        return held

    @classmethod
    def _from_torch_layer(cls, layer, threads):
        """The equivalent layer of our class, with a copy of the parameters of PyTorch's."""
        spec = cls._SPEC
        torch_name = spec.torch_layer.__name__
        if not isinstance(layer, spec.torch_layer):
            raise Error(f"from_torch: expected an nn.{torch_name}, got {type(layer).__name__}")
        for name in spec.attentions:
            attn = getattr(layer, name)
            if (not attn._qkv_same_embed_dim or attn.in_proj_bias is None or attn.out_proj.bias is None
                    or attn.bias_k is not None or attn.add_zero_attn):
                kind = "self-attention" if name == "self_attn" else "attention"
                raise Error(f"from_torch: {name} must be plain {kind} as {torch_name} makes it (in_proj_weight and "
                            "biases; no kdim/vdim, bias=False, add_bias_kv or add_zero_attn)")
        for name in ("linear1", "linear2"):
            if getattr(layer, name).bias is None:
                raise Error(f"from_torch: {name} has no bias; ffn's {spec.kind} layer has every bias")
        for name in spec.norms:
            norm = getattr(layer, name)
            if not isinstance(norm, nn.LayerNorm) or not norm.elementwise_affine or getattr(norm, "bias", 0) is None:
                raise Error(f"from_torch: {name} is {norm!r}; ffn's {spec.kind} layer has LayerNorms with weight and "
                            "bias")
        for name, p in layer.named_parameters():
            _check_tensor(p, f"from_torch: {name}")
        act = copy.deepcopy(layer.activation) if isinstance(layer.activation, nn.Module) else layer.activation
        d, nhead, d_ff, _, norm_first, eps, p, batch_first = _layer_settings(layer, "from_torch", spec)
        out = cls(d, nhead, d_ff, p, act, eps, batch_first, norm_first, threads=threads)
        out.load_state_dict(layer.state_dict())
        out.train(layer.training)
        return out


def _check_layer_args(d_model, nhead, dim_feedforward, dropout, layer_norm_eps) -> None:
    """A TransformerEncoderLayer's or DecoderLayer's arguments, named as PyTorch names them (before
    PyTorch's own asserts)."""
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


def _clones(layer, layer_cls, num_layers, arg: str) -> nn.ModuleList:
    """num_layers deep copies of layer (an instance of our layer_cls), as nn.TransformerEncoder and
    nn.TransformerDecoder make them."""
    if not isinstance(layer, layer_cls):
        theirs = layer_cls._SPEC.torch_layer
        hint = (f" (convert it with ffn.torch.{layer_cls.__name__}.from_torch(layer))"
                if isinstance(layer, theirs) else "")
        raise Error(f"{arg}: expected an ffn.torch.{layer_cls.__name__}, got "
                    f"{type(layer).__module__}.{type(layer).__name__}{hint}")
    if not isinstance(num_layers, int) or not 1 <= num_layers <= 4096:
        raise Error(f"num_layers: expected 1..4096, got {num_layers!r}")
    return nn.ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])


class _EncoderModule(_StackModule):
    """TransformerEncoderLayer's and TransformerEncoder's forward on ffn.Encoder."""

    _SPEC = _ENCODER
    _FFN = _ffn.Encoder
    _HELD = "_encoder"

    def ffn_encoder(self, prepared=None) -> _ffn.Encoder:
        """The ffn.Encoder holding the current parameters and settings (re-made when any changed)."""
        return self._held(self._settings() if prepared is None else prepared)

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
        return cls._from_torch_layer(layer, threads)


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
        self.layers = _clones(encoder_layer, TransformerEncoderLayer, num_layers, "encoder_layer")
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


class _DecoderModule(_StackModule):
    """TransformerDecoderLayer's and TransformerDecoder's forward on ffn.Decoder."""

    _SPEC = _DECODER
    _FFN = _ffn.Decoder
    _HELD = "_decoder"

    def ffn_decoder(self, prepared=None) -> _ffn.Decoder:
        """The ffn.Decoder holding the current parameters and settings (re-made when any changed)."""
        return self._held(self._settings() if prepared is None else prepared)

    def _run(self, tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
             memory_is_causal):
        prepared = self._settings()
        (d, _, _, _, _, _, p, batch_first), _, _, named, training = prepared
        decoder = self.ffn_decoder(prepared)
        _check_tensor(tgt, f"{type(self).__name__} tgt")
        _check_tensor(memory, f"{type(self).__name__} memory")
        layout = "[N, {0}, E]" if batch_first else "[{0}, N, E]"
        if tgt.dim() not in (2, 3) or tgt.shape[-1] != d:
            raise Error(f"tgt: shape {list(tgt.shape)}, expected {layout.format('T')} (batch_first={batch_first}) or "
                        f"unbatched [T, E], E = d_model = {d}")
        batched = tgt.dim() == 3
        if memory.dim() != tgt.dim() or memory.shape[-1] != d:
            want = f"{layout.format('S')} (batch_first={batch_first})" if batched else "unbatched [S, E]"
            raise Error(f"memory: shape {list(memory.shape)}, expected {want} as tgt {list(tgt.shape)}, "
                        f"E = d_model = {d}")
        x = (tgt if batch_first else tgt.transpose(0, 1)) if batched else tgt.unsqueeze(0)  # [N, T, E]
        mem = (memory if batch_first else memory.transpose(0, 1)) if batched else memory.unsqueeze(0)  # [N, S, E]
        if mem.shape[0] != x.shape[0]:
            raise Error(f"memory: batch N = {mem.shape[0]}, but tgt's is {x.shape[0]} (shapes {list(memory.shape)} "
                        f"and {list(tgt.shape)}, batch_first={batch_first})")
        lengths = _padding_lengths(tgt_key_padding_mask, x.shape[0], x.shape[1], batched, "tgt_key_padding_mask")
        memory_lengths = _padding_lengths(memory_key_padding_mask, mem.shape[0], mem.shape[1], batched,
                                          "memory_key_padding_mask")
        causal = _is_causal(tgt_mask, tgt_is_causal, x.shape[1], "tgt_mask")
        _check_memory_mask(memory_mask, memory_is_causal, x.shape[1], mem.shape[1])
        threads = torch.get_num_threads() if self.threads is None else self.threads
        training = training and p > 0
        seed = int(torch.randint(0, 2**62, (), dtype=torch.int64)) if training else 0
        if torch.is_grad_enabled() and (tgt.requires_grad or memory.requires_grad
                                        or any(t.requires_grad for _, t in named)):
            y = _DecoderFunction.apply(x, mem, decoder, [n for n, _ in named], lengths, memory_lengths, causal,
                                       training, seed, threads, *[t for _, t in named])
        else:
            y = torch.from_numpy(decoder.forward(x.detach().contiguous().numpy(), mem.detach().contiguous().numpy(),
                                                 lengths=lengths, memory_lengths=memory_lengths, causal=causal,
                                                 training=training, seed=seed, threads=threads))
        if not batched:
            return y.squeeze(0)
        return y if batch_first else y.transpose(0, 1).contiguous()  # contiguous [T, N, E], as PyTorch's


class TransformerDecoderLayer(_DecoderModule):
    """nn.TransformerDecoderLayer (torch 1.13) computed by ffn: the same arguments, submodules and
    state_dict names (self_attn.*, multihead_attn.in_proj_weight, multihead_attn.in_proj_bias,
    multihead_attn.out_proj.*, linear1.*, linear2.*, norm1.*, norm2.*, norm3.*) and, for a given
    torch.manual_seed, the same initial values; forward and backward (gradients of tgt, memory and
    every parameter) run in ffn's C++ decoder.

    Args as PyTorch's: d_model, nhead, dim_feedforward, dropout (one p, used at PyTorch's six sites),
    activation ('relu', 'gelu', F.relu, F.gelu, or an nn.ReLU/GELU/SiLU module), layer_norm_eps,
    batch_first, norm_first; device and dtype only None, 'cpu', torch.float32. threads: threads ffn
    uses; None follows torch.get_num_threads().

    forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
            memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
      tgt: [T, N, E] ([N, T, E] with batch_first) or unbatched [T, E]; memory (the encoder's output):
        [S, N, E] ([N, S, E]) or unbatched [S, E]; float32 on the CPU.
      tgt_key_padding_mask [N, T], memory_key_padding_mask [N, S] ([T], [S] unbatched): bool (True =
        padding) or float (-inf = padding), each row tokens then padding.
      tgt_mask: None or the causal mask ([T, T], bool True above the diagonal, or float -inf there and
        0 elsewhere, as nn.Transformer.generate_square_subsequent_mask gives); tgt_is_causal=True alone
        means the same. As PyTorch's, no mask means no causal masking. Any other mask is refused.
      memory_mask: None only (or a mask that masks nothing); memory_is_causal: False only. Both are
        refused otherwise with ffn.Error: ffn's cross-attention sees every memory position that is
        not padding.
    Differences from PyTorch: outputs at target padding positions are zeros, and no gradient flows
    from them; a target sequence with tokens and a fully padded memory is refused (PyTorch: NaN).
    Dropout masks come from ffn's Philox generator seeded from torch's (as FeedForward's).
    Deep-copies, pickles and goes through torch.save/torch.load like any nn.Module.
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation=F.relu, layer_norm_eps: float = 1e-5, batch_first: bool = False, norm_first: bool = False,
                 device=None, dtype=None, threads: Optional[int] = None):
        super().__init__()
        _check_factory(device, dtype, "decoder")
        _check_layer_args(d_model, nhead, dim_feedforward, dropout, layer_norm_eps)
        act = _encoder_activation(activation, "activation")
        # The library's own checks of the rest (sizes up to 2^24), before any parameter is made.
        _ffn.EncoderConfig(d_model=d_model, heads=nhead, d_ff=dim_feedforward, activation=act, eps=layer_norm_eps,
                           dropout=dropout)
        # Made in PyTorch's order, so a seed gives PyTorch's initial values.
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first)
        self.multihead_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm_first = norm_first
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.activation = {"relu": F.relu, "gelu": F.gelu}[activation] if isinstance(activation, str) else activation
        self.threads = threads
        self._decoder = None
        self._stamp = None

    def _stack(self):
        return [self], None, lambda i: "TransformerDecoderLayer"

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor, tgt_mask: Optional[torch.Tensor] = None,
                memory_mask: Optional[torch.Tensor] = None, tgt_key_padding_mask: Optional[torch.Tensor] = None,
                memory_key_padding_mask: Optional[torch.Tensor] = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> torch.Tensor:
        return self._run(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                         tgt_is_causal, memory_is_causal)

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer, threads: Optional[int] = None) -> "TransformerDecoderLayer":
        """The equivalent layer, with a copy of the parameters of an nn.TransformerDecoderLayer."""
        return cls._from_torch_layer(layer, threads)


class TransformerDecoder(_DecoderModule):
    """nn.TransformerDecoder (torch 1.13) computed by ffn: num_layers deep copies of decoder_layer (an
    ffn.torch.TransformerDecoderLayer; convert PyTorch's with its from_torch) and an optional final
    norm (nn.LayerNorm(d_model) with the layers' eps), state_dict names layers.N.* and norm.*. The
    whole stack runs in one call of ffn's decoder, so every layer must keep the same settings.
    threads: threads ffn uses; None follows torch.get_num_threads().

    forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
            memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False): as
    TransformerDecoderLayer.forward; outputs at target padding positions are zeros.
    Generation with a key/value cache (one position per step) is ffn_decoder().start(memory, ...).
    """

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Optional[nn.Module] = None,
                 threads: Optional[int] = None):
        super().__init__()
        self.layers = _clones(decoder_layer, TransformerDecoderLayer, num_layers, "decoder_layer")
        self.num_layers = num_layers
        self.norm = norm
        self.threads = threads
        self._decoder = None
        self._stamp = None
        self._settings()  # a norm ffn cannot compute is refused now, not at the first call

    def _stack(self):
        return list(self.layers), self.norm, lambda i: f"layers.{i}"

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor, tgt_mask: Optional[torch.Tensor] = None,
                memory_mask: Optional[torch.Tensor] = None, tgt_key_padding_mask: Optional[torch.Tensor] = None,
                memory_key_padding_mask: Optional[torch.Tensor] = None, tgt_is_causal: Optional[bool] = None,
                memory_is_causal: bool = False) -> torch.Tensor:
        return self._run(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                         bool(tgt_is_causal), memory_is_causal)

    @classmethod
    def from_torch(cls, decoder: nn.TransformerDecoder, threads: Optional[int] = None) -> "TransformerDecoder":
        """The equivalent decoder, with a copy of the parameters of an nn.TransformerDecoder."""
        if not isinstance(decoder, nn.TransformerDecoder):
            raise Error(f"from_torch: expected an nn.TransformerDecoder, got {type(decoder).__name__}")
        for name, p in decoder.named_parameters():
            _check_tensor(p, f"from_torch: {name}")
        layers = [TransformerDecoderLayer.from_torch(layer) for layer in decoder.layers]
        out = cls(layers[0], len(layers), norm=copy.deepcopy(decoder.norm), threads=threads)
        out.layers = nn.ModuleList(layers)
        out._settings()  # layers whose settings differ are refused now
        out.train(decoder.training)
        return out
