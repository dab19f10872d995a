"""report_logits.py: per-position statistics of two logit dumps (raw float32 little-endian rows
[positions][vocab]), for the report when thin-compare gives no per-position figures.

Uses numpy when it is importable, else the standard library (slower: fine for stories260K).
"""
import array
import math
import os
import sys


def _rows(path, vocab):
    n = os.path.getsize(path)
    if vocab < 1 or n % (4 * vocab):
        raise ValueError("%s: %d bytes is not a whole number of %d-float rows" % (path, n, vocab))
    return n // (4 * vocab)


def centered_cos_rows(ref, test, vocab):
    """Cosine of each row pair after subtracting each row's mean, as a list of floats."""
    n = _rows(ref, vocab)
    if _rows(test, vocab) != n:
        raise ValueError("%s and %s hold different numbers of rows" % (ref, test))
    try:
        import numpy as np
    except ImportError:
        return _cos_rows_py(ref, test, vocab, n)
    a = np.fromfile(ref, dtype="<f4").astype(np.float64).reshape(n, vocab)
    b = np.fromfile(test, dtype="<f4").astype(np.float64).reshape(n, vocab)
    a -= a.mean(axis=1, keepdims=True)
    b -= b.mean(axis=1, keepdims=True)
    num = (a * b).sum(axis=1)
    den = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    return [float(x) for x in np.where(den > 0, num / np.where(den > 0, den, 1), 1.0)]


def _read_f32(path):
    arr = array.array("f")
    with open(path, "rb") as f:
        arr.frombytes(f.read())
    if sys.byteorder != "little":
        arr.byteswap()
    return arr


def _cos_rows_py(ref, test, vocab, n):
    a, b = _read_f32(ref), _read_f32(test)
    out = []
    for r in range(n):
        x = a[r * vocab:(r + 1) * vocab]
        y = b[r * vocab:(r + 1) * vocab]
        mx, my = math.fsum(x) / vocab, math.fsum(y) / vocab
        xc = [v - mx for v in x]
        yc = [v - my for v in y]
        num = math.fsum(p * q for p, q in zip(xc, yc))
        den = math.sqrt(math.fsum(p * p for p in xc) * math.fsum(q * q for q in yc))
        out.append(num / den if den > 0 else 1.0)
    return out
