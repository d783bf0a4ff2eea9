"Numbers and tables as the bench prints them, and how noisy they were: the spread of repeats, targets judged by it."
from __future__ import annotations

__all__ = ['fmt', 'table', 'ratio', 'spread', 'fmt_spread', 'ratio_range', 'judge', 'verdict', 'load_line']

def ratio(a, b):
    "a/b, or None when either is missing or b is not positive."
    if a is None or b is None or b <= 0 or a < 0: return None
    return a / b


def fmt(v, kind='num'):
    if v is None: return '-'
    if isinstance(v, str): return v
    if kind == 'x': return f'{v:.2f}x'
    if kind == 'd': return f'{v:+.4f}'
    if abs(v) >= 1000: return f'{v:,.0f}'
    return f'{v:.3g}' if abs(v) < 10 else f'{v:.1f}'

def table(header, rows) -> str:
    w = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: '  '.join(str(x).ljust(w[0]) if i == 0 else str(x).rjust(w[i]) for i,x in enumerate(r))
    return '\n'.join([line(header), '  '.join('-' * x for x in w)] + [line(r) for r in rows])

# --- noise ---------------------------------------------------------------------------------------------------------
def spread(xs) -> dict|None:
    "The repeats of one figure: their count, min, max and relative spread (max / min - 1); None under two repeats."
    xs = [x for x in xs or () if x is not None]
    if len(xs) < 2: return None
    lo,hi = min(xs),max(xs)
    return {'n': len(xs), 'min': lo, 'max': hi, 'spread': round(hi / lo - 1, 4) if lo > 0 else None}

def fmt_spread(s) -> str:
    "A `spread` as the table shows it: '7% of 3' (max / min - 1 over 3 repeats)."
    return '-' if not s or s['spread'] is None else f"{s['spread']:.0%} of {s['n']}"

def ratio_range(num, den) -> tuple|None:
    """The range of num/den over every pairing of their repeats, (min/max, max/min): the two sides ran at different
    times in different processes, so no repeat of one belongs with a repeat of the other. None if either is missing."""
    num,den = [x for x in num or () if x is not None],[x for x in den or () if x is not None]
    if not num or not den: return None
    lo,hi = ratio(min(num), max(den)),ratio(max(num), min(den))
    return None if lo is None or hi is None else (lo, hi)

def judge(target, low, high, smaller=False) -> str|None:
    """'met' when even the worst of the figure's repeats meets `target`, 'NOT met' when even the best misses it, and
    'within noise' between: a miss that other jobs on the machine can explain is not called a failure. `low`, `high`
    bound the figure over its repeats (equal for a figure measured once); `smaller`: the target is a ceiling."""
    if low is None or high is None or target is None: return None
    ok = (lambda v: v <= target) if smaller else (lambda v: v >= target)
    worst,best = (high, low) if smaller else (low, high)
    return 'met' if ok(worst) else 'NOT met' if not ok(best) else 'within noise'

def verdict(t:dict) -> str:
    "A judged target (`judge`'s word, its `range` and `target`) as the report prints it."
    if 'verdict' not in t: return {True: 'met', False: 'NOT met'}.get(t.get('met'), '-')   # a JSON of before
    if t['verdict'] != 'within noise': return t['verdict'] or '-'
    lo,hi = t['range']
    return f"within noise ({lo:.2f}-{hi:.2f} against {t['target']:g})"

def load_line(start, end, cores) -> str:
    "The load average (1, 5, 15 min) at the start and the end of a run, against the cores: how busy the machine was."
    f = lambda la: ' '.join(f'{x:.2f}' for x in la) if la else '?'
    return f'load average (1, 5, 15 min) {f(start)} at the start, {f(end)} at the end, on {cores} cores'
