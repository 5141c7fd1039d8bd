"""One spelling for every input: decode, clean the text, and give each candidate line a match view.

Three steps, each linear in the input:

- `decode`: bytes → str, with the UTF-8 BOM and UTF-16 (PowerShell `>` redirection) understood.
- `clean`: whole-text clean-up that keeps one input line per output line (line numbers stay
  meaningful): NFKC for full-width punctuation, curly quotes, ANSI colour codes (also with the
  ESC byte lost in a copy-paste) and CR line ends. Only what is present is touched: an ASCII log
  without colour or CR costs one scan.
- `view` (per candidate line, never the whole log): the form message patterns are written over:
  prefixes that loggers put before a message peeled (timestamps, glog heads, `!!! Exception
  during processing !!!`, markdown quotes and links, pytest's `E   `, rich's `│`; a rank prefix
  `[rank3]:` is kept), backticks and markdown emphasis gone,
  curly quotes straight, runs of spaces single, `a!= b` spaced, and every dtype spelling
  (`Float`, `c10::Half`, `struct c10::BFloat16`, `at::kHalf`, `kFloat16`, `torch.float16`,
  `CUDA_R_16BF`, `fp16`, `half`...) replaced by its canonical name (`float32`, `float16`,
  `bfloat16`). Legacy tensor types (`torch.cuda.HalfTensor`, `CUDAFloatType`) keep their
  spelling: they carry the device, which tells a device mismatch from a dtype one.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from functools import cache

from ..dtypes import canonical

__all__ = ["clean", "decode", "sniff", "view"]

# ---- decode --------------------------------------------------------------------------------------


def sniff(head: bytes) -> tuple[str, int]:
    """(encoding, bytes to skip) of a log from its first bytes: UTF-8 (BOM or not), UTF-16 LE/BE.

    UTF-16 is read from a BOM or from the NUL pattern of ASCII text in it. A UTF-16 BOM followed
    by text without a single NUL is two stray bytes before a UTF-8/ASCII log, not UTF-16: a log
    in UTF-16 has NULs in every line (its ASCII letters, its line ends).
    """
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8", 3
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        if len(head) > 2 and 0 not in head[2:4096]:
            return "utf-8", 2
        return ("utf-16-le" if head.startswith(codecs.BOM_UTF16_LE) else "utf-16-be"), 2
    head = head[:4096]
    if len(head) >= 4 and head.count(0) * 3 >= len(head):  # ASCII text in UTF-16 is half NULs
        even_nuls = head[0::2].count(0)
        odd_nuls = head[1::2].count(0)
        if odd_nuls > even_nuls * 4:
            return "utf-16-le", 0
        if even_nuls > odd_nuls * 4:
            return "utf-16-be", 0
    return "utf-8", 0


def decode(raw: bytes | bytearray) -> str:
    """Bytes of a log → text: UTF-8 (BOM or not), UTF-16 LE/BE (BOM or the NUL pattern of ASCII)."""
    data = bytes(raw)
    encoding, skip = sniff(data[:4096])
    return data[skip:].decode(encoding, errors="replace")


# ---- clean ---------------------------------------------------------------------------------------

# Terminal control sequences: CSI (`ESC [ ... m`), OSC (window title, OSC 52 clipboard, OSC 8 links)
# ended by BEL or ST (`ESC \\`), DCS/SOS/PM/APC strings, two-byte escapes, their 8-bit C1 forms;
# and colour codes pasted without their ESC byte (`[1m[38;2;255;000;000m`). Whatever is left of a
# control sequence (an unterminated or over-long one) loses its control characters in `_CONTROLS`.
_ANSI = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]{0,64}[ -/]{0,8}[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]{0,4096}(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]{0,4}[0-~]"
    r"|\[[0-9]{1,3}(?:;[0-9]{1,3}){0,6}m"
)
# every C0 control but tab and line ends, DEL, C1 controls; and the bidi overrides that reorder text
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_RANK = r"(\s{0,8}\[(?:rank|default)\d{1,5}\]:\s?)?"
_PEEL = (
    r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?\s{0,3}"  # 2024-05-02 14:31:07,118
    r"|\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?\]\s{0,3}"  # [2023-11-25 14:03:17,898]
    r"|[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{1,9}\s{1,8}(?:\d{1,10}\s{1,4})?[\w./\\-]{1,200}:\d{1,7}\]\s?"  # glog
    r"|(?:-\s{1,3})?(?:\[\s{0,2})?(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)(?:\s{0,2}\])?\s{0,3}(?:-\s{1,3}|:\s?)"
    r"|!!!\s{0,3}Exception during processing\s{0,3}!!!\s{0,3}"  # ComfyUI
    r"|>\s?"  # markdown quote
    r"|`{1,3}"  # inline code / fence
    r"|E {3,}"  # pytest failure lines
    r"|[│┃║]\s{0,3}"  # rich / box-drawn tracebacks
)
_PREFIX_STARTS = frozenset("0123456789[IWEFDC-!>`│┃║ \t")  # a line starting otherwise has no prefix


@cache
def _prefixes() -> re.Pattern[str]:
    """Compiled on first use (5 ms): most error lines start `RuntimeError:` and never need it."""
    return re.compile(rf"^{_RANK}(?:\s{{0,8}}(?:{_PEEL})){{1,6}}")


_MD_LINK = re.compile(r"\[([^\]\n]{1,120})\]\([^)\s]{1,400}\)")
_WIDE = (("\uff1a", ": "), ("\uff0c", ", "), ("\uff1b", "; "), ("\u3001", ", "))
_QUOTES = (("‘", "'"), ("’", "'"), ("‚", "'"), ("“", '"'), ("”", '"'), ("„", '"'), ("‐", "-"), ("−", "-"))


def _peel(m: re.Match[str]) -> str:
    return m.group(1) or ""


def _straight(text: str) -> str:
    for curly, plain in _QUOTES:
        if curly in text:
            text = text.replace(curly, plain)
    return text


def clean(text: str) -> str:
    """The text with one spelling of punctuation, no colour codes, `\n` line ends; one line per line."""
    if not text.isascii():
        for wide, plain in _WIDE:  # CJK punctuation carries its own space: keep one after it
            if wide in text:
                text = text.replace(wide, plain)
        if not unicodedata.is_normalized("NFKC", text):
            text = unicodedata.normalize("NFKC", text)
        text = _straight(text)
    if "\x1b" in text or "m[" in text:
        text = _ANSI.sub("", text)
    if not text.replace("\n", "").replace("\t", "").replace("\r", "").isprintable():  # C speed
        text = _CONTROLS.sub("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


# ---- view ----------------------------------------------------------------------------------------

_C10 = r"(?:Half|Float|Double|BFloat16|Long|Int|Short|Char|Byte|Bool|ComplexFloat|ComplexDouble|ComplexHalf|Float8_\w{2,12})"
_WORDS = r"(?:half|float|double|bfloat16|float16|float32|float64|fp16|fp32|fp64|bf16|int64|int32|int8|uint8)"
_DTYPE = re.compile(
    rf"(?:(?:struct|class)\s)?(?:c10|at)::k?(?P<c10>{_C10})\b"  # c10::Half, struct c10::Half, at::kHalf
    rf"|\btorch\.(?P<torch>{_WORDS}|long|int|bool|int16|short|complex64|complex128|uint16|float8_\w{{2,12}})\b(?!\.)"
    r"|\bk(?P<k>Float16|Float32|Float64|Float|Half|BFloat16|Double|Int64|Int32|Int8|UInt8|Long|Int|Char|Byte|Bool)\b"
    r"|\bCUDA_R_(?P<cublas>16F|16BF|32F|64F)\b"
    rf"|(?<![\w.])(?P<word>(?i:{_WORDS})|Long|Int|Short|Char|Byte|Bool|BFloat16|Float8_\w{{2,12}})(?![\w.])"
    r"|(?P<pre>dtype:?\s{0,3})(?P<low>long|int|bool|short)\b"
)
# every spelling `_DTYPE` rewrites holds one of these (lower-cased)
_DTYPE_HINTS = ("half", "float", "double", "bf16", "fp16", "fp32", "fp64", "int", "long", "short", "char", "byte",
                "bool", "cuda_r_", "complex")  # fmt: skip
_SPACES = re.compile(r"[ \t\f\v]{2,}|\s{0,4}!=\s{0,4}|[`*]{1,3}")


def _dtype(m: re.Match[str]) -> str:
    if m.group("cublas"):
        return canonical("cuda_r_" + m.group("cublas")) or m.group(0)
    if m.group("low"):
        return m.group("pre") + (canonical(m.group("low")) or m.group("low"))
    spelling = m.group("c10") or m.group("torch") or m.group("k") or m.group("word") or ""
    return canonical(spelling) or m.group(0)


def _space(m: re.Match[str]) -> str:
    s = m.group(0)
    if "!=" in s:
        return " != "
    return "" if s[0] in "`*" else " "


def view(line: str) -> str:
    """The form patterns match: no logger prefix, plain punctuation, single spaces, canonical dtypes."""
    line = _straight(line)
    if line[:1] in _PREFIX_STARTS:
        line = _prefixes().sub(_peel, line)
    if "](" in line:
        line = _MD_LINK.sub(r"\1", line)
    if "  " in line or "!=" in line or "`" in line or "*" in line or "\t" in line:
        line = _SPACES.sub(_space, line)
    low = line.lower()
    if any(k in low for k in _DTYPE_HINTS):  # the regex costs ~10 µs a line; most log lines have no dtype
        line = _DTYPE.sub(_dtype, line)
    return line
