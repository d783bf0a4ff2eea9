"""Markers and fixtures. `gpu` tests need CUDA and cuDF: they skip, with the reason, where those are missing,
and fail instead when FGT_REQUIRE_GPU=1 (set it on GPU machines, so a broken install cannot pass as skips).

FGT_FAKE_DEVICE=lazy runs the suite with fastai's `default_device()` on a device that is not the CPU, as on a GPU
machine (see tests/fake_device.py): a test that assumes the CPU, or mixes the CPU with the loaders' device, fails."""
import os
import pytest

from fastai_gpu_tabular.backend import cudf_available, cudf_reason, to_backend

REQUIRE_GPU = os.environ.get('FGT_REQUIRE_GPU') == '1'
FAKE_DEVICE = os.environ.get('FGT_FAKE_DEVICE')

if FAKE_DEVICE:
    from fake_device import LAZY_CANNOT, use_fake_device
    use_fake_device(FAKE_DEVICE)

def pytest_collection_modifyitems(config, items):
    if FAKE_DEVICE:
        for it in items:
            if any(k in it.name for k in LAZY_CANNOT):
                it.add_marker(pytest.mark.skip(reason="torch's lazy device has no sparse tensors or autocast"))
    gpu_items = [it for it in items if 'gpu' in it.keywords]
    # probe cuDF only when a gpu test was collected: importing it initialises CUDA
    if not gpu_items or cudf_available(): return
    reason = f"needs CUDA and cuDF: {cudf_reason()}"
    if REQUIRE_GPU: raise pytest.UsageError(f"FGT_REQUIRE_GPU=1 but {len(gpu_items)} gpu test(s) cannot run: {reason}")
    for it in gpu_items: it.add_marker(pytest.mark.skip(reason=reason))

@pytest.fixture(params=['pandas', pytest.param('cudf', marks=pytest.mark.gpu)])
def backend(request):
    "The frame backend a test runs on: pandas everywhere, cuDF on a GPU machine."
    return request.param

@pytest.fixture
def as_backend(backend):
    "Turn a pandas frame into the current backend's frame."
    return lambda df: to_backend(df, backend)
