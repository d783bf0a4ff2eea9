"The machine a bench ran on (CPU, GPU, versions, checkout), its memory (RSS, device), and device syncs."
from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

__all__ = ['MB', 'hardware', 'versions', 'git_state', 'RSSMeter', 'GPUMeter', 'sync']

MB = 2**20

# --- the machine ---------------------------------------------------------------------------------------------------
def _cpu_model():
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'): return line.split(':', 1)[1].strip()
    except OSError: pass
    return platform.processor() or platform.machine()

def _ram_gb():
    try: return round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30, 1)
    except (ValueError, OSError, AttributeError): return None

def _gpu():
    "The GPUs as nvidia-smi lists them: asked in a child process, so this one makes no CUDA context."
    try:
        q = ['nvidia-smi', '--query-gpu=name,memory.total,driver_version', '--format=csv,noheader,nounits']
        out = subprocess.run(q, capture_output=True, text=True, timeout=30, check=True).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError): return None
    name,mem,driver = [x.strip() for x in out[0].split(',')]
    return {'name': name, 'memory_gb': round(float(mem) / 1024, 1), 'driver': driver, 'count': len(out)}

def hardware(device='cpu') -> dict:
    "CPU model, cores, RAM and (on CUDA) the GPU: what a reader needs to compare two runs."
    gpu = _gpu() if device == 'cuda' else None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    return {'cpu': _cpu_model(), 'cores': os.cpu_count(), 'cores_usable': cores, 'ram_gb': _ram_gb(), 'gpu': gpu,
            'platform': platform.platform(), 'python': platform.python_version(),
            'loadavg': [round(x, 2) for x in os.getloadavg()]}

def _version(*dists):
    for d in dists:
        try: return metadata.version(d)
        except metadata.PackageNotFoundError: pass
    return None

def git_state() -> dict|None:
    "The checkout this package runs from: commit and changed files (other work in progress shows up here)."
    root = Path(__file__).resolve().parents[2]
    if not (root/'.git').exists(): return None
    try:
        git = lambda *a: subprocess.run(['git', '-C', str(root), *a], capture_output=True, text=True, timeout=30,
                                        check=True).stdout.strip()
        return {'commit': git('rev-parse', 'HEAD'), 'changed': git('status', '--porcelain').splitlines()}
    except (OSError, subprocess.SubprocessError): return None

def versions() -> dict:
    "Installed versions, read from package metadata: nothing is imported (cuDF would start CUDA)."
    pkgs = {'fastai_gpu_tabular': ('fastai_gpu_tabular',), 'torch': ('torch',), 'fastai': ('fastai',),
            'fastcore': ('fastcore',), 'fasttransform': ('fasttransform',), 'pandas': ('pandas',), 'numpy': ('numpy',),
            'pyarrow': ('pyarrow',), 'cudf': ('cudf-cu13', 'cudf-cu12', 'cudf'),
            'cupy': ('cupy-cuda13x', 'cupy-cuda12x', 'cupy'), 'rmm': ('rmm-cu13', 'rmm-cu12', 'rmm')}
    return {k: _version(*v) for k,v in pkgs.items()}

# --- memory --------------------------------------------------------------------------------------------------------
def _status_mb(key):
    m = re.search(rf'^{key}:\s+(\d+) kB', Path('/proc/self/status').read_text(), re.MULTILINE)
    return int(m.group(1)) / 1024 if m else None

class RSSMeter:
    "Peak resident memory of this process, per phase: Linux's VmHWM, reset through /proc/self/clear_refs."
    def __init__(self):
        try:
            self.reset()
            self.method = 'VmHWM'
        except OSError: self.method = 'ru_maxrss'   # not resettable: every phase reports the process peak so far

    def reset(self):
        "Start a phase: the high-water mark drops to the current RSS."
        with open('/proc/self/clear_refs', 'w') as f: f.write('5')

    def now(self) -> float:
        "Current RSS in MB."
        if self.method == 'VmHWM': return _status_mb('VmRSS')
        try:
            import psutil
        except ImportError: return self.peak()
        return psutil.Process().memory_info().rss / MB

    def peak(self) -> float:
        "Peak RSS in MB since the last `reset`."
        if self.method == 'VmHWM': return _status_mb('VmHWM')
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (MB if sys.platform == 'darwin' else 1024)

    def phase(self, phases:dict, name:str):
        "Record this phase's peak under `name` and start the next one."
        phases[name] = round(self.peak(), 1)
        if self.method == 'VmHWM': self.reset()

class GPUMeter:
    """Peak device memory: torch's allocator, RMM's (cuDF) when its statistics can be enabled, and the device as a
    whole. `torch_stats=False` where torch allocates from RMM (`use_rmm_for_torch`): RMM's figures then hold torch's,
    and torch keeps none of its own."""
    def __init__(self, device, rmm_stats=False, torch_stats=True):
        import torch
        self.torch,self.on,self.torch_stats = torch,device.type == 'cuda',torch_stats
        self.rmm,self.used_peak,self._stop = None,0,threading.Event()
        if not self.on: return
        if rmm_stats:
            try:
                import rmm.statistics  # must wrap the memory resource before cuDF allocates
                rmm.statistics.enable_statistics()
                self.rmm = rmm.statistics
            except Exception: self.rmm = None   # an older RMM, or none: the device-wide poller still counts cuDF
        free,total = torch.cuda.mem_get_info()
        self.base_used = total - free
        # a poller sees what neither allocator counts (CuPy's pool, the CUDA context), at 10 ms resolution
        self._t = threading.Thread(target=self._poll, daemon=True)
        self._t.start()

    def _poll(self):
        while not self._stop.wait(0.01):
            free,total = self.torch.cuda.mem_get_info()
            self.used_peak = max(self.used_peak, total - free)

    def current(self) -> float|None:
        "MB allocated now on the device by torch, and by RMM (cuDF) when its statistics are on."
        if not self.on: return None
        mb = self.torch.cuda.memory_allocated() / MB if self.torch_stats else 0.
        if self.rmm is not None:
            try: mb += self.rmm.get_statistics().current_bytes / MB
            except Exception: pass   # statistics off after all: torch's part only
        return round(mb, 1)

    def peak(self) -> float|None:
        "MB at most allocated on the device since `reset_base`: torch's allocator, plus RMM's (cuDF) when counted."
        if not self.on: return None
        mb = self._torch_peak()
        if self.rmm is not None:
            try: mb += self.rmm.get_statistics().peak_bytes / MB
            except Exception: pass   # statistics off after all: torch's part only
        return round(mb, 1)

    def _torch_peak(self) -> float: return self.torch.cuda.max_memory_allocated() / MB if self.torch_stats else 0.

    def reset_base(self):
        if self.on and self.torch_stats: self.torch.cuda.reset_peak_memory_stats()

    def result(self) -> tuple:
        if not self.on: return None, {}
        self._stop.set()
        detail = {'torch_max_allocated_mb': self._torch_peak(),
                  'device_used_increase_mb': max(self.used_peak - self.base_used, 0) / MB}
        if self.rmm is not None:
            try: detail['rmm_peak_mb'] = self.rmm.get_statistics().peak_bytes / MB
            except Exception: pass   # statistics off after all (another memory resource was set): leave it out
        detail = {k: round(v, 1) for k,v in detail.items()}
        return round(detail['torch_max_allocated_mb'] + detail.get('rmm_peak_mb', 0), 1), detail


def sync(device):
    if getattr(device, 'type', device) == 'cuda':
        import torch
        torch.cuda.synchronize()

