"""What the Dask tests share: the passes a `TabularDask` makes, counted, and the held or spilled training conts."""
import pytest

@pytest.fixture
def count(monkeypatch):
    """`count()`: a context that counts the passes over the rows (Dask computes) and the Parquet partitions read (each
    a file here) in it, as `{'passes': n, 'reads': n}`."""
    from dask.callbacks import Callback
    from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine
    got, on = {'passes': 0, 'reads': 0}, [False]
    read = ArrowDatasetEngine.read_partition.__func__
    def reading(cls, *a, **k):
        got['reads'] += on[0]
        return read(cls, *a, **k)
    monkeypatch.setattr(ArrowDatasetEngine, 'read_partition', classmethod(reading))
    def start(dsk): got['passes'] += 1
    class _Count:
        def __enter__(self):
            self.cb, on[0] = Callback(start=start), True
            self.cb.__enter__()
            return got
        def __exit__(self, *exc):
            on[0] = False
            self.cb.__exit__(*exc)
    return _Count

@pytest.fixture(params=[True, False], ids=['held', 'spilled'])
def held(request, monkeypatch):
    """Whether the training rows' conts are held in memory for the statistics (they fit the budget), or each statistic
    passes over the partitions (a budget of 0 bytes)."""
    from fastai_gpu_tabular.dask import tabular as dask_tabular
    if not request.param: monkeypatch.setattr(dask_tabular, '_TRAIN_CONTS_BYTES', 0)
    return request.param
