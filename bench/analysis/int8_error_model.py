# A NumPy model of the int8 scheme (src/backends/cpu/quantize.hpp) on the paper layer with
# nn.Linear-initialized weights and N(0,1) inputs, for activation scale groups of
# gx input features and gh hidden units (the library uses gx = d_model, gh = 256).
# Prints the relative RMS error against float. Run: /usr/bin/python3 bench/analysis/int8_error_model.py
import numpy as np
rng=np.random.default_rng(0)
d,F,T=512,2048,128
def lin(o,i): b=1/np.sqrt(i); return rng.uniform(-b,b,(o,i)).astype(np.float32)
W1=lin(F,d); Wg=lin(F,d); W2=lin(d,F); b1=rng.uniform(-1/np.sqrt(d),1/np.sqrt(d),F); b2=rng.uniform(-1/np.sqrt(F),1/np.sqrt(F),d)
x=rng.standard_normal((T,d)).astype(np.float32)
def qw(W): s=np.abs(W).max(1,keepdims=True)/127; return np.round(W/s)*s
def qa(v,g):  # per row per group asym 8-bit
    T,n=v.shape; out=np.empty_like(v)
    for j in range(0,n,g):
        b=v[:,j:j+g]; lo=np.minimum(b.min(1,keepdims=True),0); hi=np.maximum(b.max(1,keepdims=True),0)
        s=(hi-lo)/255; s[s==0]=1; zp=np.round(-lo/s); u=np.clip(np.round(b/s)+zp,0,255); out[:,j:j+g]=(u-zp)*s
    return out
silu=lambda z: z/(1+np.exp(-z))
from math import erf
gelu=lambda z: 0.5*z*(1+np.vectorize(erf)(z/np.sqrt(2)))
def ffn(x,W1,Wg,W2,act,gx=None,gh=None):
    xi = qa(x,gx) if gx else x
    z=xi@W1.T+b1
    if act=='swiglu': h=silu(xi@Wg.T+b1)*z
    elif act=='relu': h=np.maximum(z,0)
    else: h=gelu(z)
    if gh: h=qa(h,gh)
    return h@W2.T+b2
for act in ['relu','gelu','swiglu']:
    y=ffn(x,W1,Wg,W2,act)
    for gx,gh in [(512,256),(64,256),(512,64),(64,64),(32,32)]:
        yq=ffn(x,qw(W1),qw(Wg),qw(W2),act,gx,gh)
        print(act,gx,gh, np.linalg.norm(yq-y)/np.linalg.norm(y))
