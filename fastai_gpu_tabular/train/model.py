"Model pieces fastai lacks: multi-hot columns (embedding bags), sparse-gradient tables, and a fused embedding lookup."
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from fastai.layers import Embedding, trunc_normal_
from fastai.tabular.model import TabularModel
from fastai.torch_core import Module

from ..rows.pack import cat_spans

__all__ = ['TabularModelGPU']

def _init_(w): trunc_normal_(w.data, std=0.01)   # fastai's `Embedding` init
def _width(bags, i): return bags.get(i, 1)

def exporting() -> bool:
    "Whether the model is traced for export (`torch.export`, `torch.onnx.export`): bags then take a masked lookup."
    is_exporting = getattr(torch.compiler, 'is_exporting', None)   # absent from older torch
    return (is_exporting is not None and is_exporting()) or torch.onnx.is_in_onnx_export()

def _embedding(ni, nf, sparse=False):
    "fastai's `Embedding`, with sparse gradients if asked."
    e = Embedding(ni, nf)
    e.sparse = sparse
    return e

def bag_lookup(codes:torch.Tensor, weight:torch.Tensor, mode:str='mean', sparse:bool=False) -> torch.Tensor:
    "Embed bags of `codes` (`[bs, slots]`, -1 = padding) in `weight`: the sum or mean of each row's embeddings."
    mask = codes >= 0
    # a padding slot looks up a row with weight 0: for a sparse grad, a row of the batch (its largest code), so that the
    # grad lists only rows the batch holds and the lazy optimizer moves no other (row 0, `#na#`, would be listed)
    pad = codes.max().clamp(min=0) if sparse else 0
    idx = torch.where(mask, codes, pad)
    out = F.embedding_bag(idx, weight, mode='sum', sparse=sparse, per_sample_weights=mask.to(weight.dtype))
    return out / mask.sum(1, keepdim=True).clamp(min=1).to(out.dtype) if mode == 'mean' else out

def masked_bag_lookup(codes:torch.Tensor, weight:torch.Tensor, mode:str='mean') -> torch.Tensor:
    """`bag_lookup` as a plain gather, a mask and a sum: the exported form. Exporters turn `embedding_bag` into a
    per-bag `Loop` (seconds a batch in onnxruntime); this one becomes Gather, Mul and ReduceSum."""
    mask = (codes >= 0).to(weight.dtype).unsqueeze(-1)
    out = (F.embedding(codes.clamp(min=0), weight) * mask).sum(-2)
    return out / mask.sum(-2).clamp(min=1) if mode == 'mean' else out

class _Bag(nn.Module):
    "One multi-hot column's table; `weight` under fastai's `embeds.{i}.weight` name."
    def __init__(self, ni, nf, mode='mean', sparse=False):
        super().__init__()
        self.weight,self.mode,self.sparse = nn.Parameter(torch.empty(ni, nf)),mode,sparse
        _init_(self.weight)
    def forward(self, codes):
        if exporting(): return masked_bag_lookup(codes, self.weight, self.mode)
        return bag_lookup(codes, self.weight, self.mode, self.sparse)

class FusedEmbedding(Module):
    """All tables of one embedding width in one weight, with row offsets: one lookup kernel per width instead of one per
    column (a single kernel when every width is the same). Outputs keep the columns' order; `column_weights()` gives
    each table back for export."""
    def __init__(self, emb_szs, bags=None, mode='mean', sparse=False):
        self.emb_szs,self.bags = list(emb_szs),dict(bags or {})
        self.mode,self.sparse = mode,sparse
        spans = cat_spans([_width(self.bags, i) for i in range(len(emb_szs))])   # each column's slots in `x_cat`
        self.groups,self.weights = [],nn.ParameterList()
        feat,pos = 0,{}
        for d in sorted({nf for _,nf in emb_szs}):
            cols = [i for i,(_,nf) in enumerate(emb_szs) if nf == d]
            rows = torch.tensor([0] + [emb_szs[i][0] for i in cols]).cumsum(0).tolist()
            w = nn.Parameter(torch.empty(rows[-1] + 1, d))   # the last row pads bags: excluded from their reduction
            _init_(w)
            with torch.no_grad(): w[-1] = 0
            self.weights.append(w)
            g = len(self.groups)
            widths = [_width(self.bags, i) for i in cols]
            self.register_buffer(f'slots{g}', torch.cat([torch.arange(*spans[i]) for i in cols]), persistent=False)
            self.register_buffer(f'offs{g}', torch.tensor([rows[k] for k,w in enumerate(widths) for _ in range(w)]),
                                 persistent=False)
            # each column's first slot among the group's
            self.register_buffer(f'firsts{g}', torch.tensor([a for a,_ in cat_spans(widths)]), persistent=False)
            # which slots belong to which column (for the masked lookup of an export): [cols, slots], 0/1
            col = torch.repeat_interleave(torch.arange(len(cols)), torch.tensor(widths))
            self.register_buffer(f'seg{g}', (torch.arange(len(cols))[:, None] == col).float(), persistent=False)
            self.groups.append(dict(cols=cols, rows=rows, pad=rows[-1], bags=any(i in self.bags for i in cols)))
            for k,i in enumerate(cols): pos[i] = feat + k*d
            feat += len(cols) * d
        # the first Linear layer expects features in column order, as the unfused model makes them
        perm = [torch.arange(pos[i], pos[i] + nf) for i,(_,nf) in enumerate(emb_szs)]
        self.register_buffer('perm', torch.cat(perm) if perm else torch.zeros(0, dtype=torch.long), persistent=False)
        self.in_order = len(self.groups) <= 1

    def forward(self, x_cat):
        outs = []
        for g,(grp,w) in enumerate(zip(self.groups, self.weights)):
            slots = x_cat[:, getattr(self, f'slots{g}')]
            if not grp['bags']:    # single-hot only: one plain gather
                outs.append(F.embedding(slots + getattr(self, f'offs{g}'), w, sparse=self.sparse).flatten(1))
                continue
            if exporting():
                outs.append(self._masked(slots, g, w))
                continue
            bs,n = slots.shape
            idx = torch.where(slots >= 0, slots + getattr(self, f'offs{g}'), grp['pad']).flatten()
            offsets = (torch.arange(bs, device=x_cat.device)[:, None] * n + getattr(self, f'firsts{g}')).flatten()
            out = F.embedding_bag(idx, w, offsets.to(idx.dtype), mode=self.mode, sparse=self.sparse,
                                  padding_idx=grp['pad'])
            outs.append(out.view(bs, len(grp['cols']) * w.shape[1]))   # explicit: a 0-row batch has no -1
        x = torch.cat(outs, 1) if len(outs) > 1 else outs[0]
        return x if self.in_order else x[:, self.perm]

    def _masked(self, slots, g, w):
        "A group's bags as one gather, a mask and a sum per column (a matmul with the slots-to-columns matrix)."
        mask = (slots >= 0).to(w.dtype)
        idx = torch.where(slots >= 0, slots + getattr(self, f'offs{g}'), self.groups[g]['pad'])
        emb = F.embedding(idx, w) * mask.unsqueeze(-1)                                                # [bs, slots, d]
        seg = getattr(self, f'seg{g}').to(w.dtype)
        out = torch.matmul(seg, emb)                                                                  # [bs, cols, d]
        if self.mode == 'mean': out = out / torch.matmul(mask, seg.t()).clamp(min=1).unsqueeze(-1)
        return out.flatten(1)

    def column_weights(self) -> list:
        "Each column's table, in column order (views of the fused weights, padding row excluded)."
        res = [None] * len(self.emb_szs)
        for grp,w in zip(self.groups, self.weights):
            for k,i in enumerate(grp['cols']): res[i] = w[grp['rows'][k]:grp['rows'][k+1]]
        return res

class TabularModelGPU(TabularModel):
    """fastai's `TabularModel` (same layers and parameter names), plus multi-hot columns as embedding bags, tables with
    sparse gradients, and an optional fused lookup. `x_cat` holds one column per cat, or a multi-hot column's slots."""
    def __init__(self, emb_szs, n_cont, out_sz, layers, ps=None, embed_p=0., y_range=None, use_bn=True, bn_final=False,
                 bn_cont=True, act_cls=nn.ReLU(inplace=True), lin_first=True,
                 bags:dict=None, # {cat index: slots} of the multi-hot columns
                 sparse=(), # cat indices whose tables get sparse gradients (`fused`: all of them, or none)
                 fused=False, # one lookup kernel per embedding width instead of one per column
                 bag_mode='mean', # how a bag's embeddings combine: 'mean' or 'sum'
                 shared:dict=None): # {cat index: the cat index whose table it uses} (Categorify's joint groups)
        # fastai builds the layers; its tables are rebuilt below (1-row stand-ins: no huge throwaway allocation)
        super().__init__([(1, nf) for _,nf in emb_szs], n_cont, out_sz, layers, ps=ps, embed_p=embed_p, y_range=y_range,
                         use_bn=use_bn, bn_final=bn_final, bn_cont=bn_cont, act_cls=act_cls, lin_first=lin_first)
        if bag_mode not in ('mean', 'sum'): raise ValueError(f"bag_mode must be 'mean' or 'sum', not {bag_mode!r}")
        self.bags,self.sparse,self.emb_szs = dict(bags or {}),set(sparse),list(emb_szs)
        self.widths = [_width(self.bags, i) for i in range(len(emb_szs))]
        if fused:
            if self.sparse and self.sparse != set(range(len(emb_szs))):
                raise ValueError("a fused embedding has one weight: its tables are all sparse or all dense")
            self.embeds = nn.ModuleList()
            self.fused = FusedEmbedding(emb_szs, self.bags, bag_mode, sparse=bool(self.sparse))
        else:
            self.fused = None
            self.embeds = nn.ModuleList([_Bag(ni, nf, bag_mode, sparse=i in self.sparse) if i in self.bags
                                         else _embedding(ni, nf, sparse=i in self.sparse)
                                         for i,(ni,nf) in enumerate(emb_szs)])
        self.shared = dict(shared or {})
        if self.shared and fused: raise ValueError("a fused embedding cannot share tables (Categorify(joint)) yet")
        for i,j in self.shared.items():   # one Parameter: the optimizer and the state dict see one table
            if emb_szs[i] != emb_szs[j]: raise ValueError(f"cat {i} shares cat {j}'s table but has another size")
            self.embeds[i].weight = self.embeds[j].weight

    def embed(self, x_cat):
        "The concatenated embeddings of every cat column, in column order."
        if self.fused is not None: return self.fused(x_cat)
        if not self.bags: return torch.cat([e(x_cat[:, i]) for i,e in enumerate(self.embeds)], 1)   # fastai's loop
        outs = []
        for e,(a,b) in zip(self.embeds, cat_spans(self.widths)):
            outs.append(e(x_cat[:, a:b]) if isinstance(e, _Bag) else e(x_cat[:, a]))
        return torch.cat(outs, 1)

    def forward(self, x_cat, x_cont=None):
        if self.n_emb != 0: x = self.emb_drop(self.embed(x_cat))
        if self.n_cont != 0:
            if self.bn_cont is not None: x_cont = self.bn_cont(x_cont)
            x = torch.cat([x, x_cont], 1) if self.n_emb != 0 else x_cont
        return self.layers(x)

    def unfused_state_dict(self) -> dict:
        """A state dict with one `embeds.{i}.weight` per column, as the unfused model (and fastai's TabularModel) name
        them."""
        sd = {k:v for k,v in self.state_dict().items() if not k.startswith('fused.')}
        if self.fused is not None:
            for i,w in enumerate(self.fused.column_weights()): sd[f'embeds.{i}.weight'] = w.detach().clone()
        return sd
