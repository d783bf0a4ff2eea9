"Numbers and tables as the bench prints them."
from __future__ import annotations

__all__ = ['fmt', 'table', 'ratio']

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

