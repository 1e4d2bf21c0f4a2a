"""A NumPy model of ffn's int8 scheme (src/backends/cpu/quantize.hpp) on the inputs transformers captures,
per product: the worst row's relative error of each linear layer of a BERT-family model (plain; outlier
channels by |x| / rms(row) > 6 out; 64-column activation scales), over the golden's 72 texts (the outlier channels are chosen on those same texts: optimistic). --empty-text: the empty text's rows only, layers 9-11, also with
weights alone and activations alone quantized.

    ~/.cache/ffn/devvenv/venv/bin/python bench/analysis/int8_products_sim.py MODEL_DIR GOLDEN.safetensors [--empty-text]

A model, not the engine: it ranks remedies (bench/results/2026-11-29-int8-error-table.md).
Needs transformers and torch (the developer venv of scripts/make_qwen3_golden.py).
"""
import torch, numpy as np, json, struct, sys
from transformers import AutoTokenizer, AutoModel
d=sys.argv[1]
tok=AutoTokenizer.from_pretrained(d); m=AutoModel.from_pretrained(d).eval()
b=open(sys.argv[2],'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n])
texts=json.loads(h['__metadata__']['sentences'])
layers = m.encoder.layer
caps={}
def hook(name):
    def f(mod, inp, out): caps.setdefault(name,[]).append(inp[0][0].detach().numpy().copy())
    return f
for i,L in enumerate(layers):
    att = L.attention.attn if hasattr(L.attention,'attn') else L.attention.self
    (att.q if hasattr(att,'q') else att.query).register_forward_hook(hook(f'{i}.qkv'))
    (att.o if hasattr(att,'o') else L.attention.output.dense).register_forward_hook(hook(f'{i}.out'))
    L.intermediate.dense.register_forward_hook(hook(f'{i}.w1'))
    L.output.dense.register_forward_hook(hook(f'{i}.w2'))
mods={}
for i,L in enumerate(layers):
    att = L.attention.attn if hasattr(L.attention,'attn') else L.attention.self
    mods[f'{i}.qkv']=(att.q if hasattr(att,'q') else att.query).weight.detach().numpy()
    mods[f'{i}.out']=(att.o if hasattr(att,'o') else L.attention.output.dense).weight.detach().numpy()
    mods[f'{i}.w1']=L.intermediate.dense.weight.detach().numpy()
    mods[f'{i}.w2']=L.output.dense.weight.detach().numpy()
with torch.no_grad():
    for t in texts: m(**tok([t],return_tensors='pt',truncation=True,max_length=384))
def qw(W, group=0):
    W=W.astype(np.float64); out=np.empty_like(W)
    g = W.shape[1] if not group else group
    for c in range(0,W.shape[1],g):
        blk=W[:,c:c+g]; s=np.abs(blk).max(1,keepdims=True)/127; s[s==0]=1
        out[:,c:c+g]=np.round(blk/s)*s
    return out
def qa(X, group=0):
    X=X.astype(np.float64); out=np.empty_like(X); g = X.shape[1] if not group else group
    for c in range(0,X.shape[1],g):
        blk=X[:,c:c+g]; lo=np.minimum(0,blk.min(1,keepdims=True)); hi=np.maximum(0,blk.max(1,keepdims=True))
        s=hi/255-lo/255; s[s==0]=1; zp=np.round(-lo/s); u=np.clip(np.round(blk/s)+zp,0,255); out[:,c:c+g]=(u-zp)*s
    return out
def rel_outliers(X, th):
    r=np.abs(X)/np.sqrt((X**2).mean(1,keepdims=True)+1e-30); mx=r.max(0)
    c=np.argsort(-mx); c=[int(j) for j in c[:16] if mx[j]>th]; return sorted(c)
if '--empty-text' in sys.argv:  # the empty text's rows only (text 42 of the golden), layers 9-11
    # rows of text 42 (''): the caps are appended per text in order
    for i in [9,10,11]:
        for k in ['qkv','w1','out','w2']:
            Xall=np.concatenate(caps[f'{i}.{k}']); X=caps[f'{i}.{k}'][42]; W=mods[f'{i}.{k}']; Y=X@W.T
            gw = 256 if k=='w2' else 0
            ch=rel_outliers(Xall,6.0) if k in('qkv','w1') else []
            def e(Xq,Wq,extra=0): E=Xq@Wq.T+extra-Y; return np.sqrt((E**2).sum(1)/(Y**2).sum(1)).max()
            Xo=X.copy(); Wo=W.copy(); Xo[:,ch]=0; Wo[:,ch]=0
            r=np.abs(X[0]); print(i,k,'plain %.4f outl %.4f  g64 %.4f  g32 %.4f  wq-only %.4f aq-only %.4f  row max/rms %.1f' % (e(qa(X,gw),qw(W,gw)), e(qa(Xo,gw),qw(Wo,gw),X[:,ch]@W[:,ch].T), e(qa(X,64),qw(W,gw)), e(qa(X,32),qw(W,gw)), e(X,qw(W,gw)), e(qa(X,gw),W), r.max()/np.sqrt((r**2).mean())))
    sys.exit(0)
rows=[]
for i in range(len(layers)):
    for k in ['qkv','w1','out','w2']:
        X=np.concatenate(caps[f'{i}.{k}']); W=mods[f'{i}.{k}']
        Y=X@W.T
        def err(Xq,Wq): E=Xq@Wq.T-Y; return np.sqrt((E**2).sum(1)/(Y**2).sum(1)).max()
        gw = 256 if k=='w2' else 0
        plain=err(qa(X,gw),qw(W,gw))
        ch=rel_outliers(X,6.0) if k in('qkv','w1') else []
        Xo=X.copy(); Wo=W.copy(); Xo[:,ch]=0; Wo[:,ch]=0
        E=qa(Xo,gw)@qw(Wo,gw).T + X[:,ch]@W[:,ch].T
        outl=np.sqrt(((E-Y)**2).sum(1)/(Y**2).sum(1)).max()
        g64=err(qa(X,64),qw(W,64))
        print(f'{i:2d} {k:4s} rows {X.shape[0]} worst row rel err: plain {plain:.4f}  rel-outliers({len(ch)}) {outl:.4f}  group64 {g64:.4f}', flush=True)
