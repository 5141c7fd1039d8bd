"""The root of a mismatch is where the odd operand's dtype was born (issue 29, items 1 and 2): a NumPy
conversion torch never dispatches, a factory in forward, a load, a copy, a conversion inside a helper,
an autocast-disabled region; every odd operand accounted, nothing "untracked" for what was made under
the watch. Each case is a small program of its own (not one of the patterns), asserting the origin
file:line the user reads and running the edit at that line."""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from transformers import BatchFeature

from dtype_doctor import watch
from dtype_doctor.causes import group_by_cause, root_origin
from origin_lines import here, origin_lines

UNTRACKED = "untracked (created before watch() started)"
HERE = "tests/test_roots.py"


def _odd(finding):
    expected = finding.data["expected_dtype"]
    return [o for o in finding.operands if o.dtype != expected]


def test_a_dataset_made_by_from_numpy_is_born_at_that_line_and_no_fix_casts_the_dataset():
    table = np.linspace(0.0, 1.0, 24 * 5).reshape(24, 5)  # NumPy's float64
    net = nn.Linear(5, 2)
    with watch(model=net) as s, pytest.raises(RuntimeError):
        ds = TensorDataset(torch.from_numpy(table))
        made = here() - 1
        for (rows,) in DataLoader(ds, batch_size=6):
            net(rows)
    (finding,) = s.report.errors
    (odd,) = _odd(finding)
    assert odd.dtype == "float64"
    root = root_origin(odd.origin)
    assert (root.op, root.file, root.line) == ("torch.from_numpy", HERE, made)
    assert root.name is None  # `ds` holds a dataset, not the tensor
    assert not any("ds = ds" in x.snippet or "ds.to(" in x.snippet for x in finding.fixes)
    fixed = TensorDataset(torch.from_numpy(table).float())  # the edit at that line
    for (rows,) in DataLoader(fixed, batch_size=6):
        assert net(rows).dtype == torch.float32


def test_features_a_library_converts_with_from_numpy_name_your_line():
    encoder = nn.Sequential(nn.Conv1d(4, 8, 3), nn.GELU()).half()
    wave = np.random.default_rng(0).standard_normal((1, 4, 20)).astype(np.float32)
    with watch(model=encoder) as s, pytest.raises(RuntimeError):
        feats = BatchFeature({"input_features": wave}, tensor_type="pt")["input_features"]
        made = here() - 1
        encoder(feats)
    (finding,) = s.report.errors
    (odd,) = _odd(finding)
    assert (HERE, made) in origin_lines(odd.origin)
    assert f"from your line {HERE}:{made}" in group_by_cause(s.report).errors[0].root_cause
    assert encoder(feats.to(torch.float16)).dtype == torch.float16


def test_float64_features_made_by_torch_tensor_are_the_root_not_the_call_that_passed_them():
    features = np.random.default_rng(1).standard_normal((3, 6))
    with watch() as s, pytest.raises(RuntimeError):
        mlp = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 1))
        x = torch.tensor(features)
        made = here() - 1
        mlp(x)
    (finding,) = group_by_cause(s.report).errors
    assert finding.root_cause == f"float64 `x` made by torch.tensor ({HERE}:{made})"
    fix = next(f for f in finding.fixes if f.snippet == "x = x.to(torch.float32)")
    scope = {"x": x, "torch": torch}
    exec(fix.snippet, scope)
    assert mlp(scope["x"]).dtype == torch.float32


class ZeroMemoryAttention(nn.Module):
    """Attends over a key/value memory it allocates on each call (default dtype)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.query = nn.Linear(width, width)
        self.memory_line = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.query(x)  # 3-d: F.linear returns a view of its own result
        memory = torch.zeros(x.shape[0], 3, x.shape[-1])
        self.memory_line = here() - 1
        keys, values = memory, memory.clone()
        return F.scaled_dot_product_attention(q, keys, values)


def test_key_and_value_from_one_allocation_are_both_accounted_and_the_query_is_tracked():
    layer = ZeroMemoryAttention().half()
    with watch(model=layer) as s, pytest.raises(RuntimeError):
        layer(torch.randn(2, 4, 16, dtype=torch.float16))
    (finding,) = s.report.errors
    roles = {o.role: o for o in finding.operands}
    assert roles["query"].origin.name != UNTRACKED
    assert roles["query"].origin.kind == "input"
    for role in ("key", "value"):
        root = root_origin(roles[role].origin)
        assert (root.op, root.file, root.line) == ("torch.zeros", HERE, layer.memory_line), role


class Tower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 4, 4)
        self.head = nn.Linear(8, 4)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.stem(images).mean((2, 3)))


def _load_tower(dtype: torch.dtype | None = None) -> Tower:
    return Tower().to(dtype or torch.float16)  # a loader's own default dtype


def test_a_model_converted_inside_your_helper_names_the_line_that_called_it():
    with watch() as s, pytest.raises(RuntimeError):
        tower = _load_tower()
        called = here() - 1
        tower(torch.rand(1, 3, 16, 16, dtype=torch.bfloat16))
    finding = s.report.errors[0]
    weight = next(o for o in finding.operands if o.role == "weight").origin
    assert (weight.file, weight.line) == (HERE, inspect.getsourcelines(_load_tower)[1] + 1)
    assert (HERE, called) in origin_lines(weight)
    assert _load_tower(torch.bfloat16)(torch.rand(1, 3, 16, 16, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_an_fp32_state_loaded_with_assign_into_a_bf16_model_is_born_at_the_load():
    state = nn.Linear(8, 8).state_dict()
    with watch() as s, pytest.raises(RuntimeError):
        model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8)).to(torch.bfloat16)
        model[0].load_state_dict(state, assign=True)
        loaded = here() - 1
        model(torch.randn(2, 8, dtype=torch.bfloat16))
    (finding,) = group_by_cause(s.report).errors
    weight = next(o for o in finding.operands if o.role == "weight").origin
    assert (weight.kind, weight.file, weight.line, weight.dtype) == ("parameter", HERE, loaded, "float32")
    assert finding.root_cause.endswith(f"({HERE}:{loaded})")
    fresh = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8)).to(torch.bfloat16)
    fresh[0].load_state_dict(nn.Linear(8, 8).state_dict())  # the edit at that line: not assigned
    assert fresh(torch.randn(2, 8, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_an_ema_copy_taken_before_half_is_blamed_where_it_was_copied():
    with watch() as s, pytest.raises(RuntimeError):
        model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))
        ema = copy.deepcopy(model)
        copied = here() - 1
        model.half()
        x = torch.randn(2, 8, dtype=torch.float16)
        model(x)
        ema(x)
    (finding,) = group_by_cause(s.report).errors
    assert f"{HERE}:{copied}" in finding.root_cause
    assert copy.deepcopy(model)(x).dtype == torch.float16  # copied after the conversion


class ExactHead(nn.Module):
    """Runs its first projection outside autocast, in float32 on purpose."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.float_line = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", enabled=False):
            self.float_line = here() + 1
            h = self.a(x.float())
        return self.b(h)


def test_an_autocast_disabled_region_is_the_root_and_is_not_named_as_the_module_output():
    head = ExactHead().to(torch.bfloat16)
    with watch(model=head) as s, pytest.raises(RuntimeError):
        head(torch.randn(2, 8, dtype=torch.bfloat16))
    (finding,) = s.report.errors
    assert finding.location.module == "a"
    (odd,) = _odd(finding)
    root = root_origin(odd.origin)
    assert (root.op, root.file, root.line) == ("Tensor.float", HERE, head.float_line)
    assert root.name is None  # `h` is the projection's output, not what .float() made
    intended = finding.data["intended"]  # the region's float32 is intent, said as such
    assert intended["dtype"] == "bfloat16"
    assert intended["evidence"] == "the weights of 'a', which consume the data, are bfloat16"
    assert intended["deliberate"].startswith(f"float32 asked for (Tensor.float at {HERE}:{head.float_line})")
    head.a.float()  # the region's module in the region's dtype
    head.b.float()
    assert head(torch.randn(2, 8, dtype=torch.bfloat16)).dtype == torch.float32


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.out = nn.Linear(16, 16)
        self.keep_line = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        keep = torch.ones(h.shape[-1])
        self.keep_line = here() - 1
        return self.out(h * keep)


def test_a_mask_made_in_forward_is_the_root_of_the_promotion_and_the_failure_after_it():
    with watch() as s:
        gate = Gate().half()
        converted = here() - 1
        with pytest.raises(RuntimeError):
            gate(torch.randn(2, 16, dtype=torch.float16))
    grouped = group_by_cause(s.report)
    promotion = next(f for f in grouped.findings if f.code == "silent-promotion")
    assert promotion.data["intended"]["evidence"] == (
        f"most of the model's parameters are float16 (a module-wide .half() at {HERE}:{converted})"
    )
    causes = {f.root_cause for f in grouped.findings}
    assert causes == {
        f"float32 `keep` made by torch.ones ({HERE}:{gate.keep_line}) → 2 findings ('<root>', 'out')"
    }


class Sinusoid(nn.Module):
    """Timestep features from a frequency table held as a buffer."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.register_buffer("freqs", torch.exp(-torch.arange(width // 2) / width), persistent=False)
        self.proj = nn.Linear(width, width)
        self.read_line = here() + 3

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        angles = t[:, None] * self.freqs[None]
        return self.proj(torch.cat([angles.sin(), angles.cos()], -1))


def test_a_table_kept_wide_on_purpose_is_blamed_where_forward_reads_it_without_a_cast():
    with watch() as s:
        emb = Sinusoid().half()
        emb.freqs = emb.freqs.float()  # precise phases on purpose
        kept = here() - 1
        with pytest.raises(RuntimeError):
            emb(torch.tensor([3.0, 500.0], dtype=torch.float16))
    (finding,) = group_by_cause(s.report).errors
    assert finding.root_cause.startswith(
        f"float32 `freqs` ({HERE}:{kept}), read without a cast in Sinusoid.forward at {HERE}:{emb.read_line}"
    )
    assert finding.data["intended"]["deliberate"].startswith(
        f"float32 asked for (Tensor.float at {HERE}:{kept})"
    )
    angles = torch.tensor([3.0, 500.0])[:, None] * emb.freqs[None]  # the read, phases kept in float32
    assert emb.proj(torch.cat([angles.sin(), angles.cos()], -1).half()).dtype == torch.float16
