"""The `fastai` suite (the default of `python -m fastai_gpu_tabular.bench`): stock fastai against this package on the
same Criteo-like data and machine: each contender (contender.py) in its own fresh subprocess, then ratios,
the targets, a table and a plot.

The JSON it writes (schema_version 1; sizes in MB = 2**20 bytes, batch sizes as string keys):

    meta        {schema_version, timestamp, wall_s, command, hardware{cpu, cores, cores_usable, ram_gb, gpu, platform,
                 python, loadavg}, loadavg_end, versions{torch, fastai, ...}, git{commit, changed}, args{...},
                 data{path, rows, seed, bytes, make_s}}
    contenders  {name: {status 'ok'|'skipped'|'failed', reason, tabular_type, loader_type, backend, device,
                 torch_threads, rows, n_train, n_valid, n_cat, n_cont, load_s, preprocess_s (the fastest build
                 after the first, if there are more: `contender.warm`), preprocess_s_all, preprocess_cpu_s (the
                 least CPU time of those builds), preprocess_cpu_s_all, dataloaders_s, dataloaders_s_all,
                 dataloaders_cpu_s (packing, for TabularGPU; one call after each build, the least as the builds'),
                 dataloaders_cpu_s_all, baseline_rss_mb, peak_rss_mb,
                 rss_increase_mb, rss_phases_mb{phase: peak}, rss_method, peak_gpu_mb, gpu_detail{...},
                 held_after_dataloaders{frame_mb, index_mb, packed_mb, resident_mb, resident_vs_packed},
                 gpu_after_dataloaders_mb, gpu_resident_vs_packed, etl_peak_gpu_mb,
                 cpu_fallbacks{operation: CPU calls} (stock_cudf_pandas), loader_rows_per_s{bs: rows/s},
                 loader_detail{bs: {rows_per_s, method, capped, epochs, epoch_rows_per_s, mean_rows_per_s,
                 bare_ns_per_row, overhead_ns_per_row, loader_vs_bare, int32_codes{rows_per_s,
                 int64_vs_int32_rows_per_s, batch_bytes, batch_bytes_int32} (packed loaders), ...}}, loader_capped,
                 batch[[shape, dtype, device]], gather_bandwidth{bs: {...}}, train_rows_per_s, train_s, train_rows,
                 train_bs, train_loss, valid_s, valid_auc, end_to_end_s, model{...}, wall_s, cpu_s, loadavg_start,
                 loadavg_end, spread{preprocess_s|preprocess_cpu_s|dataloaders_s|dataloaders_cpu_s: {n, min, max,
                 spread (max / min - 1)} or None if measured once, loader_rows_per_s{bs: the same, over the epochs}}}}
    ratios      {vs_stock_shuffle|vs_stock_weighted: {name: {preprocess_speedup, preprocess_total_speedup,
                 preprocess_total_cpu_speedup (build + dataloaders(), by CPU time), end_to_end_speedup,
                 loader_speedup{bs}, train_speedup, peak_rss_ratio, rss_increase_ratio, valid_auc_delta}}}
                 (speedups are reference time / contender time: >1 is faster; memory ratios are contender / reference)
    targets     [{name, contender, reference, value, target, smaller (the target is a ceiling), range [low, high]
                 (the value over the repeats of what it comes from; low == high for a figure measured once),
                 verdict 'met'|'NOT met'|'within noise' (`report.judge`), met (True, False, or None within noise)}]
                 (the device's targets: `performance_targets`)
    curve       {name: [{rows, preprocess_s, preprocess_us_per_row, loader_rows_per_s{bs}, loader_ns_per_row{bs},
                 gather_ns_per_row{bs}, overhead_ns_per_row{bs}, peak_rss_mb}]} (the gather keys for packed tensors)
    curve_growth {name: {loader_ns_per_row|gather_ns_per_row|overhead_ns_per_row: {bs: value at the largest N / at
                 the smallest}}}
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from .contender import NEED_CUDF, warm
from .machine import git_state, hardware, versions
from .report import fmt, fmt_spread, judge, load_line, ratio, ratio_range, table, verdict

__all__ = ['SCHEMA_VERSION', 'compute_ratios', 'performance_targets', 'format_table', 'plot_ratios', 'run_bench',
           'run_child']

REFERENCES = ('stock_shuffle', 'stock_weighted')
SCHEMA_VERSION = 1

# --- comparing -----------------------------------------------------------------------------------------------------
def compute_ratios(contenders:dict) -> dict:
    "Every ok contender against each ok reference: speedups (>1 faster) and memory ratios (<1 smaller)."
    out = {}
    for ref in REFERENCES:
        r = contenders.get(ref, {})
        if r.get('status') != 'ok': continue
        vs = out[f'vs_{ref}'] = {}
        for name,c in contenders.items():
            if name == ref or c.get('status') != 'ok': continue
            tot = lambda o, k='_s': (o.get('preprocess' + k) or 0) + (o.get('dataloaders' + k) or 0)
            auc = (c.get('valid_auc'), r.get('valid_auc'))
            vs[name] = {
                'preprocess_speedup': ratio(r.get('preprocess_s'), c.get('preprocess_s')),
                'preprocess_total_speedup': ratio(tot(r), tot(c)),
                'preprocess_total_cpu_speedup': ratio(tot(r, '_cpu_s'), tot(c, '_cpu_s')),
                'loader_speedup': {bs: ratio(v, r.get('loader_rows_per_s', {}).get(bs))
                                   for bs,v in c.get('loader_rows_per_s', {}).items()},
                'train_speedup': ratio(c.get('train_rows_per_s'), r.get('train_rows_per_s')),
                'end_to_end_speedup': ratio(r.get('end_to_end_s'), c.get('end_to_end_s')),
                'peak_rss_ratio': ratio(c.get('peak_rss_mb'), r.get('peak_rss_mb')),
                # a tiny increase (small data) would make a meaningless ratio
                'rss_increase_ratio': ratio(c.get('rss_increase_mb'), r.get('rss_increase_mb'))
                                      if (r.get('rss_increase_mb') or 0) > 64 else None,
                'valid_auc_delta': None if None in auc else auc[0] - auc[1]}
    return out

def _repeats(c:dict, key:str) -> list:
    "A figure's repeats in contender record `c`: its builds after the first (`warm`), or its one value."
    return warm(c.get(key + '_all') or ([c[key]] if c.get(key) is not None else []))

def _epochs(c:dict, bs:str) -> list:
    "Rows/s of each complete timed loader epoch at `bs`, or the one figure (an extrapolated epoch)."
    d = c.get('loader_detail', {}).get(bs, {})
    return d.get('epoch_rows_per_s') or ([d['rows_per_s']] if d.get('rows_per_s') else [])

def _cpu_bounds(c:dict) -> tuple|None:
    "Build + dataloaders() CPU seconds of contender `c` over its repeats: the least of each part, the most of each."
    pre,dl = _repeats(c, 'preprocess_cpu_s'),_repeats(c, 'dataloaders_cpu_s')
    return (min(pre) + min(dl), max(pre) + max(dl)) if pre and dl and min(pre) + min(dl) > 0 else None

def performance_targets(res:dict) -> list:
    """The project's targets for this run's device, each with the measured value, its range over the repeats of the
    figures it comes from (low == high for a figure measured once) and `judge`'s verdict on that range."""
    gpu = res['meta']['args']['device'] == 'cuda'
    cs,vs = res['contenders'],res['ratios'].get('vs_stock_shuffle', {})
    refs = [cs[n] for n in REFERENCES if cs.get(n, {}).get('status') == 'ok']
    # both stock contenders build the same TabularPandas: the faster build is the (stricter) reference, and every
    # build of either is a repeat of it
    tp = [x for r in refs for x in _repeats(r, 'preprocess_s')]
    # CPU time is steadier than wall time where other jobs share the machine
    tc = [b for b in map(_cpu_bounds, refs) if b]
    out = []
    def add(label, name, ref, v, target, smaller=False, rng=None):
        lo,hi = rng or (v, v)   # no range: a figure measured once, judged on that figure
        verdict = None if v is None else judge(target, lo, hi, smaller)
        out.append({'name': label, 'contender': name, 'reference': ref, 'value': v, 'target': target,
                    'smaller': smaller, 'range': None if v is None else [lo, hi],
                    'verdict': verdict, 'met': {'met': True, 'NOT met': False}.get(verdict)})
    def worst(d, lo=32768, hi=204800):
        "The batch sizes in the targets' range (all of them if none is), and the smallest value over them."
        bss = [bs for bs,x in (d or {}).items() if lo <= int(bs) <= hi and x is not None] or \
              [bs for bs,x in (d or {}).items() if x is not None]
        return bss, (min(d[bs] for bs in bss) if bss else None)
    for name in ('gpu_cudf', 'gpu_pandas') if gpu else ('gpu_pandas',):
        if name not in vs: continue
        cuda,c = gpu and name == 'gpu_cudf',cs[name]
        add('preprocess vs TabularPandas', name, 'fastest stock TabularPandas build',
            ratio(min(tp), c.get('preprocess_s')) if tp else None, 20. if cuda else 1.,
            rng=ratio_range(tp, _repeats(c, 'preprocess_s')))
        # the smallest speedup over the batch sizes lies between the smallest low and the smallest high
        bss,v = worst(vs[name]['loader_speedup'])
        rs = [ratio_range(_epochs(c, bs), _epochs(cs['stock_shuffle'], bs)) for bs in bss]
        add('loader vs TabDataLoader (true shuffle), bs 32k-200k', name, 'stock_shuffle', v, 200. if cuda else 10.,
            rng=(min(r[0] for r in rs), min(r[1] for r in rs)) if rs and None not in rs else None)
        # measured once: a training epoch, the memory figures, the gather bandwidth (itself a mean of many calls)
        if cuda: add('one training epoch vs stock fastai', name, 'stock_shuffle', vs[name]['train_speedup'], 20.)
        else:
            # peak RSS counts bytes, not time: a busy machine slows a process but hardly changes the pages it
            # touches, and a repeat would take a fresh process per contender; it is judged on its one figure
            add('peak RSS <= TabularPandas (ratio)', name, 'stock_shuffle', vs[name]['peak_rss_ratio'], 1., True)
            ours = _cpu_bounds(c)
            add('in-memory ETL (build + packing) vs TabularPandas, CPU time', name, 'least stock TabularPandas CPU',
                ratio(min(b[0] for b in tc), ours[0]) if tc and ours else None, 1.5,
                rng=ratio_range([x for b in tc for x in b], ours) if tc and ours else None)
        held = c.get('held_after_dataloaders') or {}
        if cuda: add('resident after dataloaders() <= packed rows (ratio)', name, 'its packed rows',
                     held.get('resident_vs_packed'), 1.2, True)
        if gpu: add('device memory after dataloaders() <= packed rows (ratio)', name, 'its packed rows',
                    c.get('gpu_resident_vs_packed'), 1.2, True)
        gb = c.get('gather_bandwidth')
        if gpu and gb:
            add('batch gather vs device copy bandwidth', name, 'copy_ of same-size buffers',
                worst({bs: d['fraction_of_copy'] for bs,d in gb.items()})[1], .5)
    return out

def _curve_growth(curve:dict) -> dict:
    "Per-row cost at the largest N over the smallest: the loader's, and the raw gather's (the memory system's floor)."
    out = {}
    for name,pts in curve.items():
        pts = [p for p in pts if p.get('loader_ns_per_row')]
        if len(pts) < 2: continue
        lo,hi = min(pts, key=lambda p: p['rows']),max(pts, key=lambda p: p['rows'])
        out[name] = {k: {bs: ratio(v, lo.get(k, {}).get(bs)) for bs,v in hi.get(k, {}).items()}
                     for k in ('loader_ns_per_row', 'gather_ns_per_row', 'overhead_ns_per_row') if hi.get(k)}
    return out

def format_table(res:dict) -> str:
    "The run as text: hardware, contender x metric, ratios against each stock loader, targets, caps."
    m,cs = res['meta'],res['contenders']
    hw,v = m['hardware'],m['versions']
    out = [f"fastai_gpu_tabular bench: {m['data']['rows']:,} rows, device {m['args']['device']}, {m['timestamp']}",
           (f"CPU {hw['cpu']} ({hw['cores_usable']}/{hw['cores']} cores), RAM {hw['ram_gb']} GB, GPU "
            f"{(hw['gpu'] or {}).get('name', 'none')}; torch threads {m['args']['threads'] or 'default'}"),
           load_line(hw.get('loadavg'), m.get('loadavg_end'), hw['cores_usable']),
           'versions: ' + ', '.join(f'{k} {x}' for k,x in v.items() if x), '']
    names = list(cs)
    bss = sorted({bs for c in cs.values() for bs in c.get('loader_rows_per_s', {})}, key=int)
    least = ', least after the first build' if m['args'].get('repeat_preprocess', 1) > 1 else ''   # `warm`
    metrics = [('status', 'status'), ('preprocess s' + least, 'preprocess_s'), ('dataloaders() s' + least,
                                                                                'dataloaders_s'),
               ('preprocess CPU s' + least, 'preprocess_cpu_s'), ('dataloaders() CPU s' + least, 'dataloaders_cpu_s'),
               ('peak RSS MB', 'peak_rss_mb'), ('RSS increase MB', 'rss_increase_mb'), ('peak GPU MB', 'peak_gpu_mb'),
               ('GPU peak during load+build MB', 'etl_peak_gpu_mb'),
               ('GPU allocated after dataloaders() MB', 'gpu_after_dataloaders_mb'),
               ('GPU allocated after dataloaders() / packed rows (x)', 'gpu_resident_vs_packed')]
    rows = [[lbl] + [cs[n].get(k) if k == 'status' else fmt(cs[n].get(k)) for n in names] for lbl,k in metrics]
    held = lambda n,k: fmt((cs[n].get('held_after_dataloaders') or {}).get(k))
    rows += [[lbl] + [held(n, k) for n in names] for lbl,k in (
        ('held after dataloaders(): frame MB', 'frame_mb'), ('held: packed rows MB', 'packed_mb'),
        ('held: frame+index+packed MB', 'resident_mb'), ('held / packed rows (x)', 'resident_vs_packed'))]
    if any(len(cs[n].get('preprocess_s_all') or ()) > 1 for n in names):   # the fastest build is the row above
        rows.insert(2, ['preprocess s, first build'] + [fmt((cs[n].get('preprocess_s_all') or [None])[0])
                                                        for n in names])
    # how steady the timed figures were: max / min - 1 over their repeats (the builds after the first)
    sp = lambda n: cs[n].get('spread') or {}
    rows += [[f'spread of {lbl}, max/min - 1'] + [fmt_spread(sp(n).get(k)) for n in names]
             for lbl,k in (('preprocess s', 'preprocess_s'), ('preprocess CPU s', 'preprocess_cpu_s'),
                           ('dataloaders() CPU s', 'dataloaders_cpu_s'))
             if any(sp(n).get(k) for n in names)]
    for bs in bss:
        rows.append([f'loader rows/s bs={bs}'] + [fmt(cs[n].get('loader_rows_per_s', {}).get(bs)) +
                     ('*' if cs[n].get('loader_detail', {}).get(bs, {}).get('capped') else '') for n in names])
    for bs in bss:
        loader_sp = [(sp(n).get('loader_rows_per_s') or {}).get(bs) for n in names]
        if any(loader_sp):
            rows.append([f'spread of loader epochs bs={bs}, max/min - 1'] + [fmt_spread(x) for x in loader_sp])
    for bs in bss:   # the loader against bare `index_select`s of the same packed rows: the gather's floor
        share = [cs[n].get('loader_detail', {}).get(bs, {}).get('loader_vs_bare') for n in names]
        if any(share): rows.append([f'loader / bare index_select rows/s bs={bs}'] + [fmt(x, 'x') for x in share])
    for bs in bss:   # fastai's int64 codes (the default) against the packed int32 ones (`cat_dtype=torch.int32`)
        c32 = [cs[n].get('loader_detail', {}).get(bs, {}).get('int32_codes') or {} for n in names]
        if not any(c32): continue
        rows.append([f'loader rows/s bs={bs}, int32 codes'] + [fmt(c.get('rows_per_s')) for c in c32])
        rows.append([f'int64 / int32 codes rows/s bs={bs}'] + [fmt(c.get('int64_vs_int32_rows_per_s'), 'x')
                                                              for c in c32])
        rows.append([f'batch MB int64 / int32 codes bs={bs}'] + [
            f"{c['batch_bytes'] / 2**20:.2f} / {c['batch_bytes_int32'] / 2**20:.2f}" if c else '-' for c in c32])
    rows += [['train rows/s (1 epoch)'] + [fmt(cs[n].get('train_rows_per_s')) for n in names],
             ['end to end s (load, build, loaders, epoch, preds)'] + [fmt(cs[n].get('end_to_end_s')) for n in names],
             ['valid AUC'] + [fmt(cs[n].get('valid_auc'), 'num') if cs[n].get('valid_auc') is None
                              else f"{cs[n]['valid_auc']:.4f}" for n in names],
             ['load average (1 min), start / end'] + [
                 f"{cs[n]['loadavg_start'][0]:.2f} / {cs[n]['loadavg_end'][0]:.2f}"
                 if cs[n].get('loadavg_start') and cs[n].get('loadavg_end') else '-' for n in names]]
    out.append(table(['metric'] + names, rows))
    for ref,vs in res['ratios'].items():
        if not vs: continue
        out += ['', f'ratios {ref} (speedup = reference time / contender time; RSS = contender / reference)']
        ns = list(vs)
        rows = [['preprocess speedup'] + [fmt(vs[n]['preprocess_speedup'], 'x') for n in ns],
                ['preprocess+dataloaders speedup'] + [fmt(vs[n]['preprocess_total_speedup'], 'x') for n in ns],
                ['preprocess+dataloaders CPU-time speedup'] + [fmt(vs[n].get('preprocess_total_cpu_speedup'), 'x')
                                                               for n in ns]]
        rows += [[f'loader speedup bs={bs}'] + [fmt(vs[n]['loader_speedup'].get(bs), 'x') for n in ns] for bs in bss]
        rows += [['train speedup'] + [fmt(vs[n]['train_speedup'], 'x') for n in ns],
                 ['end-to-end speedup'] + [fmt(vs[n].get('end_to_end_speedup'), 'x') for n in ns],
                 ['peak RSS ratio'] + [fmt(vs[n]['peak_rss_ratio'], 'x') for n in ns],
                 ['RSS increase ratio'] + [fmt(vs[n]['rss_increase_ratio'], 'x') for n in ns],
                 ['valid AUC delta'] + [fmt(vs[n]['valid_auc_delta'], 'd') for n in ns]]
        out.append(table(['metric'] + ns, rows))
    if res.get('targets'):
        out += ['', 'targets: met when even the worst of the repeats meets it, NOT met when even the best misses it, '
                'within noise between; a figure measured once (peak RSS) is judged on it alone']
        rng = lambda r: '-' if not r else 'one figure' if r[0] == r[1] else f'{r[0]:.2f}-{r[1]:.2f}x'
        rows = [[t['name'], t['contender'], fmt(t['value'], 'x'), rng(t.get('range')),
                 f"{'<=' if t.get('smaller', 'ratio' in t['name']) else '>='} {t['target']}x", verdict(t)]
                for t in res['targets']]
        out.append(table(['target', 'contender', 'value', 'range over repeats', 'target', ''], rows))
    for n in names:
        gb = cs[n].get('gather_bandwidth')
        if not gb: continue
        out.append(f'{n} gather vs copy_ of same-size buffers (GB/s): ' + ', '.join(
            f"bs={bs} {d['gather_gb_s']:.2f}/{d['copy_gb_s']:.2f} ({d['fraction_of_copy']:.0%})"
            for bs,d in gb.items()))
    for n in names:
        fb = cs[n].get('cpu_fallbacks')
        if fb is not None:
            out.append(f'{n}: operations cudf.pandas ran on the CPU (calls): '
                       + (', '.join(f'{k} {v}' for k,v in fb.items()) or 'none'))
    capped = [f"{n} bs={bs} ({d['method']}, {d['rows']:,} rows in {d['seconds']:.0f} s)" for n in names
              for bs,d in cs[n].get('loader_detail', {}).items() if d.get('capped')]
    if capped: out.append(f"* capped at --max-loader-s {m['args']['max_loader_s']}: " + '; '.join(capped))
    for n in names:
        if cs[n].get('status') != 'ok': out.append(f"{n}: {cs[n]['status']}: {cs[n].get('reason')}")
    for name,pts in res.get('curve', {}).items():
        ks = [k for k in ('loader_ns_per_row', 'gather_ns_per_row', 'overhead_ns_per_row')
              if any(p.get(k) for p in pts)]
        what = (', of bare gathers (a randperm, then an index_select a batch: the memory system\'s floor) and of the '
                'loader\'s own work (loader - gather)') if len(ks) > 1 else ''
        out += ['', f'cost curve {name}: ns per row of the loader{what}; growth = largest N / smallest N']
        rows = [[f"{p['rows']:,}", fmt(p.get('preprocess_us_per_row'))] +
                [fmt(p.get(k, {}).get(bs)) for bs in bss for k in ks] for p in pts]
        g = res.get('curve_growth', {}).get(name, {})
        rows.append(['growth', ''] + [fmt(g.get(k, {}).get(bs), 'x') for bs in bss for k in ks])
        out.append(table(['rows', 'prep us/row'] + [f"{k.split('_')[0]} bs={bs}" for bs in bss for k in ks], rows))
    return '\n'.join(out)

def plot_ratios(res:dict, path) -> Path:
    "A PNG of the speedups against each stock loader (log scale, targets dashed), and the cost curve if there is one."
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    refs = [(ref, vs) for ref,vs in res['ratios'].items() if vs]
    curve = {n: pts for n,pts in res.get('curve', {}).items() if len(pts) > 1}
    n_ax = max(len(refs), 1) + (1 if curve else 0)
    fig = Figure(figsize=(6.5 * n_ax, 5), layout='constrained')
    FigureCanvasAgg(fig)
    axs = fig.subplots(1, n_ax, squeeze=False)[0]
    gpu = res['meta']['args']['device'] == 'cuda'
    for ax,(ref,vs) in zip(axs, refs):
        names = list(vs)
        bss = sorted({bs for v in vs.values() for bs in v['loader_speedup']}, key=int)
        labels = ['preprocess'] + [f'loader\nbs={int(bs):,}' for bs in bss] + ['train\nepoch', 'peak RSS\n(ref/ours)']
        w = 0.8 / max(len(names), 1)
        for i,n in enumerate(names):
            v = vs[n]
            ys = [v['preprocess_speedup']] + [v['loader_speedup'].get(bs) for bs in bss] + \
                 [v['train_speedup'], ratio(1., v['peak_rss_ratio'])]
            xs = [j + (i - (len(names) - 1) / 2) * w for j in range(len(labels))]
            ax.bar(xs, [y if y else 0 for y in ys], w, label=n)
            for x,y in zip(xs, ys):
                if y: ax.annotate(f'{y:.2g}x', (x, y), ha='center', va='bottom', fontsize=7)
        tg = {'preprocess': 20. if gpu else 1., 'peak RSS\n(ref/ours)': None if gpu else 1.}
        for bs in bss:
            if 32768 <= int(bs) <= 204800: tg[f'loader\nbs={int(bs):,}'] = 200. if gpu else 10.
        if gpu: tg['train\nepoch'] = 20.
        for j,lbl in enumerate(labels):   # the targets are set against TabDataLoader's true shuffle
            if ref == 'vs_stock_shuffle' and tg.get(lbl): ax.hlines(tg[lbl], j - .45, j + .45, colors='red', ls='--')
        ax.axhline(1, color='grey', lw=0.8)
        ax.set_yscale('log')
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_ylabel(f'speedup vs {ref[3:]} (x, log)')
        ax.set_title(f"vs {ref[3:]}: {res['meta']['data']['rows']:,} rows, {res['meta']['args']['device']}, "
                     f"torch threads {res['meta']['args']['threads'] or 'default'}"
                     + ("\n(red dashes: the targets)" if ref == 'vs_stock_shuffle' else ''), fontsize=9)
        ax.legend(fontsize=8)
    if curve:
        ax = axs[-1]
        for n,pts in curve.items():
            for bs in sorted({bs for p in pts for bs in p.get('loader_ns_per_row', {})}, key=int):
                for k,st,lbl in (('loader_ns_per_row', 'o-', 'loader'), ('gather_ns_per_row', 'x:', 'bare gather')):
                    p2 = [p for p in pts if bs in p.get(k, {})]
                    if len(p2) < 2: continue
                    ax.plot([p['rows'] for p in p2], [p[k][bs] for p in p2], st, label=f'{n} {lbl} bs={bs}')
        ax.set_xscale('log')
        ax.set_yscale('log')
        ax.set_xlabel('rows')
        ax.set_ylabel('loader ns per row')
        ax.set_title('loader cost per row against N (flat = no growth)', fontsize=9)
        ax.legend(fontsize=7)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path

# --- the run -------------------------------------------------------------------------------------------------------
def _parquet_rows(path):
    import pyarrow.parquet as pq
    return pq.read_metadata(path).num_rows

def _make_data(path, rows, seed) -> float:
    "Write the synthetic parquet in a child process (its multi-GB peak stays out of this one); seconds taken."
    t0 = time.perf_counter()
    code = ('import sys; from fastai_gpu_tabular.datasets import criteo_parquet; '
            'criteo_parquet(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))')
    subprocess.run([sys.executable, '-c', code, str(path), str(rows), str(seed)], check=True)
    return round(time.perf_counter() - t0, 2)

def _spawn(name, opts, data, no_train=False) -> dict:
    "Run one contender in a fresh interpreter; a crash or timeout becomes a 'failed' record."
    if name in NEED_CUDF:   # what is known without importing cuDF (which starts CUDA) skips without a process
        import importlib.util
        if importlib.util.find_spec('cudf') is None: return {'status': 'skipped', 'reason': 'cuDF is not installed'}
        if opts.device != 'cuda': return {'status': 'skipped', 'reason': 'cuDF needs a GPU: --device cuda'}
    pre = []
    if name == 'stock_cudf_pandas':   # cudf.pandas must be installed before pandas is first imported
        pre = ['-c', 'import runpy, sys, cudf.pandas; cudf.pandas.install(); '
                     "runpy.run_module('fastai_gpu_tabular.bench', run_name='__main__')"]
    with tempfile.TemporaryDirectory() as d:
        o = {**vars(opts), 'data': str(data), 'no_train': opts.no_train or no_train}
        Path(d, 'opts.json').write_text(json.dumps(o))
        cmd = [sys.executable, *(pre or ['-m', 'fastai_gpu_tabular.bench']), '--worker', name, '--worker-dir', d]
        return run_child(cmd, opts.timeout, Path(d, 'result.json'))

def run_child(cmd, timeout, out) -> dict:
    "Run `cmd` and read the JSON record it writes to `out`; a crash or a timeout becomes a 'failed' record."
    try: p = subprocess.run(cmd, timeout=timeout, check=False)
    except subprocess.TimeoutExpired: return {'status': 'failed', 'reason': f'timed out after {timeout} s'}
    if Path(out).exists(): return json.loads(Path(out).read_text())
    why = ' (killed: out of memory?)' if p.returncode in (-9, 137) else ''
    return {'status': 'failed', 'reason': f'the worker exited with code {p.returncode}{why} and wrote no result'}

def _curve_point(c):
    p = {'rows': c['rows'], 'preprocess_s': c.get('preprocess_s'), 'peak_rss_mb': c.get('peak_rss_mb'),
         'loader_rows_per_s': c.get('loader_rows_per_s', {})}
    p['preprocess_us_per_row'] = 1e6 * p['preprocess_s'] / c['rows'] if p['preprocess_s'] else None
    p['loader_ns_per_row'] = {bs: 1e9 / v for bs,v in p['loader_rows_per_s'].items() if v}
    # the bare gather, timed between the loader's epochs: what is left over is the loader's own cost
    det = {bs: d for bs,d in c.get('loader_detail', {}).items() if 'bare_ns_per_row' in d}
    if det:
        p['gather_ns_per_row'] = {bs: d['bare_ns_per_row'] for bs,d in det.items()}
        p['overhead_ns_per_row'] = {bs: d['overhead_ns_per_row'] for bs,d in det.items()}
    return p

def run_bench(opts) -> dict:
    "Every contender in `opts.contenders`, each in its own process, plus ratios, targets and the optional cost curve."
    t_start = time.perf_counter()
    data = Path(opts.data) if opts.data else Path(opts.out).parent/f'criteo_{opts.rows}_s{opts.seed}.parquet'
    make_s = None if data.exists() else _make_data(data, opts.rows, opts.seed)
    rows = _parquet_rows(data)
    if opts.rows and rows != opts.rows:
        print(f'[bench] note: {data} holds {rows:,} rows, not --rows {opts.rows:,}', file=sys.stderr)
    opts.rows = rows
    meta = {'schema_version': SCHEMA_VERSION, 'timestamp': datetime.now(UTC).isoformat(timespec='seconds'),
            'command': ' '.join(['python -m fastai_gpu_tabular.bench'] + [shlex.quote(a) for a in opts.argv]),
            'hardware': hardware(opts.device), 'versions': versions(), 'git': git_state(),
            'args': {k: v for k,v in vars(opts).items() if k != 'argv'},
            'data': {'path': str(data), 'rows': rows, 'seed': opts.seed, 'bytes': data.stat().st_size,
                     'make_s': make_s}}
    res = {'meta': meta, 'contenders': {}}
    for name in opts.contenders:
        t0 = time.perf_counter()
        res['contenders'][name] = c = _spawn(name, opts, data)
        print(f"[bench] {name}: {c['status']} in {time.perf_counter() - t0:.0f} s"
              + (f" ({c['reason']})" if c.get('reason') else ''), file=sys.stderr, flush=True)
    if opts.curve:
        res['curve'] = {}
        for n in opts.curve:
            p = data if n == rows else Path(opts.out).parent/f'criteo_{n}_s{opts.seed}.parquet'
            if not p.exists(): _make_data(p, n, opts.seed)
            for name in opts.curve_contenders:
                main_run = res['contenders'].get(name, {})
                # the main run already measured this N: no second process
                c = main_run if n == rows and main_run.get('status') == 'ok' else _spawn(name, opts, p, no_train=True)
                if c['status'] == 'ok': res['curve'].setdefault(name, []).append(_curve_point(c))
                print(f"[bench] curve {name} {n:,} rows: {c['status']}", file=sys.stderr, flush=True)
        res['curve_growth'] = _curve_growth(res['curve'])
    res['ratios'] = compute_ratios(res['contenders'])
    res['targets'] = performance_targets(res)
    meta['wall_s'] = round(time.perf_counter() - t_start, 1)
    meta['loadavg_end'] = [round(x, 2) for x in os.getloadavg()]
    return res

