"""check converts the meta mirror exactly as a real load does: every parameter's and buffer's dtype
after `convert_like_loader` equals the dtype after a real `save_pretrained` + `from_pretrained` on CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("diffusers")

from dtype_doctor.checking.check import mirror_on_meta  # noqa: E402
from dtype_doctor.checking.convert import convert_like_loader  # noqa: E402
from zoo import models as zoo  # noqa: E402

ARCHS = [
    "llama",  # rotary inv_freq: a non-persistent buffer built in the default dtype
    "deberta",  # q_bias/v_bias made with an explicit dtype=torch.float: they stay fp32
    "deberta-v2",
    "swinv2",  # relative_coords_table: not in the checkpoint, built in the target dtype
    "m2m_100",  # sinusoidal position table made at init
    "speech_to_text",
    "t5",  # _keep_in_fp32_modules = ["wo"]: fp16 only
    "bert",
    "gpt2",
    "vit",
    "clip",
    "whisper",
    "switch_transformers",
    "diffusers:UNet2DConditionModel",
    "diffusers:AutoencoderKL",
    "diffusers:SD3Transformer2DModel",
]


def _dtypes(model: torch.nn.Module) -> dict[str, str]:
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    return {name: str(t.dtype) for name, t in named}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", ARCHS)
def test_emulated_load_gives_every_tensor_the_dtype_of_a_real_load(name, dtype, tmp_path):
    model = zoo.build(name)
    real = zoo.load(model, dtype, tmp_path)
    mirror = mirror_on_meta(model)
    _, loaded_as = convert_like_loader(mirror, dtype)
    assert "from_pretrained" in loaded_as and str(dtype).removeprefix("torch.") in loaded_as
    want, got = _dtypes(real), _dtypes(mirror)
    assert {k: got.get(k) for k in want} == want


def test_fp32_islands_are_the_modules_whose_parameters_are_all_float32():
    """convert._fp32_islands reads one bottom-up summary (one walk) instead of each module's
    parameters(): the same modules, a shared module and a module without parameters included."""
    from torch import nn

    from dtype_doctor.checking import convert

    shared = nn.Linear(2, 2)
    model = nn.Sequential(
        nn.Sequential(nn.Linear(2, 2), shared),  # all fp32 after .float() below: kept as a whole
        nn.Sequential(shared, nn.Linear(2, 2)),  # half fp16
        nn.Sequential(nn.ReLU(), nn.Sequential()),  # no parameters: not an island
        nn.LayerNorm(2),
    ).half()
    model[0].float()
    model[3].float()

    def reference(name: str, module: nn.Module) -> bool:
        params = [p for p in module.parameters() if p.is_floating_point() and p.element_size() > 1]
        return bool(params) and all(p.dtype == torch.float32 for p in params)

    summary = convert._all_float32(model)
    assert {n: summary[id(m)] for n, m in model.named_modules()} == {
        n: reference(n, m) for n, m in model.named_modules()
    }
    assert convert._fp32_islands(model, {}, torch.float16, []) == ["0", "3"]
    assert convert._fp32_islands(model, {}, torch.float16, ["0"]) == ["3"]


def test_the_rebuild_skips_initialisers_of_meta_tensors_only():
    """convert._fresh rebuilds the model without torch.nn.init's fills of meta tensors (no values to
    set, half the rebuild's time): an initialiser still returns its tensor, and a real tensor is
    still filled."""
    from torch.overrides import TorchFunctionMode

    from dtype_doctor.checking.convert import _NoRandomFill

    seen: list = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    with torch.device("meta"), Record(), _NoRandomFill():
        pos = torch.nn.Parameter(torch.nn.init.trunc_normal_(torch.empty(1, 4), std=0.02))
        torch.nn.Linear(4, 4)
    assert pos.is_meta and pos.shape == (1, 4)
    assert "empty" in seen and not {"uniform_", "normal_", "kaiming_uniform_", "trunc_normal_"} & set(seen)
    with _NoRandomFill():
        real = torch.nn.init.uniform_(torch.zeros(1000), 1.0, 2.0)
    assert real.min() >= 1.0
