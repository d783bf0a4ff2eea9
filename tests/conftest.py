"""Markers and fixtures. Two GPU tiers: `cuda` tests need a CUDA torch (the pandas backend with the packed rows, the
loader, the optimizer, the metrics and the stream on the GPU), `cudf` tests need cuDF too (the cuDF backend). Each
skips, with the reason, where its tier is missing, and fails instead when its tier is required:
FGT_REQUIRE=cuda (a GPU machine without cuDF), FGT_REQUIRE=cuda,cudf or FGT_REQUIRE_GPU=1 (with cuDF), so that a
broken install cannot pass as skips.

FGT_FAKE_DEVICE=lazy runs the suite with fastai's `default_device()` on a device that is not the CPU, as on a GPU
machine (see tests/helpers/fake_device.py): a test that assumes the CPU, or mixes the CPU with the loaders' device,
fails.

FGT_FAKE_CUDF=26.10 (or 26.06) runs the `cudf` tier against a stand-in for cuDF and CuPy (tests/helpers/fake_cudf):
stricter than pandas wherever cuDF is, and answering only to cuDF's API at that version. With FGT_FAKE_DEVICE=lazy
too, the whole GPU path (a cuDF frame, its packed rows, batches on a device that is not the CPU) runs on a CPU. The
tests named in `CUDF_STAND_IN_CANNOT` (a real kernel, RMM, device pointers) skip there, each saying why."""
import importlib.util
import os
import pytest
import torch
from hypothesis import settings
from fastai_gpu_tabular.backend import cudf_available, cudf_reason, to_backend
from fastai_gpu_tabular.datasets import load_adult, load_movielens

TIERS = ('cuda', 'cudf')
REQUIRE = (set(TIERS) if os.environ.get('FGT_REQUIRE_GPU') == '1'
           else set(os.environ.get('FGT_REQUIRE', '').split(',')) - {''})
if REQUIRE - set(TIERS): raise ValueError(f"FGT_REQUIRE names {sorted(REQUIRE - set(TIERS))}: the tiers are {TIERS}")
FAKE_DEVICE = os.environ.get('FGT_FAKE_DEVICE')
FAKE_CUDF = os.environ.get('FGT_FAKE_CUDF')
# `--hypothesis-profile=ci` (.ci/run): the same examples every run, and no example database written into the checkout
settings.register_profile('ci', derandomize=True, database=None)

if FAKE_DEVICE:
    from helpers.fake_device import LAZY_CANNOT, use_fake_device
    use_fake_device(FAKE_DEVICE)
if FAKE_CUDF:
    from helpers.fake_cudf import CUDF_STAND_IN_CANNOT, install
    install(FAKE_CUDF, device=FAKE_DEVICE or 'cpu')

def pytest_collection_modifyitems(config, items):
    if FAKE_DEVICE:
        for it in items:
            why = LAZY_CANNOT.get(it.name) or LAZY_CANNOT.get(it.originalname)
            if why: it.add_marker(pytest.mark.skip(reason=f'FGT_FAKE_DEVICE=lazy cannot run it: {why}'))
    if FAKE_CUDF:
        for it in items:
            why = 'cudf' in it.keywords and (CUDF_STAND_IN_CANNOT.get(it.name) or
                                             CUDF_STAND_IN_CANNOT.get(it.originalname))
            if why: it.add_marker(pytest.mark.skip(reason=f'FGT_FAKE_CUDF cannot run it: {why}'))
    for tier in TIERS:
        tier_items = [it for it in items if tier in it.keywords]
        # probe cuDF only when a cudf test was collected: importing it initialises CUDA
        if not tier_items: continue
        reason = _missing(tier)
        why = {it: reason or _lacks(it.get_closest_marker(tier)) for it in tier_items}
        cannot = {it: r for it,r in why.items() if r}
        if not cannot: continue
        if tier in REQUIRE:
            raise pytest.UsageError(f"the {tier} tier is required (FGT_REQUIRE/FGT_REQUIRE_GPU) but {len(cannot)} "
                                    f"{tier} test(s) cannot run: {next(iter(cannot.values()))}")
        for it,r in cannot.items(): it.add_marker(pytest.mark.skip(reason=r))

def _missing(tier):
    "Why the `tier` tests cannot run here, or None."
    if tier == 'cudf' and FAKE_CUDF: return None   # the stand-in serves it, on the stand-in device
    if not torch.cuda.is_available():
        return f"needs a CUDA device and a CUDA build of torch (torch {torch.__version__})"
    if tier == 'cudf' and not cudf_available(): return f"needs cuDF: {cudf_reason()}"
    return None

def _lacks(marker):
    "The first module a tier's test also needs (`@pytest.mark.cudf(needs=['dask_cudf'])`) that is not installed."
    missing = [m for m in (marker.kwargs.get('needs', ()) if marker else ()) if importlib.util.find_spec(m) is None]
    if missing: return f"needs {missing[0]}: the CUDA extras install it (pip install '.[cuda12]' or '.[cuda13]')"

@pytest.fixture(params=['pandas', pytest.param('cudf', marks=pytest.mark.cudf)])
def backend(request):
    "The frame backend a test runs on: pandas everywhere, cuDF on a GPU machine."
    return request.param

@pytest.fixture
def as_backend(backend):
    "Turn a pandas frame into the current backend's frame."
    return lambda df: to_backend(df, backend)

@pytest.fixture(scope='module')
def adult():
    "UCI Adult as `load_adult` gives it, once a test module (a module that needs another cut defines its own)."
    return load_adult()

@pytest.fixture(scope='module')
def ml():
    "MovieLens latest-small as `load_movielens` gives it, once a test module."
    return load_movielens()
