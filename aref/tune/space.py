"""The autotuner's search space: `Config` (one candidate) and how candidates are enumerated.

A candidate fixes a kernel's compile-time constants (tile sizes, channel depths written as constexprs, sub-tile
counts, …) and the compiler's and launch's choices: consumer organisation, MMA issue depth, partitioner,
persistent launch, cluster shape, fp8 accumulator promotion (`promote_every`, a compiler option:
`aref.passes.promote`), and the kernel features the Hopper code generator does not emit yet (none at present:
`UNSUPPORTED_FEATURES`). Such features are part of the space so that a tuning run lists them: a candidate that
asks for one is refused with `UnsupportedFeature` and recorded as pruned, and the tuner ranks it as soon as the
backend learns it.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields, replace

from aref.errors import ArefError

SUPPORTED_DEVICES = ("cpu", "cuda")           # where a kernel call's tensors may live
# specializing (and tuning by the model) needs only shapes and dtypes: torch's meta tensors carry them for free
SHAPE_DEVICES = (*SUPPORTED_DEVICES, "meta")
# Feature options the Hopper backend does not generate yet: option -> what it means (issue 10's kernel features).
UNSUPPORTED_FEATURES: dict[str, str] = {}     # empty: `cluster` (TMA multicast) is generated since issue 10


class UnsupportedFeature(ArefError):
    """A candidate asks for a kernel feature the backend cannot generate yet."""

    kind = "unsupported feature"


@dataclass(frozen=True)
class Config:
    """One tuning candidate. `constexprs` are the kernel's keyword-only parameters; the rest steer the
    compiler (`consumers`, `num_consumers`, `mma_depth`, `partition`) and the launch (`persistent`, `ctas`,
    `raster`, `cluster`: (2, 1) / (1, 2) TMA-multicasts shared tiles over 2-CTA clusters,
    `aref.backend.cute.cluster`), `promote_every` (fp8 partial sums promoted to fp32 every N K-steps:
    `aref.passes.promote`), and the feature options of `UNSUPPORTED_FEATURES` (none left); `epilogue_overlap` (persistent launches: one tile's
    epilogue overlapped with the next tile's main loop, `aref.backend.cute.overlap`); `softmax_overlap` (on by
    default) is FA3's intra-warpgroup overlap of softmax with the next MMA (the pipeline's T/C/U stages,
    `CompileOptions.coarse`), off to compare;
    `split_keys` asks for cooperative consumers splitting attention backward's key block (FA3)."""

    constexprs: tuple = ()                   # sorted (name, value) pairs; build with Config.of(...)
    consumers: str = "auto"
    num_consumers: int = 2
    mma_depth: int | None = None
    partition: str = "heuristic"
    persistent: bool = False
    ctas: int | None = None                  # persistent CTAs (None: one per SM)
    cluster: tuple = (1, 1)
    raster: int = 0                          # tile order: groups of this many grid-axis-0 rows; 0: x fastest
    epilogue_overlap: bool = False
    promote_every: int = 0                   # fp8: promote to fp32 every N K-steps; 0: never
    softmax_overlap: bool = True            # T/C/U stages: the next block's MMA runs while softmax computes
    split_keys: bool = False

    @staticmethod
    def of(constexprs: dict | None = None, **options) -> "Config":
        """`Config.of({"BN": 256, "BK": 64}, consumers="cooperative")` — as `triton.Config(kwargs, ...)`."""
        known = {f.name for f in fields(Config)} - {"constexprs"}
        unknown = set(options) - known
        if unknown:
            raise ArefError(f"unknown tuning option(s) {', '.join(sorted(unknown))}",
                            hint=f"options: {', '.join(sorted(known))}; kernel constants go in the dict")
        if "cluster" in options:
            options["cluster"] = tuple(options["cluster"])
        return Config(tuple(sorted((constexprs or {}).items())), **options)

    @property
    def consts(self) -> dict:
        return dict(self.constexprs)

    def with_consts(self, **values) -> "Config":
        return replace(self, constexprs=tuple(sorted({**self.consts, **values}.items())))

    def options(self) -> dict:
        """The fields that differ from the defaults (besides the constants): what makes a label."""
        default = Config()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "constexprs" and getattr(self, f.name) != getattr(default, f.name)}

    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in self.constexprs]
        parts += [f"{k}={'x'.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in self.options().items()]
        return " ".join(parts) or "(defaults)"

    def to_json(self) -> dict:
        out = {"constexprs": self.consts, **self.options()}
        if "cluster" in out:
            out["cluster"] = list(out["cluster"])
        return out

    @staticmethod
    def from_json(data: dict) -> "Config":
        data = dict(data)
        return Config.of(data.pop("constexprs", {}), **data)

    def compile_options(self, arch: str):
        """The `CompileOptions` this candidate compiles with."""
        from aref.compiler import CompileOptions
        # split_keys: cooperative consumers, which split the key block of a kernel whose rows mix (attention
        # backward, FA3's structure: partition.dimsplit)
        consumers = "cooperative" if self.split_keys else self.consumers
        return CompileOptions(arch=arch, partition=self.partition, consumers=consumers,
                              num_consumers=self.num_consumers, mma_depth=self.mma_depth,
                              promote_every=self.promote_every, coarse=self.softmax_overlap)

    def launch_kwargs(self, arch: str) -> dict:
        """The launch options of this candidate on `arch` as `launch` / `launcher_for` take them (persistent
        CTAs: one per SM of the arch's machine unless the candidate says)."""
        from aref.target.machine import machine_for
        return {"persistent": self.persistent, "ctas": self.ctas or machine_for(arch).sms, "raster": self.raster,
                "epilogue_overlap": self.epilogue_overlap, "cluster": self.cluster}

    def unsupported(self) -> list[str]:
        """The feature options this candidate asks for that the backend cannot generate yet."""
        return [what for k, what in UNSUPPORTED_FEATURES.items() if getattr(self, k) != getattr(Config(), k)]

    def check_supported(self) -> None:
        """Raise `UnsupportedFeature` naming what the backend cannot generate yet (see the report of issue 10
        for the design of each)."""
        missing = self.unsupported()
        if missing:
            raise UnsupportedFeature("not yet supported by the backend: " + "; ".join(missing),
                                     hint="the tuner records this candidate as pruned")


def configs(constexprs: dict | None = None, **options) -> list[Config]:
    """The cartesian product of value lists: `configs({"BN": [128, 256], "BK": [64]}, consumers=["auto",
    "plain"])` is four candidates. A scalar stands for a one-value list."""
    def as_list(v):
        return list(v) if isinstance(v, list) else [v]

    cnames = list(constexprs or {})
    onames = list(options)
    out = []
    for cvals in itertools.product(*(as_list((constexprs or {})[n]) for n in cnames)):
        for ovals in itertools.product(*(as_list(options[n]) for n in onames)):
            out.append(Config.of(dict(zip(cnames, cvals)), **dict(zip(onames, ovals))))
    return out


def default_space(constexpr_defaults: dict) -> list[Config]:
    """A search space for a kernel that declares none: every int constant whose default is a power of two
    of at least 16 (a tile size, by the language's convention) at half, the same and double its default,
    within 16..256, crossed with the plain and the default consumer organisation."""
    axes = {}
    for name, d in constexpr_defaults.items():
        if isinstance(d, int) and not isinstance(d, bool) and d >= 16 and d & (d - 1) == 0:
            axes[name] = [v for v in (d // 2, d, d * 2) if 16 <= v <= 256]
    return configs(axes, consumers=["auto", "plain"])


@dataclass
class Space:
    """Candidates of one tuning run after the user's fixed constants are applied (duplicates dropped)."""

    candidates: list[Config] = field(default_factory=list)

    @staticmethod
    def build(space: list[Config], fixed: dict) -> "Space":
        seen, out = set(), []
        for cfg in space:
            c = cfg.with_consts(**fixed) if fixed else cfg
            if c not in seen:
                seen.add(c)
                out.append(c)
        return Space(out)
