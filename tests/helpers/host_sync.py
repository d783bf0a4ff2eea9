"Counting the tensor->host conversions a piece of code makes: on CUDA each one waits for the device."
from torch.overrides import TorchFunctionMode

__all__ = ['HostConversions']

class HostConversions(TorchFunctionMode):
    "Records every tensor->Python conversion or host copy: on CUDA each one waits for the device."
    names = frozenset({'item', 'tolist', 'numpy', 'cpu', '__bool__', '__float__', '__int__', '__index__',
                       '__complex__'})
    def __init__(self):
        super().__init__()
        self.seen = []
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, '__name__', None) in self.names: self.seen.append(func.__name__)
        return func(*args, **(kwargs or {}))
