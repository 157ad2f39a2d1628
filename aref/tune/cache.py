"""The autotuner's on-disk cache: one JSON file per tuned (kernel, shapes, dtypes, space, device).

The key hashes the kernel function's source, the shapes and dtypes of its tensors, the constants held fixed,
the candidate list and the device the winner was chosen for (a GPU's name, or the calibrated machine model
for tuning without one), so editing the kernel, recalibrating the model or moving to another GPU tunes again.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
from pathlib import Path

DEFAULT_TUNE_CACHE = Path.home() / ".cache" / "aref" / "tune"
FORMAT = 1


class TuneCache:
    """Winners on disk under `directory` (created on first store)."""

    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)

    @staticmethod
    def key(kfn, tensors: dict, fixed: dict, candidates: list, arch: str, device: str, key_names=None) -> str:
        """The cache key of a tuning run. `key_names` (the kernel's `key=`) limits which tensors' shapes and
        which fixed constants count; None: all of them."""
        try:
            source = inspect.getsource(kfn.fn)
        except (OSError, TypeError):
            source = kfn.__name__
        use = (lambda n: True) if key_names is None else (lambda n: n in key_names)
        shapes = sorted((n, tuple(t.shape), str(t.dtype)) for n, t in tensors.items() if use(n))
        consts = sorted((n, repr(v)) for n, v in fixed.items() if use(n))
        h = hashlib.sha256()
        h.update(repr((FORMAT, kfn.__name__, source, shapes, consts, [c.to_json() for c in candidates], arch,
                       device)).encode())
        return f"{kfn.__name__}-{h.hexdigest()[:20]}"

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def load(self, key: str):
        """The cached `TuneResult` of `key` (marked `cached`), or None."""
        from aref.tune.result import Candidate, TuneResult
        from aref.tune.space import Config
        p = self.path(key)
        if not p.exists():
            return None
        try:
            data = json.loads(p.read_text())
            if data.get("format") != FORMAT:
                return None
            cands = [Candidate(Config.from_json(c["config"]), c["status"], c.get("stage", ""), c.get("reason", ""),
                               rank=c.get("rank"), stored=c) for c in data["candidates"]]
            return TuneResult(data["kernel"], data["arch"], data["device"], data["method"], cands,
                              Config.from_json(data["best"]), key, True, 0.0)
        except (ValueError, KeyError, TypeError):
            return None                      # an unreadable entry is re-tuned, not trusted

    def store(self, key: str, result) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        data = {"format": FORMAT, **result.to_json()}
        p = self.path(key)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(p)                       # atomic: a concurrent reader never sees half a file
        return p
