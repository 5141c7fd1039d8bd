"""The remedy processor: the only code that builds a `Fix` (besides the JSON loader in report.py).

Producers give a template (a family's, or a shared one of `catalog/shared_remedies.py`) and their evidence;
`make` writes it in the user's names, with the place its snippet is pasted; `ranked` gives a
family's applicable remedies best first; `first` puts remedies at the cause ahead of the others,
`behind_verified` right after those a replay verified (a root cause's fix, added after the replay);
`revise` rewrites a made fix (the user's name for the model, an import the place lacks);
`in_user_names` keeps a snippet as code only when every name it reads exists at its place.

Every fix says where its snippet is pasted when the producer knows that place: an explicit
`file`/`line`, else the producer's `places` (`remedies.places.Places`: the user's lines by kind)
at the kind the remedy needs (`place_for`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from ..editing.paste import parts
from ..report import Fix
from ..verifying.contract import not_verified
from .builders import BUILDERS, PLACES
from .model import FixTemplate
from .names import Names, present
from .places import CALL, INPUT, MODEL, Place, Places, kind_of
from .scope import phrase, unresolved

# the user's variables a snippet may read: a snippet reading one the producer does not know names a
# placeholder (`x`) the program lacks, so it is placed nowhere (explain, from a log, never knows them)
_VARIABLES = ("tensor", "array")

# where a remedy goes when the producer does not know its own kind of place: the user's call of the
# model sees the tensors it passes and the model itself
_FALLBACK = {INPUT: CALL, MODEL: CALL}


def place_for(template: FixTemplate, places: Places | None) -> Place | None:
    """The user's line `template`'s snippet is pasted at, among the producer's `places`."""
    if not places:
        return None
    kind = template.place or PLACES.get(template.build, "") or kind_of(template.snippet)
    found = places.get(kind) if kind else None
    if found is None and kind in _FALLBACK:
        found = places.get(_FALLBACK[kind])
    return found


def make(
    template: FixTemplate | tuple[FixTemplate, ...],
    *,
    file: str | None = None,
    line: int | None = None,
    places: Places | None = None,
    **names: Any,
) -> Fix | None:
    """The remedy written with the producer's evidence, or None when evidence it needs is missing.

    template: one, or alternatives best first (the first whose `needs` the evidence meets is made).
    file, line: where the snippet is pasted (also `{file}`/`{line}` in its text); without them, the
    place of the remedy's kind among `places`."""
    mapping = Names.known(names, listed=True)
    if file:
        mapping.setdefault("file", file)
        if line is not None:
            mapping.setdefault("line", line)
    options = template if isinstance(template, tuple) else (template,)
    template = next((t for t in options if _applies(t, mapping)), None)  # type: ignore[assignment]
    if template is None:
        return None
    snippet = BUILDERS[template.build](mapping) if template.build else template.snippet.format_map(mapping)
    if snippet is None:
        return None
    at = Place(file, line) if file and line is not None else place_for(template, places)
    return Fix(
        title=template.title.format_map(mapping),
        snippet=snippet,
        why=template.why.format_map(mapping),
        language=template.language,
        file=at.file if at else file or None,
        line=at.line if at else None,
    )


def _applies(template: FixTemplate, names: Names) -> bool:
    return all(present(names.get(key)) for key in template.needs)


def _in_comment(line: str, old: str, new: str) -> str:
    code, sep, comment = line.partition("#")
    return code + sep + comment.replace(old, new)


def ranked(templates: Iterable[FixTemplate], context: Iterable[str] = (), **names: Any) -> list[Fix]:
    """A family's remedies for a context, best first.

    A template with `when` tags applies only if one of them is in `context`; one with `unless` tags
    is dropped if any is present. Context-specific fixes come first, in catalog order, then the
    general ones. Each is placed at the kind of line it needs among the evidence `places`, but for
    one whose snippet reads a variable the producer does not know; when the producer gives `places`
    (it read the user's frames), such a remedy is shown without code, after the others."""
    ctx = set(context)
    specific: list[Fix] = []
    general: list[Fix] = []
    unnamed: list[Fix] = []
    # a producer that read the user's frames (it gives `places`) and left a variable or the dtype
    # unknown: the user has no such name, so a snippet on a placeholder is advice, never code, and last
    lacking = [v for v in (*_VARIABLES, "dtype") if names.get(v) is None] if "places" in names else []
    places = names.pop("places", None)
    mapping = Names.known(names)
    for t in templates:
        if (t.unless and ctx & t.unless) or (t.when and not (ctx & t.when)):
            continue
        if not _applies(t, mapping):
            continue
        title = t.title.format_map(mapping)
        snippet = BUILDERS[t.build](mapping) if t.build else t.snippet.format_map(mapping)
        if snippet is None:
            continue
        if "module" not in mapping:  # no module known: say so, never quote a placeholder as a name
            title = title.replace("'the module'", "the module that raised")
        elif mapping["module"] == "<root>":  # the model itself: the user's name for it
            model = str(mapping.get("model") or "model")
            title = title.replace("'<root>'", f"`{model}`").replace("<root>", f"the whole model `{model}`")
            snippet = "\n".join(_in_comment(line, "<root>", model) for line in snippet.splitlines())
        if any(f"{{{v}}}" in t.snippet for v in lacking):
            unnamed.append(Fix(title=title, why=t.why))
            continue
        guess = any(f"{{{v}}}" in t.snippet and v not in mapping for v in _VARIABLES)
        at = place_for(t, places) if snippet.strip() and not guess else None
        fix = Fix(
            title=title,
            snippet=snippet,
            why=t.why,
            language=t.language,
            file=at.file if at else None,
            line=at.line if at else None,
        )
        (specific if t.when else general).append(fix)
    return specific + general + unnamed


def first(fixes: list[Fix], *ahead: Fix | None) -> list[Fix]:
    """`ahead` (those not None), then `fixes` without any that repeats one of their snippets."""
    new = [f for f in ahead if f is not None]
    taken = {f.snippet.strip() for f in new}
    return [*new, *(f for f in fixes if f.snippet.strip() not in taken)]


def behind_verified(fixes: list[Fix], fix: Fix | None) -> list[Fix]:
    """`fix` first but behind the fixes a replay verified; not added when one has its snippet already
    (offered, and possibly verified, by the producer)."""
    if fix is None or any(x.snippet.strip() == fix.snippet.strip() for x in fixes):
        return fixes
    ahead = next((i for i, x in enumerate(fixes) if not x.verified), len(fixes))
    return [*fixes[:ahead], fix, *fixes[ahead:]]


def in_user_names(fix: Fix, program: str | None = None) -> Fix:
    """`fix` when its snippet is a statement in the user's names at the place it states (`program`,
    the user's script, at any line when it states none); else the fix as words only, labelled with
    the names that break it (`remedies.scope.unresolved`): a snippet that would raise NameError when
    pasted, or that assigns a result nothing reads, is never shown as code. A place in a file that
    cannot be read (a library's, a report read back elsewhere) is not judged."""
    if fix.language != "python" or not fix.snippet.strip():
        return fix
    path, line = (fix.file, fix.line) if fix.file else (program, None)
    if not path or (fix.file and line is None) or not os.path.isfile(path):
        return fix
    problems = _unresolved_parts(fix.snippet, path, line)
    if not problems:
        return fix
    return replace(
        fix,
        snippet="",
        language="",
        verified=None,
        verification=not_verified(f"advice only, not code: {phrase(problems)}").text,
        file=None,
        line=None,
    )


def _unresolved_parts(snippet: str, path: str, line: int | None) -> list[str]:
    """`unresolved` for each part of a snippet that edits several places (`# and at FILE:LINE:`), each
    judged at its own place (a part in a file that cannot be read is not judged)."""
    problems: list[str] = []
    for named, at, code in parts(snippet):
        where, here = (named, at) if named else (path, line)
        if os.path.isfile(where):
            problems += unresolved(code, where, here)
    return problems


def revise(fix: Fix, **changes: Any) -> Fix:
    """A copy of a made fix with some fields rewritten (its language read again from a new snippet)."""
    if "snippet" in changes and "language" not in changes:
        changes["language"] = fix.language
    return replace(fix, **changes)


def literal(**fields: Any) -> Fix:
    """A fix whose text its producer wrote itself (check's input remedies, kept until they move to
    the catalog): built here all the same."""
    return Fix(**fields)


def cure(
    title: str, why: str, edits: list[dict[str, Any]], diff: str, verified: bool | None, verification: str
) -> Fix:
    """The experiment's fix: edits it made and re-ran (commands/_patch.py, experiment/lines.py), its
    place the first edit's (editing.fix_edits.place)."""
    from ..editing.fix_edits import place

    file, line = place(edits)
    return Fix(
        title=title[:1].upper() + title[1:],
        why=why,
        edits=edits,
        diff=diff,
        language="python",
        verified=verified,
        verification=verification,
        file=file,
        line=line,
    )
