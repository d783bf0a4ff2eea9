"""A CuPy stand-in for the cuDF stand-in: `ndarray` holds a NumPy array "on the device" and, as CuPy does (v14.2.0,
cupy/_core/core.pyx and _kernel.pyx), refuses every implicit move to the host and every NumPy array among a kernel's
operands. `.get()`, `asnumpy` and `tolist` are the host moves. Its functions are the ones the package calls, each a
CuPy function of that name. Torch takes these arrays through `torch.from_dlpack`/`torch.as_tensor` on the stand-in
device (see `patch_torch`), as it takes CuPy's on CUDA."""
import functools
import operator
import types
import numpy as np

__all__ = ['ndarray', 'install_module']

_DEVICE = None   # the torch device a "device" array moves to: set by `patch_torch`

class Device:
    "cupy.cuda.Device: the stand-in has one device, 0"
    def __init__(self, device=None): self.id = 0 if device is None else int(device)
    def __repr__(self): return f'<CUDA Device {self.id}>'
    def __eq__(self, o): return isinstance(o, Device) and o.id == self.id
    def __hash__(self): return self.id
    def __enter__(self): return self
    def __exit__(self, *a): return False

def _unsupported(x):
    # cupy/_core/_scalar.pyx:344 @v14.2.0: a kernel's argument that is neither a CuPy array nor a scalar
    return TypeError(f'Unsupported type {type(x)}')

def _operand(x):
    "A kernel's operand as NumPy: a stand-in array's values, or a Python/NumPy scalar; NumPy arrays are refused."
    if isinstance(x, ndarray): return x._a
    if isinstance(x, np.ndarray):
        if x.ndim == 0: return x[()]
        raise _unsupported(x)
    if isinstance(x, (bool, int, float, complex, np.generic)) or x is None: return x
    raise _unsupported(x)

def _wrap(r):
    if isinstance(r, np.ndarray): return ndarray(r)
    if isinstance(r, np.generic): return ndarray(np.asarray(r))   # CuPy reductions give 0-d arrays, not scalars
    if isinstance(r, tuple): return tuple(_wrap(v) for v in r)
    if isinstance(r, list): return [_wrap(v) for v in r]
    return r

class ndarray:
    "cupy.ndarray, over a NumPy array"
    __array_priority__ = 100   # above NumPy's, as CuPy's: NumPy defers binary operators to it
    def __init__(self, a:np.ndarray):
        if not isinstance(a, np.ndarray): raise TypeError(f"the stand-in wraps NumPy arrays, not {type(a)}")
        self._a = a

    # host moves, explicit only
    def __array__(self, dtype=None, copy=None):
        # cupy/_core/core.pyx:1803-1809 @v14.2.0
        raise TypeError('Implicit conversion to a NumPy array is not allowed. '
                        'Please use `.get()` to construct a NumPy array explicitly.')
    def get(self, stream=None, order='C', out=None, blocking=True): return self._a.copy(order=order)
    def tolist(self): return self._a.tolist()   # core.pyx:694: an explicit copy to host
    def item(self): return self._a.item()
    def __int__(self): return int(self._a)
    def __float__(self): return float(self._a)
    def __bool__(self): return bool(self._a)
    def __index__(self): return operator.index(self._a)
    def __repr__(self): return f'array({self._a!r:.200}) [stand-in cupy]'
    def __iter__(self):   # core.pyx:1821-1824: elements are 0-d device arrays
        if self._a.ndim == 0: raise TypeError('iteration over a 0-d array')
        return (self[i] for i in range(len(self._a)))
    def __len__(self):
        if self._a.ndim == 0: raise TypeError('len() of unsized object')
        return len(self._a)

    # the array's description
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    size = property(lambda self: self._a.size)
    ndim = property(lambda self: self._a.ndim)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    T = property(lambda self: ndarray(self._a.T))
    device = property(lambda self: Device(0))
    flags = property(lambda self: self._a.flags)

    def __getitem__(self, key): return _wrap(self._a[_index(key)])
    def __setitem__(self, key, value): self._a[_index(key)] = _operand(value)

    def astype(self, dtype, order='K', casting=None, subok=None, copy=True):
        return ndarray(self._a.astype(dtype, order=order, copy=copy))
    def copy(self, order='C'): return ndarray(self._a.copy(order=order))
    def view(self, dtype=None): return ndarray(self._a.view(dtype))
    def ravel(self, order='C'): return ndarray(self._a.ravel(order))
    def reshape(self, *shape, order='C'): return ndarray(self._a.reshape(*shape, order=order))
    def fill(self, value): self._a.fill(_operand(value))

    # a kernel over device arrays and scalars; anything else (a pandas or cuDF object) gets its turn
    def _binop(self, other, op):
        try: o = _operand(other)
        except TypeError:
            if isinstance(other, np.ndarray): raise
            return NotImplemented
        return _wrap(op(self._a, o))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # core.pyx:1969-2026: the CuPy ufunc of that name, over CuPy arrays and scalars
        f = _FUNCS.get(ufunc.__name__)
        if f is None or method != '__call__': return NotImplemented
        return f(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        # core.pyx:2028-2044: the CuPy function of that name, or NotImplemented (NumPy then raises TypeError)
        f = _FUNCS.get(func.__name__)
        return NotImplemented if f is None else f(*args, **kwargs)

def _index(key):
    "An index into a stand-in array: device arrays, NumPy arrays (CuPy uploads an index), ints, slices."
    if isinstance(key, tuple): return tuple(_index(k) for k in key)
    return key._a if isinstance(key, ndarray) else key

for _name in ('add', 'sub', 'mul', 'truediv', 'floordiv', 'mod', 'pow', 'and', 'or', 'xor', 'lshift', 'rshift',
              'lt', 'le', 'eq', 'ne', 'gt', 'ge'):
    _op = getattr(operator, f'{_name}_' if _name in ('and', 'or') else _name)
    setattr(ndarray, f'__{_name}__', lambda self, o, _op=_op: self._binop(o, _op))
    if _name not in ('lt', 'le', 'eq', 'ne', 'gt', 'ge'):
        setattr(ndarray, f'__r{_name}__', lambda self, o, _op=_op: self._binop(o, lambda a, b: _op(b, a)))
ndarray.__hash__ = None
for _name in ('neg', 'pos', 'abs', 'invert'):
    _op = getattr(operator, _name)
    setattr(ndarray, f'__{_name}__', lambda self, _op=_op: ndarray(np.asarray(_op(self._a))))
for _name in ('prod', 'min', 'max', 'any', 'all', 'argmax', 'argmin', 'cumsum',
              'cumprod', 'nonzero', 'argsort', 'clip', 'round', 'take', 'repeat', 'squeeze', 'transpose', 'dot',
              'searchsorted', 'sort'):
    def _method(self, *a, _name=_name, **k):
        if _name == 'argsort' and k.get('kind') not in (None, 'stable'):   # cupy/_core/core.pyx:1144-1146
            raise NotImplementedError(f"Sort kind {k['kind']} is not supported")
        r = getattr(self._a, _name)(*(_operand(x) if not isinstance(x, (tuple, list)) else x for x in a), **k)
        return None if _name == 'sort' else _wrap(r)
    setattr(ndarray, _name, _method)

for _name in ('sum', 'mean', 'var', 'std'):   # CuPy's reductions, in a GPU's order (`_reduction`)
    setattr(ndarray, _name, lambda self, *a, _name=_name, **k: _FUNCS[_name](self, *a, **k))

# --- the module's functions: CuPy's of these names, over stand-in arrays --------------------------------------------
def _device_func(name, host_ok=False):
    "The CuPy function `name`: NumPy's over the arrays' values; a NumPy array argument is refused unless `host_ok`."
    f = getattr(np, name)
    def conv(x):
        if isinstance(x, ndarray): return x._a
        if isinstance(x, (list, tuple)): return type(x)(conv(v) for v in x)
        if isinstance(x, np.ndarray) and x.ndim > 0 and not host_ok: raise _unsupported(x)
        return x
    @functools.wraps(f)
    def g(*args, **kwargs): return _wrap(f(*(conv(a) for a in args), **{k: conv(v) for k,v in kwargs.items()}))
    return g

def asarray(a, dtype=None, order=None, *, blocking=False):
    "cupy.asarray: host data is copied to the device (the one place a NumPy array is taken)."
    if isinstance(a, ndarray): return a if dtype is None or a.dtype == dtype else a.astype(dtype)
    if type(a).__module__.split('.')[0] == 'cudf':
        r = _of_cudf(a)
        return r if dtype is None or r.dtype == dtype else r.astype(dtype)
    return ndarray(np.array(a, dtype=dtype, order=order or 'K'))

def _of_cudf(a) -> ndarray:
    """A cuDF column (Series, Index) through its `__cuda_array_interface__` (cupy/_core/core.pyx:3129, 3299-3314
    @v14.2.0): a numeric or bool column's values; with nulls the interface has a mask, which CuPy refuses; a string
    column has no interface (single_column_frame.py:304-315 @6a22d1d, column/string.py:136-140), so CuPy tries
    `__array__`, which cuDF refuses; a categorical one raises (column/categorical.py:288-293). A frame has none.
    The stand-in copies the values where CuPy views them."""
    dt = getattr(a, 'dtype', None)
    if type(dt).__name__ == 'CategoricalDtype':
        raise TypeError("Categorical does not support `__cuda_array_interface__`. Please consider using `.codes` or "
                        "`.categories` if you need this functionality.")
    dt = getattr(dt, 'numpy_dtype', dt)   # a pandas nullable dtype cuDF kept (column.py:2462-2464 @6a22d1d)
    if not isinstance(dt, np.dtype) or dt.kind not in 'biufmM': return ndarray(np.array(a))   # cuDF's __array__
    if a.has_nulls: raise ValueError('CuPy currently does not support masked arrays.')
    return a.to_cupy()

def array(obj, dtype=None, copy=True, order='K', subok=False, ndmin=0, *, blocking=False):
    return asarray(obj, dtype).copy() if copy else asarray(obj, dtype)

def asnumpy(a, stream=None, order='C', out=None, *, blocking=True):
    return a.get() if isinstance(a, ndarray) else np.asarray(a, order=order)

def get_array_module(*args): return _MODULE if any(isinstance(a, ndarray) for a in args) else np

def from_dlpack(x, *, device=None, copy=None):
    "A torch tensor (or any DLPack producer) as a device array: the stand-in copies its values."
    import torch
    if isinstance(x, torch.Tensor): return ndarray(x.detach().cpu().numpy().copy())
    raise TypeError(f"the stand-in's from_dlpack takes torch tensors, not {type(x)}")

def bincount(x, weights=None, minlength=None):
    """cupy.bincount: counts, or sums of `weights`, by `atomicAdd` (cupy/_statistics/histogram.py:508-519 @v14.2.0),
    so float weights are added in no fixed order: the stand-in adds them in a shuffled one. An empty `x` gives intp
    zeros, weights or not (histogram.py:555-558 @v14.2.0), where NumPy gives float64 with weights."""
    a = _operand(x)
    if a.size == 0: return ndarray(np.zeros(minlength or 0, np.intp))
    if weights is None: return ndarray(np.bincount(a, minlength=minlength or 0))
    w = _operand(weights)
    p = np.random.default_rng(len(a)).permutation(len(a))
    return ndarray(np.bincount(a[p], w[p], minlength=minlength or 0))

# the functions the package calls on device arrays (backend.py's `array_module(...)`, np.* through dispatch)
_NAMES = ('arange', 'zeros', 'ones', 'full', 'empty', 'zeros_like', 'ones_like', 'full_like', 'empty_like', 'where',
          'append', 'concatenate', 'stack', 'flatnonzero', 'nonzero', 'bincount', 'unique', 'isnan', 'isfinite',
          'isinf', 'mean', 'var', 'std', 'sum', 'cumsum', 'searchsorted', 'sort', 'argsort', 'take', 'log', 'log1p',
          'exp', 'sqrt', 'abs', 'absolute', 'maximum', 'minimum', 'clip', 'round', 'around', 'rint', 'floor', 'ceil',
          'add', 'subtract', 'multiply', 'divide', 'true_divide', 'floor_divide', 'negative', 'equal', 'not_equal',
          'less', 'less_equal', 'greater', 'greater_equal', 'logical_and', 'logical_or', 'logical_not', 'invert',
          'bitwise_and', 'bitwise_or', 'bitwise_xor', 'any', 'all', 'amin', 'amax', 'min', 'max', 'argmax', 'argmin',
          'count_nonzero', 'diff', 'repeat', 'tile', 'ravel', 'reshape', 'isin', 'lexsort', 'cumprod', 'prod',
          'median', 'percentile', 'quantile', 'digitize', 'sign', 'square', 'power', 'mod', 'remainder',
          'result_type', 'can_cast', 'broadcast_to', 'copy', 'array_equal', 'allclose', 'isclose', 'expand_dims',
          'ascontiguousarray', 'column_stack', 'hstack', 'vstack', 'cumsum', 'nan_to_num', 'isnan', 'outer')
def _faithful(name):
    """CuPy's `name` (log1p, exp, ...): CUDA's math library, within 1 ulp but not libm's (cupy/_math/explog.py:64-70
    @v14.2.0, `create_math_ufunc`): the stand-in rounds the long double result toward zero, a faithful rounding that
    differs from NumPy's in the last bit for about half the values, so no test can count on NumPy's bits."""
    f = getattr(np, name)
    def g(x, *a, **k):
        v = _operand(x)
        if not (isinstance(v, np.ndarray) and v.dtype.kind == 'f') or a or k: return _wrap(f(v, *a, **k))
        r = f(v.astype(np.longdouble))
        d = r.astype(v.dtype)
        over = np.abs(d.astype(np.longdouble)) > np.abs(r)
        d[over] = np.nextafter(d[over], v.dtype.type(0))
        return ndarray(d)
    return functools.wraps(f)(g)

_THREADS = 256
def _tree_sum(v:np.ndarray):
    """A sum over axis 0 in a GPU reduction's order, not NumPy's pairwise one: each of 256 threads adds its strided
    rows in turn, then the partials are halved pairwise (as `cub::DeviceReduce::Sum`, which `sum` and `mean` call by
    default: cupy/_core/_routines_math.pyx:115-116, _routines_statistics.pyx:148-153, _accelerator.pyx:50-52
    @v14.2.0; the exact order depends on the GPU's tuning, so no test can count on any one order's bits)."""
    pad = np.zeros((-len(v) % _THREADS, *v.shape[1:]), v.dtype)
    p = np.add.reduce(np.concatenate([v, pad]).reshape(-1, _THREADS, *v.shape[1:]), axis=0)   # each thread's rows
    while len(p) > 1: p = p[:len(p) // 2] + p[len(p) // 2:]
    return p[0]

def _reduction(name):
    """CuPy's `sum`/`mean`/`var`/`std` of a float array (an int one's mean/var in float64), whole or over axis 0 of a
    2-d one: `_tree_sum`'s order; var is the sum of squared deviations from that mean times
    `alpha = 1/(n-ddof)`, not divided (_routines_statistics.pyx:585-605, 632-636 @v14.2.0). Other calls are NumPy's."""
    host = getattr(np, name)
    def f(x, axis=None, *args, dtype=None, out=None, keepdims=False, ddof=0, **kw):   # `a.sum(0)` too
        v = _operand(x)
        kinds = 'f' if name == 'sum' else 'fiub'
        ours = isinstance(v, np.ndarray) and v.size and v.dtype.kind in kinds and (
            axis is None or axis == 0 and v.ndim in (1, 2))
        if args or kw or dtype is not None or out is not None or keepdims or not ours:
            extra = {'ddof': ddof} if name in ('var', 'std') else {}
            return _wrap(host(v, *args, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kw, **extra))
        v = v.ravel() if axis is None else v
        v = v if v.dtype.kind == 'f' else v.astype(np.float64)
        if name == 'sum': return _wrap(_tree_sum(v))
        mean = _tree_sum(v) / v.dtype.type(len(v))
        if name == 'mean': return _wrap(mean)
        n = len(v) - ddof
        var = _tree_sum((v - mean) ** 2) * (v.dtype.type(1. / n) if n > 0 else v.dtype.type(np.nan))
        return _wrap(var if name == 'var' else np.sqrt(var))
    return functools.wraps(host)(f)

_FUNCS = {n: _device_func(n) for n in _NAMES}
_FUNCS.update({n: _reduction(n) for n in ('sum', 'mean', 'var', 'std')})
_FUNCS.update({n: _faithful(n) for n in ('log1p', 'exp', 'log', 'expm1')})
_FUNCS.update(asarray=asarray, array=array, bincount=bincount)
_MODULE = None

def install_module(name='cupy') -> types.ModuleType:
    "The stand-in as a module named `name` (with `cuda.runtime` and `cuda.Device`)."
    global _MODULE
    m = types.ModuleType(name, __doc__)
    m.__file__ = __file__
    for n,f in _FUNCS.items(): setattr(m, n, f)
    for n in ('bool_', 'int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64', 'float16', 'float32',
              'float64', 'dtype', 'nan', 'inf', 'newaxis', 'iinfo', 'finfo', 'integer', 'floating', 'number'):
        setattr(m, n, getattr(np, n))
    m.ndarray, m.asnumpy, m.get_array_module, m.from_dlpack = ndarray, asnumpy, get_array_module, from_dlpack
    m.__version__ = '14.2.0'
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, getDevice=lambda: 0)
    m.cuda = types.SimpleNamespace(runtime=runtime, Device=Device)
    _MODULE = m
    return m

def patch_torch(device):
    """torch.from_dlpack, as_tensor and tensor take stand-in arrays onto `device`, as they take CuPy's (DLPack,
    `__cuda_array_interface__`) onto CUDA."""
    import torch
    global _DEVICE
    _DEVICE = torch.device(device)
    def take(f):
        @functools.wraps(f)
        def g(data, *a, **k):
            if not isinstance(data, ndarray): return f(data, *a, **k)
            dev = k.pop('device', None)
            t = torch.from_numpy(data._a.copy())
            dt = k.pop('dtype', a[0] if a else None)
            return t.to(device=dev or _DEVICE, dtype=dt)
        return g
    torch.from_dlpack = take(torch.from_dlpack)
    torch.as_tensor = take(torch.as_tensor)
    torch.tensor = take(torch.tensor)

ndarray.__module__ = Device.__module__ = 'cupy'   # as CuPy's: what `backend.array_module`/`to_host` look at
