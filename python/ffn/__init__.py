"""ffn: the Transformer's position-wise feed-forward sublayer, from Python.

    FFN(x) = f(x W1^T + b1) W2^T + b2            (relu, gelu, gelu_tanh, silu)
    FFN(x) = (act(x Wg^T + bg) * (x W1^T + b1)) W2^T + b2   (swiglu, geglu, reglu)

wrapped post-LN (the paper), pre-LN or bare, with LayerNorm or RMSNorm, dropout
in training mode, forward and backward; the C++ library's fast kernels.

    import numpy as np, ffn
    layer = ffn.init(ffn.Config(d_model=512, d_ff=2048, activation="gelu", norm="pre"), seed=0)
    y = layer.forward(np.random.rand(64, 512).astype(np.float32))
    dx, grads = layer.backward(x, dy)          # grads["linear1.weight"], ...
    layer.save("w.safetensors"); ffn.Layer.load("w.safetensors")

Arrays are float32 and C-contiguous and are read in place; anything else is
refused with ffn.Error (a ValueError) saying what to pass. Ctrl-C stops a long
forward, backward or embed (called from the main thread) with KeyboardInterrupt
within a fraction of a second; the object stays usable (an out= array is then
partly written). The PyTorch module
is ffn.torch.FeedForward (import ffn.torch; needs PyTorch); the encoder around
it, ffn.torch.TransformerEncoderLayer / TransformerEncoder, runs on ffn.Encoder, and
the decoder, ffn.torch.TransformerDecoderLayer / TransformerDecoder, on ffn.Decoder
(whose start() gives a DecoderState for generation, one position per step).

Sentence embeddings (all-MiniLM-L6-v2, installed by scripts/setup.sh):

    enc = ffn.SentenceEncoder.load()            # or load("path/to/bert-model-dir")
    e = enc.embed(["A man is eating food.", "A man is eating bread."])   # float32 [2, 384]

A cross-encoder reranker (a BertForSequenceClassification, XLMRobertaForSequenceClassification
or ModernBertForSequenceClassification directory):

    ce = ffn.CrossEncoder.load("path/to/ms-marco-MiniLM-L-6-v2")
    ce.rank("where is the cat", ["The cat sat on the mat.", "A dog runs."])   # [{'corpus_id', 'score'}, ...]

A LLaMA-architecture language model (SmolLM2's GGUF, installed by scripts/setup.sh):

    lm = ffn.CausalLM.load("~/.cache/ffn/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")   # expand ~ yourself
    lm.generate("What is the capital of France?", chat=True, max_new_tokens=40)
"""

from ._ffn import (CausalLM, Cache, Config, CrossEncoder, Decoder, DecoderCache, DecoderConfig, DecoderState, Encoder, EncoderCache,
                   EncoderConfig, Error, Layer, SentenceEncoder, __version__, init)

__all__ = ["CausalLM", "Cache", "Config", "CrossEncoder", "Decoder", "DecoderCache", "DecoderConfig", "DecoderState", "Encoder", "EncoderCache",
           "EncoderConfig", "Error", "Layer", "SentenceEncoder", "__version__", "init"]
