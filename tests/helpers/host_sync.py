"""Counting the calls a piece of code makes that would make the host wait for a CUDA device: reads of a tensor's value
in Python, copies to the host, ops whose output size depends on the values, uploads of Python data."""
import numbers
import torch
from torch.overrides import TorchFunctionMode

__all__ = ['HostConversions']

# a tensor's value read in Python, or copied to the host
READS = frozenset({'item', 'tolist', 'numpy', 'cpu', '__bool__', '__float__', '__int__', '__index__', '__complex__'})
# the output's size is a count of values: the host reads it back before it can allocate the output
SIZED = frozenset({'nonzero', 'argwhere', 'masked_select', 'unique', 'unique_consecutive'})
# a tensor made from Python (or NumPy) data: on CUDA a copy from pageable memory, which the host waits for
UPLOADS = frozenset({'tensor', 'as_tensor', 'new_tensor'})

def _index_kind(idx) -> str|None:
    "'a mask' or 'a list' where an index holds one (indexing by a mask is a `nonzero`, by a list an upload), else None."
    parts = idx if isinstance(idx, tuple) else (idx,)
    if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in parts): return 'a mask'
    if any(isinstance(i, list) for i in parts): return 'a list'
    return None

def host_wait(name:str, args:tuple, kwargs:dict) -> str|None:
    """Why the torch call `name(*args, **kwargs)` makes the host wait for a CUDA device, or None. Every tensor counts as
    one on the device, as the loaders' are there."""
    if name in READS or name in SIZED: return name
    if name == 'where' and len(args) + len(kwargs) == 1: return 'where(condition) (a nonzero)'
    if name in ('__getitem__', '__setitem__') and (kind := _index_kind(args[1])):
        # `t[mask] = number` is a `masked_fill_` (ATen's canDispatchToMaskedFill: a CPU scalar, one mask): no wait
        fill = name == '__setitem__' and isinstance(args[1], torch.Tensor) and isinstance(args[2], numbers.Number)
        if not (kind == 'a mask' and fill): return f'{name} by {kind}'
    if name == 'repeat_interleave' and kwargs.get('output_size') is None:
        repeats = args[1] if len(args) > 1 else kwargs.get('repeats', args[0])
        if isinstance(repeats, torch.Tensor): return 'repeat_interleave by a tensor without output_size'
    if name in UPLOADS:
        data = args[1] if name == 'new_tensor' else args[0] if args else kwargs.get('data')
        if not isinstance(data, torch.Tensor): return f'{name} of host data'
    return None

class HostConversions(TorchFunctionMode):
    """Records every torch call that would make the host wait for a CUDA device (`host_wait`): a tensor's value read in
    Python or copied to the host; a boolean-mask index, `nonzero`, `masked_select`, `unique` or `repeat_interleave`
    without `output_size`, whose output size the host must read first; `torch.tensor` of a list (a pageable upload)."""
    names = READS | SIZED | UPLOADS
    def __init__(self):
        super().__init__()
        self.seen = []
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        why = host_wait(getattr(func, '__name__', ''), args, kwargs)
        if why: self.seen.append(why)
        return func(*args, **kwargs)
