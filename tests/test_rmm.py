"""`use_rmm_for_torch`: torch's CUDA allocations come from RMM's pool where cuDF is (in a fresh process: the allocator
can be set only before torch's first allocation); a clear error where RMM is absent."""
import subprocess
import sys
import pytest
from fastai_gpu_tabular.backend import use_rmm_for_torch

def test_without_rmm_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, 'rmm', None)   # what `import rmm` meets where RMM is not installed
    with pytest.raises(ImportError, match=r'use_rmm_for_torch needs RMM, which comes with cuDF.*cuda12\] or \[cuda13'):
        use_rmm_for_torch()

CHILD = '''
import rmm.statistics, torch
from fastai_gpu_tabular.backend import use_rmm_for_torch, require_cudf
use_rmm_for_torch()
rmm.statistics.enable_statistics()
before = rmm.statistics.get_statistics().current_bytes
x = torch.empty(64 * 2**20, dtype=torch.uint8, device='cuda')
grew = rmm.statistics.get_statistics().current_bytes - before
s = require_cudf().Series(range(1000))   # cuDF allocates from the same pool, alongside
assert grew >= x.numel() and int(s.sum()) == 499500, grew
print('ok', grew)
'''

@pytest.mark.cudf
def test_torch_allocates_from_rmm():
    "A 64 MiB torch tensor shows in RMM's statistics: it came from RMM, not torch's caching allocator."
    p = subprocess.run([sys.executable, '-c', CHILD], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.startswith('ok'), p.stderr[-3000:]
