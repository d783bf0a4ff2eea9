"""FGT_FAKE_DEVICE=lazy: the suite as a GPU machine runs it, on a CPU. fastai's `default_device()` (what loaders and
learners use when given no device) returns torch's `lazy` device: TorchScript lazy tensors, computed on the CPU, which
refuse to mix with CPU tensors as cuda tensors do. `torch.equal` across devices and `.numpy()` off the CPU raise, as
with cuda. Lazy tensors have no sparse layout and no autocast: the tests named in `LAZY_CANNOT` skip, each saying why.
A child Python that a test starts runs on the stand-in too when its code begins with `CHILD_PRELUDE`."""
import sys
import threading
from pathlib import Path
import pytest

__all__ = ['LAZY_CANNOT', 'CHILD_PRELUDE', 'use_fake_device']

_SPARSE = "sparse gradients (nn.Embedding(sparse=True)): torch's lazy tensors have no sparse layout"
# a test function's name, or one case of it (`name[param]`): why it cannot run on the lazy device
LAZY_CANNOT = {
    'test_sparse_and_dense_reach_comparable_loss': _SPARSE,
    'test_sparse_with_lamb_and_lr_mult': _SPARSE,
    'test_save_load_keeps_optimizer_state[sparse]': _SPARSE,
    'test_fused_sparse_step_equals_unfused_sparse': _SPARSE,
    'test_fused_sparse_trains_as_sparse_adam': _SPARSE,
    'test_sparse_table_steps_as_sparse_adam_through_the_learner': _SPARSE,
    'test_model_takes_int64_and_int32_codes[sparse]': _SPARSE,
    'test_model_takes_int64_and_int32_codes[fused_sparse]': _SPARSE,
    'test_bf16_autocast_trains': "torch.autocast has no lazy device type",
}

# what a child Python runs first: the stand-in where the parent has it (FGT_FAKE_DEVICE is inherited)
CHILD_PRELUDE = f"""import os, sys
if os.environ.get('FGT_FAKE_DEVICE'):
    sys.path.insert(0, {str(Path(__file__).parents[1])!r})
    from helpers.fake_device import use_fake_device
    use_fake_device(os.environ['FGT_FAKE_DEVICE'])
"""

def use_fake_device(name):
    "Make fastai's `default_device()` return `name` everywhere it was imported; `torch.equal`/`.numpy()` check devices."
    import fastai.learner
    import fastai.tabular.all
    import fastai.torch_core as tc
    import fastai_gpu_tabular.__main__

    # what imports default_device, before it is replaced
    import fastai_gpu_tabular.all  # noqa: F401
    if name != 'lazy': raise pytest.UsageError(f"FGT_FAKE_DEVICE={name!r}: only 'lazy' runs on a CPU")
    import torch._lazy.ts_backend
    torch._lazy.ts_backend.init()
    # as with cuda, `model.to(device)` keeps the Parameter objects (an optimizer made before `fit` still holds them)
    module_to = torch.nn.Module.to
    def swapping_to(m, *a, **k):
        torch.__future__.set_swap_module_params_on_conversion(True)
        try: return module_to(m, *a, **k)
        finally: torch.__future__.set_swap_module_params_on_conversion(False)
    torch.nn.Module.to = swapping_to
    dev, orig, on_host = torch.device(name, 0), tc.default_device, threading.local()
    def default_device(use=-1):
        if getattr(on_host, 'load', False): return torch.device('cpu')   # inside a `torch.load(map_location='cpu')`
        return dev if orig(use).type == 'cpu' and use in (-1, None, True) else orig(use)
    for m in list(sys.modules.values()):
        if getattr(m, 'default_device', None) is orig: m.default_device = default_device
    equal = torch.equal
    def checked_equal(a, b):
        if a.device != b.device:
            raise RuntimeError(f"Cannot compare two tensors on different devices. Got: {a.device} and {b.device}")
        return equal(a, b)
    torch.equal = torch.Tensor.equal = checked_equal
    numpy = torch.Tensor.numpy
    def checked_numpy(t, *a, **k):
        if t.device.type != 'cpu':
            raise TypeError(f"can't convert {t.device} device type tensor to numpy. Use Tensor.cpu() first.")
        return numpy(t, *a, **k)
    torch.Tensor.numpy = checked_numpy
    copy_ = torch.Tensor.copy_   # a CPU tensor can copy a cuda one (load_state_dict does): lazy ones need a `.cpu()`
    def cross_copy_(t, src, *a, **k): return copy_(t, src.cpu() if t.device.type == 'cpu' else src, *a, **k)
    torch.Tensor.copy_ = cross_copy_
    # lazy tensors have no storage to save: pickle a CPU copy that `to_device` puts on the default device when loaded
    # (`map_location=lazy` keeps the CPU storage), or on the CPU where the load maps to it, as a cuda tensor's would be
    # (`load_learner(cpu=True)`)
    load = torch.load
    def mapped_load(f, map_location=None, *a, **k):
        on_host.load = isinstance(map_location, (str, torch.device)) and torch.device(map_location).type == 'cpu'
        try: return load(f, map_location, *a, **k)
        finally: on_host.load = False
    torch.load = mapped_load
    reduce_ex = torch.Tensor.__reduce_ex__
    def lazy_reduce_ex(t, proto):
        return (tc.to_device, (t.detach().cpu(),)) if t.device.type == 'lazy' else reduce_ex(t, proto)
    torch.Tensor.__reduce_ex__ = lazy_reduce_ex
    torch.serialization.add_safe_globals([tc.to_device])
    torch.serialization.register_package(11, lambda o: None, lambda s, loc: s if loc.startswith('lazy') else None)
    # a lazy graph grows until something reads a value: cut it after every step (and zero_grad), or each step recompiles
    # all the steps before it
    grad_opt = fastai.learner.Learner._do_grad_opt
    def _do_grad_opt(learn): grad_opt(learn); torch._lazy.mark_step()
    fastai.learner.Learner._do_grad_opt = _do_grad_opt
