"""Roots that are not a tensor's own birth (issue 29, items 1, 2, 6): a dtype value written as a
constant and carried into a cast, an array whose dtype decided a conversion, a module shared from a
cache keyed without the dtype, a number too big for the target dtype, and the low dtype a silent
finding computes in. Each is a small program of its own, asserting the file:line (and the module
path) the user reads, and running the edit at that line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from torch import nn

from dtype_doctor import watch
from dtype_doctor.causes import group_by_cause, root_origin
from origin_lines import here, origin_lines

HERE = "tests/test_roots_values.py"


def _finding_lines(finding) -> set[tuple[str | None, int | None]]:
    out: set = set()
    for o in finding.operands:
        if o.origin is not None:
            out |= origin_lines(o.origin)
    return out


ACCUMULATE_IN = torch.float32  # the dtype the adapter computes in
ACCUMULATE_LINE = here() - 1


class Adapter(nn.Module):
    def __init__(self, width: int, work_dtype: torch.dtype) -> None:
        super().__init__()
        self.down = nn.Linear(width, width)
        self.work_dtype = work_dtype

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.down(h).to(self.work_dtype).relu()


class AdaptedNet(nn.Module):
    def __init__(self, width: int = 8, work_dtype: torch.dtype = ACCUMULATE_IN) -> None:
        super().__init__()
        self.adapter = Adapter(width, work_dtype)
        self.out = nn.Linear(width, 3)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.out(self.adapter(h))


def test_a_dtype_constant_carried_into_a_cast_through_an_attribute_is_the_root():
    with watch() as s, pytest.raises(RuntimeError):
        net = AdaptedNet(work_dtype=ACCUMULATE_IN)
        passed = here() - 1
        net.half()
        net(torch.randn(2, 8, dtype=torch.float16))
    (finding,) = group_by_cause(s.report).errors
    assert finding.location.module == "out"
    (odd,) = [o for o in finding.operands if o.dtype == "float32"]
    root = root_origin(odd.origin)
    assert (root.kind, root.name, root.file, root.line) == ("value", "ACCUMULATE_IN", HERE, ACCUMULATE_LINE)
    assert (HERE, passed) in origin_lines(odd.origin)
    assert finding.root_cause.startswith(f"float32 `ACCUMULATE_IN` ({HERE}:{ACCUMULATE_LINE})")
    fixed = AdaptedNet(work_dtype=torch.float16).half()  # the edit: the constant in the model's dtype
    assert fixed(torch.randn(2, 8, dtype=torch.float16)).dtype == torch.float16


def test_a_local_dtype_variable_is_the_root_of_the_cast_that_uses_it():
    head = nn.Linear(4, 2).to(torch.bfloat16)
    with watch(model=head) as s, pytest.raises(RuntimeError):
        compute = torch.float64
        chosen = here() - 1
        feats = torch.randn(3, 4, dtype=torch.bfloat16).to(compute)
        head(feats)
    (finding,) = s.report.errors
    (odd,) = [o for o in finding.operands if o.dtype == "float64"]
    root = root_origin(odd.origin)
    assert (root.kind, root.name, root.file, root.line) == ("value", "compute", HERE, chosen)
    compute = torch.bfloat16  # the edit at that line
    assert head(torch.randn(3, 4, dtype=torch.bfloat16).to(compute)).dtype == torch.bfloat16


def _build_regressor(reference: np.ndarray) -> nn.Module:
    net = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 1))
    if reference.dtype == np.float64:
        net = net.double()  # follows the reference data
    return net


def test_a_conversion_decided_by_an_arrays_dtype_names_where_the_array_was_made():
    with watch() as s, pytest.raises(RuntimeError):
        template = np.ones(6)
        made = here() - 1
        regressor = _build_regressor(template)
        regressor(torch.randn(2, 6))
    (finding,) = s.report.errors
    assert finding.location.module == "0"
    weight = next(o for o in finding.operands if o.role == "weight").origin
    assert weight.dtype == "float64"
    assert (HERE, made) in origin_lines(weight)
    fixed = _build_regressor(np.ones(6, dtype=np.float32))  # the edit at that line
    assert fixed(torch.randn(2, 6)).dtype == torch.float32


_TABLES: dict = {}


class SinTable(nn.Module):
    def __init__(self, length: int) -> None:
        super().__init__()
        self.register_buffer("table", torch.sin(torch.arange(length).float()).to(torch.get_default_dtype()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.table[: x.shape[-1]]


def shared_table(length: int) -> SinTable:
    lookup = (length,)
    if lookup not in _TABLES:
        _TABLES[lookup] = SinTable(length)
    return _TABLES[lookup]


KEY_LINE = inspect.getsourcelines(shared_table)[1] + 1


class Mixer(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        before = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            self.proj = nn.Linear(8, 8)
            self.table = shared_table(8)
        finally:
            torch.set_default_dtype(before)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.table(x))


def test_a_module_shared_from_a_cache_keyed_without_the_dtype_names_the_key():
    _TABLES.clear()
    with watch() as s, pytest.raises(RuntimeError):
        Mixer(torch.float64)
        wide = Mixer(torch.float32)
        wide(torch.randn(2, 8))
    (finding,) = group_by_cause(s.report).errors
    assert finding.location.module == "proj"
    assert (HERE, KEY_LINE) in _finding_lines(finding)
    assert f"cache key `lookup`, which holds no dtype at {HERE}:{KEY_LINE}" in finding.root_cause
    _TABLES.clear()
    Mixer(torch.float64)  # the edit: the dtype in the key (a cache per dtype)
    _TABLES.clear()
    assert Mixer(torch.float32)(torch.randn(2, 8)).dtype == torch.float32


def _padding_mask(n: int, dtype: torch.dtype) -> torch.Tensor:
    very_negative = -1e30
    return torch.full((n, n), very_negative, dtype=dtype).triu(1)


def test_a_number_too_big_for_the_target_dtype_names_where_it_was_set():
    with pytest.raises(RuntimeError), watch() as s:
        _padding_mask(4, torch.float16)
    (finding,) = s.report.errors
    assert finding.code == "overflow-on-cast"
    value = next(o for o in finding.operands if o.origin is not None and o.origin.kind == "value")
    set_at = inspect.getsourcelines(_padding_mask)[1] + 1
    assert (value.origin.name, value.origin.file, value.origin.line) == ("very_negative", HERE, set_at)
    assert f"{HERE}:{set_at}" in finding.message
    fixed = torch.full((4, 4), torch.finfo(torch.float16).min, dtype=torch.float16)  # the edit
    assert torch.isfinite(fixed).all()


class Scores(nn.Module):
    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.qk = nn.Linear(d, 2 * d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k = self.qk(x).chunk(2, -1)
        return torch.softmax(q @ k.transpose(-1, -2), -1)


class Scorer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scores = Scores()
        self.out = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.scores(x) @ x)


def test_an_overflow_found_by_numerics_names_where_the_model_was_made_half():
    torch.manual_seed(0)
    with watch(numerics=True) as s:
        model = Scorer().to(torch.float16)
        converted = here() - 1
        with torch.no_grad():
            model.scores.qk.weight.mul_(30.0)
            model(torch.randn(1, 5, 32, dtype=torch.float16) * 8)
    found = [f for f in s.report.findings if f.data.get("dtype_birth")]
    assert found, [f.code for f in s.report.findings]
    birth = found[0].data["dtype_birth"]
    assert (birth["file"], birth["line"]) == (HERE, converted)
    assert any(f"{HERE}:{converted}" in e.text for e in found[0].evidence)
    with torch.no_grad():  # the edit at that line: keep the model in float32
        model = model.float()
        assert torch.isfinite(model(torch.randn(1, 5, 32) * 8)).all()


def test_an_fp16_optimizer_names_where_its_parameters_were_made_fp16():
    with watch() as s:
        net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1)).to(torch.float16)
        converted = here() - 1
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        net(torch.randn(2, 4, dtype=torch.float16)).float().sum().backward()
        opt.step()
    (finding,) = [f for f in s.report.findings if f.code == "optimizer-state-dtype"]
    assert f"{HERE}:{converted}" in finding.message
    assert (HERE, converted) in _finding_lines(finding)
    net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))  # the edit: fp32 master weights
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net(torch.randn(2, 4)).sum().backward()
    opt.step()
    assert all(p.dtype == torch.float32 for p in net.parameters())


class Positions(nn.Module):
    def __init__(self, length: int = 1024) -> None:
        super().__init__()
        self.register_buffer("pos", torch.arange(length, dtype=torch.get_default_dtype()), persistent=False)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.positions = Positions()


def test_a_table_built_in_a_constructor_is_named_by_its_path_in_the_model():
    before = torch.get_default_dtype()
    with watch(numerics=True) as s:
        torch.set_default_dtype(torch.bfloat16)
        try:
            encoder = Encoder()
        finally:
            torch.set_default_dtype(before)
    found = [f for f in s.report.findings if f.location is not None and f.location.op == "arange"]
    assert found and found[0].location.module == "positions"
    assert found[0].location.module_type == "Positions"
    assert encoder.positions.pos.dtype == torch.bfloat16
    assert Encoder().positions.pos[-1].item() == 1023  # the edit: built in the default float32


def _hide_future(scores: torch.Tensor) -> torch.Tensor:
    future = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
    blocked = -65536.0 * 4
    return scores.masked_fill(future, blocked)


def test_a_masked_fill_value_too_big_for_half_names_where_it_was_set():
    with pytest.raises(RuntimeError), watch() as s:
        _hide_future(torch.randn(3, 3, dtype=torch.float16))
    (finding,) = s.report.errors
    assert finding.code == "overflow-on-cast"
    set_at = inspect.getsourcelines(_hide_future)[1] + 2
    (value,) = [o for o in finding.operands if o.origin is not None and o.origin.kind == "value"]
    assert (value.origin.name, value.origin.file, value.origin.line) == ("blocked", HERE, set_at)
    scores = torch.randn(3, 3, dtype=torch.float16)  # the edit: the dtype's own limit
    future = torch.ones(3, 3, dtype=torch.bool).triu(1)
    assert scores.masked_fill(future, torch.finfo(scores.dtype).min).dtype == torch.float16


class Angles(nn.Module):
    def __init__(self, half_dim: int = 8) -> None:
        super().__init__()
        self.register_buffer("freq", torch.exp(-torch.arange(half_dim) / half_dim))

    def forward(self, steps: int) -> torch.Tensor:
        where = torch.arange(steps, dtype=self.freq.dtype)
        return torch.outer(where, self.freq).sin()


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.angles = Angles()
        self.mix = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mix(x * self.angles(x.shape[0]))


def test_a_module_called_alone_before_its_model_is_named_by_its_path_in_the_model():
    with watch(numerics=True) as s:
        decoder = Decoder().to(torch.bfloat16)
        decoder.angles(600)  # a table for inspection, before the model runs
        decoder(torch.randn(600, 8, dtype=torch.bfloat16))
    found = [f for f in s.report.findings if f.location is not None and f.location.op == "arange"]
    assert found and found[0].location.module == "angles"
    fixed = torch.outer(torch.arange(600, dtype=torch.float32), decoder.angles.freq.float())  # the edit
    assert torch.unique(fixed[:, 0]).numel() == 600


class NoiseConditioned(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.level_mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU())

    def forward(self, level: torch.Tensor) -> torch.Tensor:
        k = torch.arange(8, dtype=torch.float32)
        phase = level.float()[:, None] * torch.exp(-k)
        return self.level_mlp(torch.cat([phase.sin(), phase.cos()], -1).to(self.level_mlp[0].weight.dtype))


def test_a_value_rounded_in_the_script_is_located_in_the_module_that_consumes_it():
    denoiser = NoiseConditioned().to(torch.bfloat16)
    schedule = torch.linspace(999.0, 1.0, 7)
    with watch(numerics=True) as s:
        level = schedule[2:3].to(torch.bfloat16)
        rounded_at = here() - 1
        denoiser(level)
    (finding,) = [f for f in s.report.findings if f.location is not None and f.location.line == rounded_at]
    assert finding.location.module == "level_mlp"
    assert abs(schedule[2].item() - level.item()) >= 0.5
    assert denoiser(schedule[2:3]).dtype == torch.bfloat16  # the edit: pass the fp32 level
