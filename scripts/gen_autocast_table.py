"""Generate dtype-doctor's autocast op table by executing ops under autocast (issue 18).

    python scripts/gen_autocast_table.py                 # CPU: writes src/dtype_doctor/watching/autocast_ops.json
    python scripts/gen_autocast_table.py --device cuda   # on a machine with a GPU: the CUDA table, measured
    python scripts/gen_autocast_table.py --device cuda --from-lists   # no GPU: from torch's CUDA lists
    python scripts/gen_autocast_table.py --ops mm einsum --print   # a slice, printed (what the test runs)

Every floating op torch exposes (`torch.overrides.get_testing_overrides()`: functions, functionals and
Tensor methods) is run on sample operands: OpInfo's sample inputs (torch.testing._internal) where the op
has an OpInfo, else small 2-D float tensors tried in the op's first positional parameters. Each sample
runs with its floating operands all float32, all in the low dtype, and mixed (one low, the others
float32), with autocast off and under `torch.autocast(device, dtype=low)` for bfloat16 and float16. An
op's policy is read from what torch did, so a composite op inherits what its decomposition does:

    low      float32 operands give a low output under autocast (autocast casts to its dtype)
    fp32     low operands give a float32 output under autocast (autocast casts to float32)
    promote  mixed operands raise without autocast and run under it (autocast casts to the widest)
    (absent) autocast leaves the op alone: measured, nothing cast

An op whose samples disagree (a shape-dependent decomposition) keeps the policy its samples with two or
more floating operands show most (they are what a dtype mismatch is about); with one operand, none.
Without a GPU the CUDA table is not measured: it stays as written from torch's CUDA autocast lists.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import sys
import types
import unittest
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from dtype_doctor.watching.autocast_table import aten_op_name  # the table's key

sys.path.insert(0, str(Path(__file__).resolve().parent))
import isolated  # scripts/isolated.py: the worker processes

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "dtype_doctor" / "watching" / "autocast_ops.json"
LOWS = {"bfloat16": torch.bfloat16, "float16": torch.float16}
MAX_SAMPLES = 8
ABORT_HOOK = "DTYPE_DOCTOR_TABLE_ABORT_OP"  # tests: the worker aborts when it reaches this op
# ops whose run is not a dtype question (RNG state, process state, printing, huge allocations)
SKIP = {"set_", "resize_", "resize_as_", "storage", "untyped_storage", "share_memory_", "record_stream",
        "backward", "register_hook", "retain_grad", "data_ptr", "tolist", "numpy", "item", "pin_memory",
        "cuda", "cpu", "to", "type", "to_sparse", "__reduce_ex__", "__setstate__", "__deepcopy__",
        "new_empty_strided", "empty_strided", "__array__", "__array_wrap__", "__dlpack__", "__torch_function__",
        "normal", "cauchy_", "exponential_", "geometric_", "log_normal_", "random_", "uniform_", "normal_",
        "bernoulli", "bernoulli_", "multinomial", "rrelu", "rrelu_", "dropout", "feature_dropout",
        "alpha_dropout", "feature_alpha_dropout", "poisson", "binomial"}  # fmt: skip


# ---------------------------------------------------------------- samples


def _opinfo_db() -> list:
    if "expecttest" not in sys.modules:
        try:
            import expecttest  # noqa: F401
        except ImportError:  # torch's test utilities want it for TestCase only; op_db needs none of it
            sys.modules["expecttest"] = types.SimpleNamespace(TestCase=unittest.TestCase)  # type: ignore
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except Exception as exc:  # a torch build without its test utilities: generic samples only
        print(f"OpInfo unavailable ({type(exc).__name__}: {exc}); generic samples only", file=sys.stderr)
        return []
    return op_db


def _variant_name(info: Any, variant: Any) -> str:
    """An OpInfo variant's table key; a lambda wrapper (einsum, embedding) takes the OpInfo's name."""
    name = aten_op_name(variant)
    if name.isidentifier():
        return name
    space, _, last = info.name.rpartition(".")
    return f"{space}_{last}" if space in ("linalg", "fft", "special") else last


def _opinfo_samples(wanted: set[str] | None, device: str) -> dict[str, tuple[list[Any], list[tuple]]]:
    """name → (callables, [(args, kwargs)]) from OpInfo: the function, method and in-place variants."""
    out: dict[str, tuple[list[Any], list[tuple]]] = {}
    for info in _opinfo_db():
        variants = [v for v in (info.op, info.method_variant, info.inplace_variant) if v is not None]
        names = {_variant_name(info, v) for v in variants}
        if wanted is not None and not names & wanted:
            continue
        if torch.float32 not in info.supported_dtypes(device):
            continue
        samples = []
        try:
            for s in info.sample_inputs(device, torch.float32, requires_grad=False):
                samples.append(((s.input, *s.args), dict(s.kwargs)))
                if len(samples) >= MAX_SAMPLES:
                    break
        except Exception:
            continue
        for v in variants:
            entry = out.setdefault(_variant_name(info, v), ([], []))
            entry[0].append(v)
            entry[1].extend(samples)
    return out


def _generic_samples(device: str) -> list[tuple]:
    """For an op without an OpInfo: one to three 4x4 float tensors (unary, binary, ternary ops)."""
    t = [torch.randn(4, 4, device=device) for _ in range(3)]
    return [((t[0],), {}), ((t[0], t[1]), {}), ((t[0], t[1], t[2]), {})]


def _extra_samples(device: str) -> dict[str, list[tuple]]:
    """Samples for ops without an OpInfo whose autocast policy matters (torch's autocast lists name them)."""
    r = lambda *shape: torch.randn(*shape, device=device)  # noqa: E731
    h, i = 3, 4
    cell = {"lstm_cell": 4, "gru_cell": 3, "rnn_tanh_cell": 1, "rnn_relu_cell": 1}
    out = {
        name: [
            (
                (
                    r(2, i),
                    (r(2, h), r(2, h)) if k == 4 else r(2, h),
                    r(k * h, i),
                    r(k * h, h),
                    r(k * h),
                    r(k * h),
                ),
                {},
            )
        ]
        for name, k in cell.items()
    }
    out["conv_tbc"] = [((r(5, 2, 3), r(2, 3, 4), r(4), 0), {})]
    out["convolution"] = [
        ((r(1, 2, 5, 5), r(3, 2, 3, 3), r(3), [1, 1], [0, 0], [1, 1], False, [0, 0], 1), {})
    ]
    out["concat"] = out["concatenate"] = out["row_stack"] = [(([r(2, 3), r(2, 3)],), {})]
    out["grid_sampler"] = [((r(1, 2, 4, 4), r(1, 3, 3, 2), 0, 0, False), {})]
    out["matrix_power"] = [((r(3, 3), 2), {})]
    out["ger"] = out["outer"] = [((r(3), r(4)), {})]
    out["polar"] = [((r(3).abs(), r(3)), {})]
    return out


def _as_float32(x: Any) -> Any:
    low = isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16)
    return x.float() if low else x


def _list_samples() -> dict[str, tuple[list[Any], list[tuple]]]:
    """The operands torch's own autocast tests use (autocast_test_lists): valid args for the ops those
    lists name, private ones included (_addmm_activation). Only the samples are taken from the lists:
    what autocast does with them is measured like any other op's."""
    _opinfo_db()  # the expecttest stand-in
    try:
        from torch.testing._internal.autocast_test_lists import AutocastCPUTestLists, AutocastTestLists
    except Exception:
        return {}
    spaces = {"torch": torch, "nn": torch._C._nn, "linalg": torch._C._linalg, "methods": torch.Tensor}
    out: dict[str, tuple[list[Any], list[tuple]]] = {}
    for lists in (AutocastCPUTestLists("cpu"), AutocastTestLists("cpu")):
        for attr in dir(lists):
            space = attr.split("_")[0]
            if space not in spaces or attr.endswith("expect_builtin_promote"):
                continue
            for entry in getattr(lists, attr):
                func = getattr(spaces[space], entry[0], None)
                args = entry[1]
                if func is None or not isinstance(args, tuple):
                    continue  # einsum's entry is (equation, operands) in a form its own test unpacks
                kwargs = entry[2] if len(entry) > 2 and isinstance(entry[2], dict) else {}
                funcs, samples = out.setdefault(aten_op_name(func), ([], []))
                if func not in funcs:
                    funcs.append(func)
                samples.append(tree_map(_as_float32, (args, kwargs)))  # the fp32 lists give low operands
    return out


def candidates(wanted: set[str] | None, device: str) -> dict[str, tuple[list[Any], list[tuple]]]:
    """Every op to measure: name → (callables, samples)."""
    table = _opinfo_samples(wanted, device)
    generic, extra = _generic_samples(device), _extra_samples(device)
    guessed: set[str] = set()
    for func in torch.overrides.get_testing_overrides():
        name = aten_op_name(func)
        if not name or name in SKIP or (wanted is not None and name not in wanted):
            continue
        funcs, samples = table.setdefault(name, ([], []))
        if func not in funcs:
            funcs.append(func)
        if not samples:
            samples.extend(extra.get(name, generic))
            guessed.add(name)
    for name, (funcs, samples) in _list_samples().items():
        if wanted is None or name in wanted:
            entry = table.setdefault(name, ([], []))
            entry[0].extend(f for f in funcs if f not in entry[0])
            if name in guessed:
                entry[1].clear()  # the lists' operands are valid; the guessed ones may not be
            entry[1].extend(samples[:MAX_SAMPLES])
    return {n: v for n, v in table.items() if n not in SKIP}


# ---------------------------------------------------------------- running one sample


def _floats(sample: tuple) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(sample)
    return [x for x in leaves if isinstance(x, torch.Tensor) and x.dtype == torch.float32]


def _as(sample: tuple, cast: dict[int, torch.dtype]) -> tuple:
    """The sample with its float32 tensors (by id) cast as `cast` says."""
    return tree_map(
        lambda x: x.to(cast[id(x)]) if isinstance(x, torch.Tensor) and id(x) in cast else x, sample
    )


def _call(func: Any, sample: tuple, device: str, low: torch.dtype | None) -> str:
    """The first floating output's dtype name, "raises", or "" (no floating output)."""
    args, kwargs = sample
    args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)  # in-place ops
    ctx = torch.autocast(device, dtype=low) if low is not None else contextlib.nullcontext()
    try:
        with ctx, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = func(*args, **kwargs)
    except Exception:
        return "raises"
    leaves, _ = tree_flatten(out)
    first = next(
        (x for x in leaves if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())), None
    )
    if first is None:
        return ""
    dtype = first.dtype.to_real() if first.is_complex() else first.dtype  # fft: complex64 is float32's
    return str(dtype).removeprefix("torch.")


def measure_sample(func: Any, sample: tuple, device: str, low: torch.dtype) -> tuple[str | None, str | None]:
    """(policy, mixed) one sample shows under autocast(low). policy: None for none, "?" when the sample
    does not run; mixed: "runs"/"raises" for one operand low and the others float32, None with one."""
    floats = _floats(sample)
    if not floats or _call(func, sample, device, None) != "float32":
        return "?", None  # the sample fails on its own, or its output's dtype is not the operands'
    lname = str(low).removeprefix("torch.")
    mixed, promotes = None, False
    if len(floats) > 1:
        mixed = "runs"
        for k in (0, len(floats) - 1):  # one operand low, the others float32: first and last
            one = _as(sample, {id(floats[k]): low})
            on = _call(func, one, device, low)
            mixed = "raises" if on == "raises" else mixed
            promotes = promotes or (on == "float32" and _call(func, one, device, None) == "raises")
    if _call(func, sample, device, low) == lname:
        return "low", mixed
    all_low = _as(sample, {id(t): low for t in floats})
    off, on = _call(func, all_low, device, None), _call(func, all_low, device, low)
    if on == "float32" and off in (lname, "raises"):  # no low kernel: autocast's cast is what runs
        return "fp32", mixed
    return ("promote" if promotes and mixed == "runs" else None), mixed


def measure(funcs: list[Any], samples: list[tuple], device: str, low: torch.dtype) -> dict[str, Any]:
    """An op's policy, whether its samples disagree, and whether mixed operands still raise under it.

    A policy seen with two or more floating operands wins (the case a dtype mismatch is about: einsum
    casts when it reaches bmm, not for "i->"; ties: low, fp32, promote); an op seen with one operand
    only has a policy where all its samples agree. mixed_raises: autocast casts the output but most mixed calls still raise (tensordot checks
    its operands' dtypes before it reaches mm)."""
    seen: collections.Counter = collections.Counter()
    multi: collections.Counter = collections.Counter()
    raised: collections.Counter = collections.Counter()
    for func in funcs:
        for sample in samples:
            sample = tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, sample)
            got, mixed = measure_sample(func, sample, device, low)
            if got == "?":
                continue
            seen[got] += 1
            if mixed is not None:
                multi[got] += 1
                raised[got] += mixed == "raises"
        if seen:
            break  # the first variant that runs decides (the method shares its kernel)
    if not seen:
        return {"policy": "?", "varies": False, "mixed_raises": False}
    counts = collections.Counter({k: v for k, v in multi.items() if k is not None})
    if counts:
        best = max(counts.values())
        policy = next(p for p in ("low", "fp32", "promote") if counts[p] == best)
    else:  # one operand: a policy only where every sample shows it (pad casts in reflect mode only)
        policy = next(iter(seen)) if len(seen) == 1 else None
    mixed_raises = policy is not None and multi[policy] > 0 and 2 * raised[policy] > multi[policy]
    return {"policy": policy, "varies": len(seen) > 1, "mixed_raises": mixed_raises}


def measure_op(funcs: list[Any], samples: list[tuple], device: str) -> dict[str, Any]:
    """One op measured under each low dtype: low dtype name → measure's result."""
    return {lname: measure(funcs, samples, device, low) for lname, low in LOWS.items()}


def assemble(results: dict[str, dict[str, Any]], left_out: dict[str, str] | None = None) -> dict[str, Any]:
    """Per low dtype name: {"policies": {op: policy}, "varies": [...], "mixed_raises": [...],
    "no_sample_ran": [...]}, plus "left_out": {op: why} for the ops an isolated run could not measure
    (one killed its worker, hung, or the budget ran out first)."""
    result: dict[str, Any] = {}
    for lname in LOWS:
        out: dict[str, Any] = {"policies": {}, "varies": [], "mixed_raises": [], "no_sample_ran": []}
        for name in sorted(results):
            got = results[name][lname]
            if got["policy"] == "?":
                out["no_sample_ran"].append(name)
                continue
            if got["policy"] is not None:
                out["policies"][name] = got["policy"]
            for key in ("varies", "mixed_raises"):
                if got[key]:
                    out[key].append(name)
        if left_out:
            out["left_out"] = dict(sorted(left_out.items()))
        result[lname] = out
    return result


def generate(device: str, wanted: set[str] | None = None) -> dict[str, Any]:
    """The table measured on `device` in this process (see assemble). An op absent from policies:
    autocast leaves it alone."""
    torch.manual_seed(0)
    ops = candidates(wanted, device)
    return assemble({name: measure_op(*ops[name], device) for name in sorted(ops)})


# ---------------------------------------------------------------- the data file


def header(device: str, measured: bool = True) -> dict[str, Any]:
    source = (
        "executed under torch.autocast"
        if measured
        else (
            "torch's CUDA autocast lists (torch.testing._internal.autocast_test_lists.AutocastTestLists, and "
            "scaled_dot_product_attention from aten/src/ATen/autocast_mode.cpp): not measured, no GPU where it "
            "was made; `python scripts/gen_autocast_table.py --device cuda` on a GPU measures it"
        )
    )
    return {
        "torch": torch.__version__,
        "device": device,
        "measured": measured,
        "source": source,
        "made_by": "scripts/gen_autocast_table.py",
    }


def from_lists() -> dict[str, Any]:
    """The CUDA table as torch's CUDA autocast lists write it, the same for both low dtypes."""
    _opinfo_db()  # the expecttest stand-in
    from torch.testing._internal.autocast_test_lists import AutocastTestLists

    lists = AutocastTestLists("cpu")
    policies = {"scaled_dot_product_attention": "low"}  # in autocast_mode.cpp's lower list, no test's
    for attr, kind in (("torch_fp16", "low"), ("nn_fp16", "low"), ("linalg_fp16", "low"),
                       ("methods_fp16", "low"), ("torch_fp32", "fp32"), ("nn_fp32", "fp32"),
                       ("methods_fp32", "fp32"), ("torch_need_autocast_promote", "promote")):  # fmt: skip
        for entry in getattr(lists, attr):
            name = aten_op_name(types.SimpleNamespace(__name__=entry[0]))
            policies[name if attr != "linalg_fp16" or name.startswith("linalg_") else f"linalg_{name}"] = kind
    table = {
        "policies": dict(sorted(policies.items())),
        "varies": [],
        "mixed_raises": [],
        "no_sample_ran": [],
    }
    return {low: table for low in LOWS}


def write(device: str, table: dict[str, Any], path: Path = OUT, measured: bool = True) -> None:
    """Put the device's table in the data file (other devices' tables are kept)."""
    data = json.loads(path.read_text()) if path.exists() else {}
    data[device] = {**header(device, measured), **table}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def work(device: str, wanted: set[str] | None, skip: set[str], log: Path) -> None:
    """The isolated worker: measure each op not in `skip`, appending to `log` a line before it runs
    ({"start": op}) and one with its result, so that the parent can name the op a crash killed."""
    torch.manual_seed(0)
    ops = candidates(wanted, device)
    abort = os.environ.get(ABORT_HOOK)  # the tests' crash: this op aborts the worker
    todo = sorted(set(ops) - skip)
    with log.open("a") as f:
        f.write(json.dumps({"ops": todo}) + "\n")
        for name in todo:
            f.write(json.dumps({"start": name}) + "\n")
            f.flush()
            if name == abort:
                os.abort()
            f.write(json.dumps({"op": name, "result": measure_op(*ops[name], device)}) + "\n")
            f.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "xpu", "mps"])
    parser.add_argument("--ops", nargs="*", help="measure these op names only")
    parser.add_argument("--print", action="store_true", help="print instead of writing the data file")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--from-lists", action="store_true", help="cuda without a GPU: from torch's lists")
    parser.add_argument("--budget", type=float, default=270.0, help="seconds for the whole measurement")
    parser.add_argument("--in-process", action="store_true", help="no worker process (a crash ends the run)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # isolated.run's child
    parser.add_argument("--skip", nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    wanted = set(args.ops) if args.ops else None
    if args.worker is not None:
        work(args.device, wanted, set(args.skip), args.worker)
        return 0
    if args.from_lists:
        if args.device != "cuda":
            print("--from-lists is for --device cuda", file=sys.stderr)
            return 2
        write("cuda", from_lists(), args.out, measured=False)
        print(f"{args.out}: cuda from torch's CUDA autocast lists, torch {torch.__version__}")
        return 0
    if args.device != "cpu" and not getattr(torch, args.device).is_available():
        print(
            f"no {args.device} device here (--device cuda --from-lists writes torch's lists)", file=sys.stderr
        )
        return 2
    if args.in_process:
        measured = generate(args.device, wanted)
    else:
        measured = _isolated(args.device, args.ops or [], args.budget)
    if args.print:
        print(json.dumps(measured, indent=1, sort_keys=True))
    else:
        write(args.device, measured, args.out)
        n = {k: len(v["policies"]) for k, v in measured.items()}
        print(f"{args.out}: {args.device} policies {n}, torch {torch.__version__}")
    return 0


def _isolated(device: str, ops: list[str], budget: float) -> dict[str, Any]:
    """The table measured in worker processes: an op that kills its worker is left out, named."""
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--device",
        device,
        *(["--ops", *ops] if ops else []),
    ]
    results, left_out = isolated.run(argv, budget)
    for name, why in sorted(left_out.items()):
        print(f"gen_autocast_table: {name} {why}; left out of the table", file=sys.stderr)
    return assemble(results, left_out)


if __name__ == "__main__":
    sys.exit(main())
