#!/usr/bin/python3
"""PyTorch modules to ffn's safetensors files and back, without the
`safetensors` package (Debian's python3-torch has none).

    import sys; sys.path.insert(0, "scripts")
    import torch_roundtrip as tr
    tr.save(layer, "w.safetensors")   # nn.TransformerEncoderLayer, nn.Sequential(Linear, act, Linear),
                                       # a LLaMA-style MLP (gate_proj, up_proj, down_proj), or a state_dict
    # ffn run --weights w.safetensors ... ; ffn train --init w.safetensors ... --output t.safetensors
    tr.load_into(layer, "t.safetensors")  # the FFN's tensors back into the module

`save` writes every tensor of the module's state_dict under the names ffn
reads (an encoder layer's attention weights and norm1 too), and the settings
a state_dict does not carry in the file's __metadata__ (ffn.activation,
ffn.norm, ffn.norm_type, ffn.eps, and ffn.heads for an encoder layer), taken
from the module: without them ffn refuses the file until the command line
gives them (--activation, --norm, --heads). Keyword arguments override them
(and are required for a plain state_dict).

`load_into` reads F32, BF16 and F16 tensors (not ffn's int8 files) and loads
the FFN's tensors into the module with load_state_dict; tensors the file has
and the module lacks are an error, the module's other parameters (attention)
are left as they are. Returns the names loaded.

    /usr/bin/python3 scripts/torch_roundtrip.py save-demo DIR   # the three module kinds, for trying ffn on them
"""
import json
import struct
import sys

import numpy as np
import torch
from torch import nn

_DTYPES = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (None, 2)}


def _activation_name(act):
    """ffn's name for a PyTorch activation (module or function)."""
    if isinstance(act, nn.ReLU) or act is torch.nn.functional.relu:
        return "relu"
    if isinstance(act, nn.GELU):
        return "gelu_tanh" if act.approximate == "tanh" else "gelu"
    if act is torch.nn.functional.gelu:
        return "gelu"
    if isinstance(act, nn.SiLU) or act is torch.nn.functional.silu:
        return "silu"
    raise ValueError(f"activation {act!r}: ffn has relu, gelu, gelu_tanh and silu")


def _is_llama_mlp(m):
    return all(hasattr(m, n) for n in ("gate_proj", "up_proj", "down_proj"))


def ffn_tensors(module):
    """(tensors by ffn name, settings) for a supported module."""
    sd = {k: v.detach().float().cpu() for k, v in module.state_dict().items()}
    if isinstance(module, nn.TransformerEncoderLayer):
        settings = {
            "activation": _activation_name(module.activation),
            "norm": "pre" if module.norm_first else "post",
            "norm_type": "layernorm",
            "eps": module.norm2.eps,
            "heads": module.self_attn.num_heads,  # `ffn encode` needs it; the tensors do not show it
        }
        return sd, settings  # ffn reads linear1, linear2 and norm2 under these names
    if isinstance(module, nn.Sequential) and len(module) == 3:
        first, act, second = module
        if not (isinstance(first, nn.Linear) and isinstance(second, nn.Linear)):
            raise ValueError("nn.Sequential: expected (Linear, activation, Linear)")
        names = {"0.weight": "linear1.weight", "0.bias": "linear1.bias", "2.weight": "linear2.weight", "2.bias": "linear2.bias"}
        return {names[k]: v for k, v in sd.items()}, {"activation": _activation_name(act), "norm": "none"}
    if _is_llama_mlp(module):
        act = getattr(module, "act_fn", nn.SiLU())
        gated = {"silu": "swiglu", "gelu": "geglu", "gelu_tanh": "geglu", "relu": "reglu"}[_activation_name(act)]
        return {"mlp." + k: v for k, v in sd.items()}, {"activation": gated, "norm": "none"}
    raise ValueError(f"{type(module).__name__}: expected nn.TransformerEncoderLayer, nn.Sequential(Linear, act, Linear) "
                     "or a LLaMA-style MLP; pass its state_dict with the settings as keyword arguments")


def save(module_or_state_dict, path, prefix="", **settings):
    """Writes a safetensors file ffn loads: the tensors, and the settings in __metadata__."""
    if isinstance(module_or_state_dict, nn.Module):
        tensors, found = ffn_tensors(module_or_state_dict)
        found.update(settings)
        settings = found
    else:
        tensors = {k: v.detach().float().cpu() for k, v in module_or_state_dict.items()}
    meta = {"format": "pt"}
    for key in ("activation", "norm", "norm_type", "eps", "heads"):
        if key in settings:
            meta["ffn." + key] = (repr(float(settings[key])) if key == "eps" else
                                  str(int(settings[key])) if key == "heads" else str(settings[key]))
    header, blobs, offset = {"__metadata__": meta}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name].numpy(), dtype="<f4")
        header[prefix + name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read(path):
    """(tensors as float32 torch tensors, __metadata__) of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor '{name}' has dtype {info['dtype']}; this script reads F32, BF16 and F16")
        lo, hi = info["data_offsets"]
        raw = data[lo:hi]
        if info["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, dtype=_DTYPES[info["dtype"]][0]).astype(np.float32)
        out[name] = torch.from_numpy(a.reshape(info["shape"]).copy())
    return out, meta


def load_into(module, path, prefix=""):
    """Loads the FFN's tensors of an ffn file into the module; returns the names loaded."""
    tensors, _ = read(path)
    tensors = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    tensors.pop("head.weight", None), tensors.pop("head.bias", None)  # ffn train's output head, not the module's
    if isinstance(module, nn.Sequential):
        names = {"linear1.weight": "0.weight", "linear1.bias": "0.bias", "linear2.weight": "2.weight", "linear2.bias": "2.bias"}
        tensors = {names.get(k, k): v for k, v in tensors.items()}
    elif _is_llama_mlp(module):
        tensors = {k[4:] if k.startswith("mlp.") else k: v for k, v in tensors.items()}
    own = module.state_dict()
    unknown = sorted(set(tensors) - set(own))
    if unknown:
        raise ValueError(f"{path}: tensors {unknown} have no place in {type(module).__name__}")
    missing = module.load_state_dict(tensors, strict=False).missing_keys
    return sorted(set(own) - set(missing))


def _demo_modules():
    torch.manual_seed(0)
    enc = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation="gelu", norm_first=True, batch_first=True)
    seq = nn.Sequential(nn.Linear(32, 64), nn.GELU(approximate="tanh"), nn.Linear(64, 32))

    class Mlp(nn.Module):  # LLaMA's MLP: down(silu(gate(x)) * up(x)), no biases
        def __init__(self, d, f):
            super().__init__()
            self.gate_proj, self.up_proj = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False)
            self.down_proj, self.act_fn = nn.Linear(f, d, bias=False), nn.SiLU()

        def forward(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    return {"encoder_layer": enc, "sequential": seq, "llama_mlp": Mlp(32, 64)}


def main(argv):
    if len(argv) != 3 or argv[1] != "save-demo":
        print(__doc__.split("\n\n")[-1].strip(), file=sys.stderr)
        return 2
    import os
    os.makedirs(argv[2], exist_ok=True)
    for name, m in _demo_modules().items():
        save(m, os.path.join(argv[2], name + ".safetensors"))
        print(os.path.join(argv[2], name + ".safetensors"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
