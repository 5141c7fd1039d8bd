"""explain on any input: streamed in bounded memory, a trigger word is not an error, stray bytes,
terminal escapes, an output over its input (issue 22, items 1, 13, 17, 18, 19)."""

from __future__ import annotations

import codecs
import io
import tracemalloc

import pytest

from dtype_doctor.cli import main
from dtype_doctor.explaining import explain, explain_sources

MSG = "RuntimeError: mat1 and mat2 must have the same dtype, but got Float and Half"


class _Stream(io.BufferedIOBase):
    """`size` bytes of `unit` repeated, produced as they are read (never held whole)."""

    def __init__(self, size: int, unit: bytes) -> None:
        self.left, self.unit = size, unit

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return (self.unit * (n // len(self.unit) + 1))[:n]


def _peak_mb(raw) -> tuple[float, list[str]]:
    tracemalloc.start()
    try:
        report = explain_sources([("big", raw)])
        return tracemalloc.get_traced_memory()[1] / 1e6, report.codes()
    finally:
        tracemalloc.stop()


# ---- item 17: stream the input; memory bounded by a constant ------------------------------------


@pytest.mark.parametrize("unit", [b"y\n", b"x = torch.zeros(8) bf16 "], ids=["yes", "one-long-line"])
def test_memory_stays_bounded_whatever_the_input_size(unit):
    peak, codes = _peak_mb(_Stream(16 << 20, unit))
    assert codes == ["unknown"]
    assert peak < 40, peak  # held whole, 16 MB would be 48 MB at least (bytes, text, lower-cased text)


def test_an_error_anywhere_in_a_streamed_log_is_found_with_its_line_number():
    head = b"step 1 loss=0.3 precision=bf16\n" * 100_000  # ~3 MB before it, crossing read chunks
    text = head + b'  File "train.py", line 9, in <module>\n    y = model(x)\n' + MSG.encode() + b"\n" + head
    report = explain_sources([("train.log", io.BytesIO(text))])
    (f,) = report.findings
    assert f.code == "matmul-dtype-mismatch" and f.location.file == "train.py"
    assert f.evidence[0].line == 100_003


def test_the_same_error_across_read_chunks_is_counted_once_per_occurrence():
    block = (b"noise line\n" * 5000 + MSG.encode() + b"\n") * 80  # ~4 MB, 80 occurrences
    (f,) = explain_sources([(None, io.BytesIO(block))]).findings
    assert f.code == "matmul-dtype-mismatch" and f.count == 80


def test_dev_zero_on_stdin_is_refused_at_once(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(_Stream(1 << 40, b"\0")))
    assert main(["explain", "-"]) == 2
    err = capsys.readouterr().err
    assert "binary data" in err and err.count("\n") == 1


# ---- item 13: a word is not an error ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "dtype-doctor run: no problems found.",
        "".join(f"step {i} | loss {i % 7}.31 | precision=bf16 | dtype=torch.bfloat16\n" for i in range(2000)),
        "precision=bf16",
        "trainer: mixed_precision=fp16, torch_dtype=float16 -- 0 errors, no warnings",
    ],
    ids=["all-clear", "clean-log", "one-setting", "zero-errors"],
)
def test_dtype_words_without_an_error_are_unknown_not_an_error(text, capsys):
    assert main(["explain", text, "--no-env"]) == 3
    assert "ERROR" not in capsys.readouterr().out
    assert explain(text).codes() == ["unknown"]


def test_a_short_description_about_dtypes_still_gets_its_nearest_family():
    assert explain("trying flash-attention 2 on float32 tensors").codes() == ["flash-attention-dtype"]


# ---- item 18: control sequences from the input never reach the terminal ----------------------------


@pytest.mark.parametrize("color", [True, False], ids=["color", "no-color"])
def test_terminal_escapes_ended_with_st_or_bel_are_stripped(color, capsys):
    text = (
        f"{MSG} \x1b]0;PWNED-TITLE\x1b\\ \x1b]52;c;ZXZpbA==\x1b\\ \x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\"
        " \x1bP1$qm\x1b\\ \x1b_apc\x1b\\ \x9b31m \x9d0;C1-TITLE\x9c \x07\x08"
    )
    assert main(["explain", text, "--no-env", *([] if color else ["--no-color"])]) == 0
    out = capsys.readouterr().out
    for bad in (
        "PWNED",
        "C1-TITLE",
        "\x1b]",
        "\x1b\\",
        "\x1bP",
        "\x1b_",
        "\x9b",
        "\x9d",
        "\x07",
        "\x08",
        "evil",
    ):
        assert bad not in out, bad
    if not color:
        assert "\x1b" not in out


# ---- item 19: two stray bytes FF FE before an ASCII log ---------------------------------------------


def test_stray_utf16_bom_before_an_ascii_log_is_not_read_as_utf16():
    data = codecs.BOM_UTF16_LE + f"step 1\n{MSG}\n".encode()
    assert explain(data).codes() == ["matmul-dtype-mismatch"]
    assert explain(f"step 1\n{MSG}\n".encode("utf-16")).codes() == ["matmul-dtype-mismatch"]  # real UTF-16


# ---- item 1: an output path equal to an input is refused ------------------------------------------


@pytest.mark.parametrize("how", ["--file", "text"])
def test_json_output_over_the_input_log_is_refused(tmp_path, capsys, how):
    log = tmp_path / "train.log"
    log.write_text(MSG + "\n")
    argv = ["explain", "--file", str(log)] if how == "--file" else ["explain", str(log)]
    assert main([*argv, f"--json={log}"]) == 2
    assert "inputs" in capsys.readouterr().err
    assert log.read_text() == MSG + "\n"
    assert main([*argv, "--html", str(log)]) == 2
    assert log.read_text() == MSG + "\n"
