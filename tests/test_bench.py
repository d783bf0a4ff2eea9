"The bench end to end at tiny N: each contender runs, the JSON has its schema, the chart exists; no timing asserted."
import argparse
import json
import math
import subprocess
import sys
import pytest
from fastai_gpu_tabular.backend import cudf_available
from fastai_gpu_tabular.bench import CONTENDERS, compute_ratios, format_table, main, time_loader

BS = ['256', '1024']

@pytest.fixture(scope='module')
def bench(tmp_path_factory):
    d = tmp_path_factory.mktemp('bench')
    main(['--rows', '3000', '--bs', ','.join(BS), '--layers', '16', '--emb-sz', '4', '--epochs-loader', '1',
          '--curve', '2000,3000', '--threads', '1', '--repeat-preprocess', '2', '--rmm-torch',
          '--out', str(d/'results.json')])
    return d, json.loads((d/'results.json').read_text())

def _numbers(o):
    "Every number in a nested JSON value."
    if isinstance(o, dict): return [x for v in o.values() for x in _numbers(v)]
    if isinstance(o, list): return [x for v in o for x in _numbers(v)]
    return [o] if isinstance(o, (int, float)) and not isinstance(o, bool) else []

def test_schema(bench):
    _, res = bench
    assert {'meta', 'contenders', 'ratios', 'targets', 'curve', 'curve_growth'} <= set(res)
    meta = res['meta']
    assert meta['schema_version'] == 1 and meta['wall_s'] > 0 and meta['timestamp'] and 'git' in meta
    assert {'cpu', 'cores', 'ram_gb', 'gpu'} <= set(meta['hardware'])
    assert all(meta['versions'][k] for k in ('torch', 'fastai', 'pandas'))
    assert meta['args']['bs'] == [256, 1024] and meta['args']['device'] == 'cpu'
    assert meta['data']['rows'] == 3000 and meta['command'].startswith('python -m fastai_gpu_tabular.bench')
    assert list(res['contenders']) == list(CONTENDERS) + ['gpu_cudf_rmm']   # --rmm-torch adds it

def test_every_contender_ran(bench):
    _, res = bench
    cs = res['contenders']
    loaders = {'stock_weighted': 'TabWeightedDL', 'stock_shuffle': 'TabDataLoader', 'gpu_pandas': 'BatchDataLoader'}
    for name,loader in loaders.items():
        c = cs[name]
        assert c['status'] == 'ok', c.get('reason')
        assert c['loader_type'] == loader and c['rows'] == 3000 and c['n_train'] + c['n_valid'] == 3000
        for k in ('preprocess_s', 'dataloaders_s', 'preprocess_cpu_s', 'dataloaders_cpu_s', 'peak_rss_mb',
                  'baseline_rss_mb', 'train_rows_per_s', 'valid_auc'):
            assert isinstance(c[k], float) and math.isfinite(c[k]) and c[k] > 0, (name, k, c[k])
        assert sorted(c['loader_rows_per_s'], key=int) == BS and all(v > 0 for v in c['loader_rows_per_s'].values())
        assert set(c['rss_phases_mb']) == {'load', 'preprocess', 'dataloaders', 'loader', 'train'}
        assert c['peak_gpu_mb'] is None and len(c['preprocess_s_all']) == len(c['preprocess_cpu_s_all']) == 2
        assert c['preprocess_cpu_s'] == min(c['preprocess_cpu_s_all'])   # a CPU run, two builds: the least CPU
    assert set(cs['gpu_pandas']['gather_bandwidth']) == set(BS)
    # the packed loader yields what fastai's ReadTabBatch does: (cats, conts, y), one row per sample
    assert [b[0][0] for b in cs['gpu_pandas']['batch']] == [b[0][0] for b in cs['stock_shuffle']['batch']]
    for name in ('gpu_cudf', 'stock_cudf_pandas', 'gpu_cudf_rmm'):   # a CPU run: skipped, saying why
        c = cs[name]
        assert c['status'] == 'skipped' and ('cuDF' in c['reason'] or '--device cuda' in c['reason']), c
    # the loader against bare index_selects of its packed rows, timed between its epochs
    for bs in BS:
        d = cs['gpu_pandas']['loader_detail'][bs]
        assert d['loader_vs_bare'] == round(d['bare_ns_per_row'] * d['rows_per_s'] / 1e9, 3) and d['loader_vs_bare'] > 0
    assert 'etl_peak_gpu_mb' in cs['gpu_pandas'] and cs['gpu_pandas']['etl_peak_gpu_mb'] is None   # no GPU here

def test_ratios(bench):
    _, res = bench
    assert set(res['ratios']) == {'vs_stock_shuffle', 'vs_stock_weighted'}
    for vs in res['ratios'].values():
        assert 'gpu_pandas' in vs
        if not cudf_available(): assert 'gpu_cudf' not in vs
        r = vs['gpu_pandas']
        for k in ('preprocess_speedup', 'preprocess_total_speedup', 'preprocess_total_cpu_speedup', 'train_speedup',
                  'peak_rss_ratio'): assert r[k] > 0
        assert sorted(r['loader_speedup'], key=int) == BS
    nums = _numbers(res['ratios']) + _numbers(res['curve_growth'])
    assert nums and all(math.isfinite(x) for x in nums)
    assert all(t['value'] is None or math.isfinite(t['value']) for t in res['targets'])
    etl = [t for t in res['targets'] if 'CPU time' in t['name']]
    assert len(etl) == 1 and etl[0]['contender'] == 'gpu_pandas' and etl[0]['target'] == 1.5 and etl[0]['value'] > 0

def test_curve(bench):
    _, res = bench
    pts = res['curve']['gpu_pandas']
    assert [p['rows'] for p in pts] == [2000, 3000]
    assert all(sorted(p['loader_ns_per_row'], key=int) == BS for p in pts)
    g = res['curve_growth']['gpu_pandas']
    assert {'loader_ns_per_row', 'gather_ns_per_row'} <= set(g) and sorted(g['loader_ns_per_row'], key=int) == BS

def test_outputs(bench):
    d, res = bench
    assert (d/'results.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    txt = format_table(res)
    assert all(n in txt for n in CONTENDERS) and 'loader speedup bs=1024' in txt
    assert 'loader / bare index_select rows/s bs=1024' in txt

def test_import_is_light():
    "Importing the module starts nothing: no fastai, no torch, no cuDF."
    code = 'import sys, fastai_gpu_tabular.bench; print(sorted({"torch", "fastai", "cudf"} & set(sys.modules)))'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == '[]'

def test_cudf_contenders_skip_without_a_process(monkeypatch, tmp_path):
    "On the CPU, or where cuDF is not installed, the cuDF contenders skip, saying why, and start no process."
    from fastai_gpu_tabular.bench import fastai_suite as S
    monkeypatch.setattr(S, 'run_child', lambda *a, **k: pytest.fail('a process was started'))
    opts = argparse.Namespace(device='cpu', no_train=False)
    for name in ('gpu_cudf', 'stock_cudf_pandas', 'gpu_cudf_rmm'):
        c = S._spawn(name, opts, tmp_path/'data.parquet')
        assert c['status'] == 'skipped' and c['reason'] in ('cuDF is not installed', 'cuDF needs a GPU: --device cuda')

def test_bad_contender():
    with pytest.raises(SystemExit, match='unknown contender'): main(['--contenders', 'stock_nope'])

def test_ratios_skip_failed():
    ok = {'status': 'ok', 'preprocess_s': 2., 'dataloaders_s': 0., 'loader_rows_per_s': {'8': 10.},
          'train_rows_per_s': 5., 'peak_rss_mb': 100., 'rss_increase_mb': 10., 'valid_auc': .7}
    cs = {'stock_shuffle': ok, 'gpu_pandas': {**ok, 'preprocess_s': 1., 'loader_rows_per_s': {'8': 40.}},
          'gpu_cudf': {'status': 'failed', 'reason': 'boom'}}
    r = compute_ratios(cs)['vs_stock_shuffle']
    assert set(r) == {'gpu_pandas'}
    assert r['gpu_pandas']['preprocess_speedup'] == 2. and r['gpu_pandas']['loader_speedup'] == {'8': 4.}
    assert r['gpu_pandas']['rss_increase_ratio'] is None   # too small an increase to divide by

def test_scale_rounds():
    "`--scale-repeat`: an ETL reports its median run by CPU seconds; a ratio pairs the rounds and takes their median."
    from fastai_gpu_tabular.bench.scale import _median_run, _ratios
    run = lambda cpu, total: {'status': 'ok', 'total_s': total, 'cpu_s': cpu, 'rows_per_cpu_s': 1000 / cpu,
                              'peak_rss_mb': 10 * cpu, 'state': 'x', 'passes': 2}
    dask, memory = [run(4., 3.), run(1., 2.), run(2., 1.)], [run(2., 1.), run(2., 4.), run(2., 1.)]
    med = _median_run(dask)
    assert med['cpu_s'] == 2. and med['passes'] == 2 and [r['cpu_s'] for r in med['runs']] == [4., 1., 2.]
    assert _median_run(dask[:2])['cpu_s'] == 1.   # the lower of the middle two
    r = _ratios(dask, memory)
    assert r['rows_per_cpu_s_ratios'] == [0.5, 2., 1.] and r['rows_per_cpu_s_ratio'] == 1.
    assert r['total_speedup'] == 1. and r['peak_rss_ratio'] == 1.
    failed = {'status': 'failed', 'reason': 'boom'}
    assert _median_run([dask[0], failed]) is failed and _median_run([dask[0]]) is dask[0]

class _FakeDL:
    "A loader of `n` one-row batches."
    def __init__(self, n): self.n = n
    def __len__(self): return self.n
    def __iter__(self):
        import torch
        return iter([(torch.zeros(1, 2),)] * self.n)

def test_time_loader_cap():
    "Past `max_s` the epoch is cut short, flagged as capped, and its rows/s extrapolated to the whole epoch."
    d = time_loader(_FakeDL(50), epochs=2, warmup=1, max_s=0.)
    assert d['capped'] and d['method'] == 'extrapolated' and d['epochs'] == 0 and d['rows_per_s'] > 0
    d = time_loader(_FakeDL(50), epochs=2, warmup=1)
    assert not d['capped'] and d['method'] == 'full_epochs_best' and d['epochs'] == 2 and d['rows'] == 100
    assert d['rows_per_s'] == max(d['epoch_rows_per_s'])

def test_embedding_suite_small():
    "Every table config runs; the sparse state covers the rows touched, so it is smaller than Adam's dense moments."
    from fastai_gpu_tabular.bench import embedding_suite
    res = embedding_suite(n_table=20_000, dim=8, n_small=2, bs=256, steps=8)
    assert set(res) == {'dense', 'sparse', 'fused', 'fused_sparse'}
    for v in res.values(): assert v['step_ms'] > 0 and v['rows_per_s'] > 0 and v['table_mb'] > 0
    assert res['sparse']['opt_state_mb'] < res['dense']['opt_state_mb']
    assert res['fused']['opt_state_mb'] == res['dense']['opt_state_mb']      # fusing changes no parameter count

def test_multi_hot_suite_small():
    from fastai_gpu_tabular.bench import multi_hot_suite
    res = multi_hot_suite(n=3000, bs=512, vocab=50, dim=4, reps=1)
    for kind in ('genres', 'long_tail'):
        r = res[kind]
        assert r['max_len'] >= r['mean_len'] > 1
        assert r['padded']['memory_mb'] > 0 and r['values_offsets']['gather_ms'] > 0
    assert res['long_tail']['padded']['memory_mb'] > res['long_tail']['values_offsets']['memory_mb']

def test_suite_from_the_command_line(tmp_path):
    "`python -m fastai_gpu_tabular.bench --suite multi_hot` with its size options: the table printed, the JSON written."
    out = tmp_path/'mh.json'
    res = subprocess.run([sys.executable, '-m', 'fastai_gpu_tabular.bench', '--suite', 'multi_hot', '--mh-rows', '3000',
                          '--mh-bs', '512', '--mh-reps', '1', '--threads', '1', '--out', str(out)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads(out.read_text())
    meta, r = data['meta'], data['multi_hot']
    assert meta['suite'] == 'multi_hot' and '--mh-rows 3000' in meta['command'] and meta['torch_threads'] == 1
    assert {'cpu', 'cores', 'ram_gb'} <= set(meta['hardware']) and set(r) == {'genres', 'long_tail'}
    lt = r['long_tail']
    assert lt['padded']['memory_mb'] == round(3000 * lt['max_len'] * 4 / 2**20, 1)   # 3,000 rows reached the suite
    assert all(v['gather_ms'] > 0 for k in r.values() for v in (k['padded'], k['values_offsets']))
    assert 'bag fwd+bwd ms' in res.stdout and res.stdout.count('values_offsets') == 2

def test_suite_options_and_bad_suite(tmp_path):
    res = main(['--suite', 'embeddings', '--emb-rows', '5000', '--emb-bs', '128', '--emb-steps', '7',
                '--out', str(tmp_path/'emb.json')])
    assert res['meta']['suite'] == 'embeddings' and res['embeddings']['dense']['rows_with_state'] == 5000
    assert json.loads((tmp_path/'emb.json').read_text())['embeddings'] == json.loads(json.dumps(res['embeddings']))
    with pytest.raises(SystemExit): main(['--suite', 'nope'])

@pytest.mark.slow
def test_history_suite_small(tmp_path):
    """`--suite history` on 20,000 rows: pandas' groupby and the procs give the same features (their digests), each way
    its CPU seconds, peak RSS and ratios; Dask in four passes (the scan, a shuffle a history proc, the write)."""
    res = main(['--suite', 'history', '--hist-rows', '20000', '--hist-part-rows', '5000', '--hist-n', '3',
                '--out', str(tmp_path/'h.json')])['history']
    assert res['same_features'] is True and set(res['ways']) == {'pandas', 'memory', 'dask', 'dask_base'}
    assert all(v['status'] == 'ok' and v['cpu_s'] > 0 and v['peak_rss_mb'] > 0 for v in res['ways'].values())
    assert res['ways']['dask']['passes'] == 4 and res['ways']['dask']['rows'] == 20000
    assert set(res['ratios']) == {'memory', 'dask', 'dask_base'} and res['ways']['dask_base']['passes'] == 2

@pytest.mark.slow
def test_parquet_suite_small(tmp_path):
    """`--suite parquet` on 20,000 rows: every way from the file to the rows, each with fastai's vocabularies, this
    package's three ways the same packed rows; CPU seconds, peak RSS and ratios to fastai's for each."""
    pytest.importorskip('polars', reason="polars (the test extra) reads the file in the polars way")
    res = main(['--suite', 'parquet', '--pq-rows', '20000', '--out', str(tmp_path/'p.json')])['parquet']
    r = res['sizes']['20000']
    assert set(r['ways']) == {'fastai', 'pandas', 'from_parquet', 'polars'}
    assert all(v['status'] == 'ok' and v['rows'] == 20000 and v['cpu_s'] > 0 and v['peak_rss_mb'] > 0
               for v in r['ways'].values())
    assert r['same_vocab'] is True and r['same_rows'] is True
    assert len({v['packed_sha256'] for k,v in r['ways'].items() if k != 'fastai'}) == 1
    assert set(r['ratios']) == {'pandas', 'from_parquet', 'polars'}
    with pytest.raises(SystemExit): main(['--suite', 'parquet', '--pq-ways', 'nope', '--out', str(tmp_path/'q.json')])
