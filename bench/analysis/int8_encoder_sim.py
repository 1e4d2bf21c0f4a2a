"""A whole-model NumPy model of ffn's int8 scheme: each chosen nn.Linear of a BERT-family model replaced by
the quantized product (per-row activation scale, or per group; per-row weight scale, W2 per 256 columns;
outlier channels by max |x| (abs) or |x| / rms(row) (rel) on the engine's calibration texts, src/text/calibration.cpp),
then the worst cosine of the golden's 72 texts against the model's own fp32 embeddings, per setting.

    ~/.cache/ffn/devvenv/venv/bin/python bench/analysis/int8_encoder_sim.py MODEL_DIR GOLDEN.safetensors

Close to the engine (the old rule: 0.997477 here, 0.997402 in ffn; bench/results/2026-11-29-int8-error-table.md),
but a model: it ranks remedies, the engine decides.
"""
import torch, numpy as np, json, struct, sys
from transformers import AutoTokenizer, AutoModel
d=sys.argv[1]
tok=AutoTokenizer.from_pretrained(d); m=AutoModel.from_pretrained(d).eval()
b=open(sys.argv[2],'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n])
texts=json.loads(h['__metadata__']['sentences'])

layers=m.encoder.layer
def lin(L,k):
    att = L.attention.attn if hasattr(L.attention,'attn') else L.attention.self
    return {'q':att.q if hasattr(att,'q') else att.query,'k':att.k if hasattr(att,'k') else att.key,'v':att.v if hasattr(att,'v') else att.value,
            'out':att.o if hasattr(att,'o') else L.attention.output.dense,'w1':L.intermediate.dense,'w2':L.output.dense}[k]
def embed():
    outs=[]
    with torch.no_grad():
        for t in texts:
            bt=tok([t],return_tensors='pt',truncation=True,max_length=384); o=m(**bt).last_hidden_state[0].mean(0)
            outs.append((o/o.norm()).numpy())
    return np.stack(outs)
# calibration: the engine's own texts (src/text/calibration.cpp's string literals)
import re,os
src=open(os.path.join(os.path.dirname(os.path.abspath(__file__)),'..','..','src','text','calibration.cpp')).read()
lit=r'"(?:[^"\\]|\\.)*"'  # C++ string literals; adjacent ones (no comma between) are one text
calib=[''.join(json.loads(t) for t in re.findall(lit,g)) for g in re.findall(r'((?:'+lit+r'\s*)+),',src)]
assert len(calib) >= 20, "src/text/calibration.cpp: expected its calibration texts"
ref=embed()
def qa(X, g):
    lo=np.minimum(0,X.reshape(X.shape[0],-1,g).min(2,keepdims=True)); hi=np.maximum(0,X.reshape(X.shape[0],-1,g).max(2,keepdims=True))
    s=hi/255-lo/255; s[s==0]=1; zp=np.round(-lo/s); Xg=X.reshape(X.shape[0],-1,g); u=np.clip(np.round(Xg/s)+zp,0,255); return ((u-zp)*s).reshape(X.shape)
def qw(W, g):
    Wg=W.reshape(W.shape[0],-1,g); s=np.abs(Wg).max(2,keepdims=True)/127; s[s==0]=1; return (np.round(Wg/s)*s).reshape(W.shape)
def install(cfg):
    # cfg: kind -> (act group or 0, outlier threshold rel or None)
    hooks=[]
    stats={}
    global cache
    cache={}
    for i,L in enumerate(layers):
        for k in ['q','k','v','out','w1','w2']:
            if k not in cfg: continue
            mod=lin(L,k); W=mod.weight.detach().numpy().astype(np.float64); bias=mod.bias.detach().numpy()
            ga, th = cfg[k]; n=W.shape[1]; ga = ga or (256 if k=='w2' else n);  # W2: one scale per 256 hidden units, as ffn
            gw = 256 if k=='w2' else n
            key=(i,k)
            def fwd(x, W=W, bias=bias, ga=ga, gw=gw, th=th, key=key):
                X=x.detach().numpy().reshape(-1,x.shape[-1]).astype(np.float64)
                ch=stats.get(key,[])
                if key not in cache:
                    Wo=W.copy(); Wo[:,ch]=0; cache[key]=qw(Wo,gw).T.copy()
                Xo=X.copy(); Xo[:,ch]=0
                Y=qa(Xo,ga)@cache[key] + X[:,ch]@W[:,ch].T + bias
                return torch.from_numpy(Y.astype(np.float32)).reshape(*x.shape[:-1],-1)
            hooks.append((mod,fwd,key,th))
    return hooks,stats
def run(cfg, label):
    hooks,stats=install(cfg)
    # calibrate
    caps={}
    hs=[mod.register_forward_hook(lambda md,inp,out,key=key: caps.setdefault(key,[]).append(inp[0].detach().numpy().reshape(-1,inp[0].shape[-1]))) for mod,_,key,th in hooks]
    with torch.no_grad():
        for t in calib: m(**tok([t],return_tensors='pt'))
    for hh in hs: hh.remove()
    for mod,_,key,th in hooks:
        if th is None: continue
        X=np.concatenate(caps[key]); r=(np.abs(X)/np.sqrt((X**2).mean(1,keepdims=True))).max(0) if th[0]=='rel' else np.abs(X).max(0)
        c=[int(j) for j in np.argsort(-r)[:16] if r[j]>th[1]]; stats[key]=sorted(c)
    orig={}
    for mod,fwd,key,th in hooks: orig[mod]=mod.forward; mod.forward=fwd
    e=embed()
    for mod in orig: mod.forward=orig[mod]
    c=(e*ref).sum(1); i=int(np.argmin(c))
    print(f'{label:40s} worst {c.min():.6f} ({texts[i][:20]!r}) mean {c.mean():.6f}', flush=True)
A=('abs',6.0); R=('rel',6.0)
allk=lambda a,o,w2g=0,outo=None: {'q':(0,o),'k':(0,o),'v':(0,o),'out':(0,outo),'w1':(0,o),'w2':(w2g,None)}
run(allk(0,A),'engine today (abs 6)')
run(allk(0,R),'rel 6')
run({'w1':(0,R),'w2':(0,None)},'ffn only rel 6')
run({'w1':(0,R)},'w1 only rel 6')
run({'w2':(0,None)},'w2 only (256)')
run({'w2':(64,None)},'w2 only (64)')
run({'out':(0,None)},'out only')
run({'out':(0,R)},'out only rel 6')
run(allk(0,R,64,R),'rel 6, w2 g64, out rel')
