"""Rendering the outline within its byte budget: the envelope, each collection's count
and record shape, the field table (path, types, share, values), the records that look like
failures or carry a rare value (a failure sign most records carry is the norm and is said
so), and sample records, each row ranked so that the least important are dropped first
when the budget is short.
"""

from __future__ import annotations

import json

from ._envelope import _Summary
from ._fast_path import _Accumulator
from ._fields import _MAX_FIELDS, SAMPLE_RECORDS, _Collection, _Field
from ._signs import _MAX_FAILURES
from ._values import _compact, _counted, _tolerant_path, _utf8_text
from .hints import RARE_HEADING

__all__ = ["_envelope", "_example", "_render"]


def _envelope(value: object, acc: _Accumulator, limit: int = 900) -> str:
    def render(node: object, room: int) -> str:
        """``node``'s text, or (once past ``room`` characters) its start: a member read
        from the document's end may be a large raw value, which took seconds whole."""
        if isinstance(node, _Summary):
            coll = acc.collections.get(node.pattern)
            if node.names:
                return "{" + (_count_kinds(coll, entries=True) if coll else "") + "}"
            if node.count is not None and (coll is None or node.count != coll.count):
                # One of a wrapper's arrays: its own count (the kinds are the collection's).
                return f"[{node.count:,} of {node.pattern}]" if node.count else "[]"
            return f"[{_count_kinds(coll)}]" if coll else "[]"
        if isinstance(node, dict | list):
            pieces: list[str] = []
            used = 1
            for item in node.items() if isinstance(node, dict) else node:
                if used > room:
                    break  # (the text is cut before here anyway)
                if isinstance(node, dict):
                    key, item = item
                    piece = f"{json.dumps(key, ensure_ascii=False)}: "
                    piece += render(item, room - used - len(piece))
                else:
                    piece = render(item, room - used)
                pieces.append(piece)
                used += len(piece) + 2
            inner = ", ".join(pieces)
            return ("{" + inner + "}") if isinstance(node, dict) else ("[" + inner + "]")
        return _compact(node, 60)

    text = render(value, limit)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _count_kinds(coll: _Collection | None, *, entries: bool = False) -> str:
    if coll is None or coll.count == 0:
        return "empty"
    kinds = sorted(coll.kinds.items(), key=lambda kv: -kv[1])
    if entries and len(kinds) == 1:
        return _counted(coll.count, "entry")
    if len(kinds) == 1:
        return _counted(coll.count, kinds[0][0])
    parts = ", ".join(_counted(n, k) for k, n in kinds)
    return f"{_counted(coll.count, 'record')}: {parts}"


def _value_text(value: str | bool) -> str:
    """A tallied value as the outline shows it: a string quoted, a boolean as JSON has it
    (``true``)."""
    return _compact(value, 40) if type(value) is str else json.dumps(value)


def _types(field: _Field) -> str:
    kinds = sorted(field.types.items(), key=lambda kv: -kv[1])
    return "|".join(kind for kind, _ in kinds)


def _share(part: int, whole: int) -> str:
    if whole <= 0 or part >= whole:
        return "100%"
    pct = 100 * part / whole
    if pct >= 10:
        shown = f"{pct:.0f}%"
        # (100% says every record has it: 200 of 201 is 99.5%)
        return shown if shown != "100%" else f"{min(pct, 99.9):.1f}%"
    if pct >= 1:
        return f"{pct:.1f}%"
    return f"{pct:.2g}%"


def _shape(acc: _Accumulator, pattern: str, depth: int = 0, limit: int = 700) -> str:
    """``{id: int, name: str, tags: [str], error?: str}``: a record's top-level fields (a
    map of names as ``deps{}: {version: str, ...}``, its entries' fields, one level deep)."""
    parent_count = acc.fields[pattern].count if pattern in acc.fields else 0
    parts: list[str] = []
    prefix_len = len(pattern)
    for path in acc.order:
        field = acc.fields[path]
        if field.parent != pattern:
            continue
        name = path[prefix_len:].lstrip(".")
        kind = _types(field)
        entries = acc.fields.get(path + "[]")
        if path in acc.nests:
            name += "{}" if path in acc.maps else "[]"
            kind = "↻"
        elif path in acc.maps and entries is not None:
            name += "{}"
            if "object" not in entries.types:
                kind = _types(entries)
            else:
                kind = _shape(acc, path + "[]", depth + 1) if depth < 1 else "{…}"
        elif kind == "array" and entries is not None:
            kind = f"[{_types(entries)}]"
        optional = "?" if field.count < parent_count else ""
        parts.append(f"{name}{optional}: {kind}")
    text = "{" + ", ".join(parts) + "}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _anomalies(
    coll: _Collection, nested: int = 0
) -> tuple[int, list[tuple[str, str, str]], list[str]]:
    """(records with a failure sign that is rare, the first of them as (path, text, why),
    rows naming the signs that are the norm).

    A sign carried by more than half of the records (and by more than 3) is what these
    records are, not what sets one apart (ruff's ``severity: "error"`` on every
    diagnostic): those records are not listed as failures for it, and the outline says so.
    """
    counts: dict[str, int] = {}
    for tokens, entry in coll.signs.items():
        for token in tokens:
            counts[token] = counts.get(token, 0) + entry[0]
    norm = max(3, (coll.count + nested) // 2)
    common = {token for token, n in counts.items() if n > norm}
    total = 0
    found: list[tuple[int, str, str, str]] = []
    for tokens, (n, examples) in coll.signs.items():
        rare = [token for token in tokens if token not in common]
        if not rare:
            continue
        total += n
        why = "; ".join(dict.fromkeys(rare[:3]))
        found.extend((number, path, text, why) for number, path, text in examples)
    found.sort()
    # The first record of each kind of sign comes first (a rare kind is not crowded out by
    # many records of another, and it ranks among the rows kept), then the rest in order.
    firsts: dict[str, tuple[int, str, str, str]] = {}
    for item in found:
        firsts.setdefault(item[3], item)
    chosen = sorted(firsts.values())[:_MAX_FAILURES]
    rest = [item for item in found if item not in chosen]
    found = chosen + rest[: _MAX_FAILURES - len(chosen)]
    among = f"{coll.count:,} records" + (
        f" and {nested:,} entries nested in them" if nested else ""
    )
    notes = [
        f"  ({counts[token]:,} of the {among} have {token}: the norm here, not listed as failures)"
        for token in sorted(common)
    ]
    return total, [(p, t, w) for _, p, t, w in found[:_MAX_FAILURES]], notes


def _rare_values(field: _Field, records: int) -> list[tuple[str | bool, int, str, str]]:
    """Values of a few-valued field that a tiny share of records have: (value, count,
    record path, record text)."""
    # Only a field with a few values (a kind, a severity) has rare ones: in a field that
    # names things (a license, a version) every value is rare.
    if field.values is None or not 2 <= len(field.values) <= max(3, records // 50):
        return []
    if records < 50:
        return []
    cap = max(1, records // 100)
    return [
        (value, entry[0], entry[1], entry[2])
        for value, entry in field.values.items()
        if entry[0] <= min(cap, 3) and entry[1] is not None
    ]


def _render(
    acc: _Accumulator,
    *,
    head_line: str,
    envelope: str | None,
    extra: list[tuple[int, str]],
    budget: int,
) -> str:
    rows: list[tuple[int, str]] = [(0, head_line)]
    if envelope is not None:
        rows.append((0, envelope))
    rows.extend(extra)
    failures: list[tuple[int, str]] = []
    rare_rows: list[tuple[int, str]] = []
    seen_failure_paths: set[str] = set()
    samples: list[tuple[int, str]] = []
    failure_total = 0
    shapes: list[tuple[int, str, str]] = []  # (row, head, pattern) of each record shape
    # Collections with records too large to walk: what they hold is not counted, so a
    # collection nested in their records (a wrapper's arrays in a wrapper) says so.
    unwalked = [(q, c.oversized) for q, c in acc.collections.items() if c.oversized]
    for pattern, coll in acc.collections.items():
        if coll.count == 0:
            continue
        # (No shape when every record walked was too large to walk: none has fields.)
        shape = (
            _shape(acc, pattern) if "object" in coll.kinds and coll.walked > coll.oversized else ""
        )
        base = pattern[:-2] or "."
        if base in acc.maps:
            head = f"{base}{{}}: {_count_kinds(coll, entries=True)}"
        else:
            head = f"{pattern}: {_count_kinds(coll)}"
        if shape:
            shapes.append((len(rows), head, pattern))
        rows.append((0, f"{head} {shape}".rstrip()))
        also = acc.elements.get(pattern, 0)
        if also:
            # The pattern is a collection here (in a wrapper's element) and a field of the
            # records of another there (another run's results): jq's path matches both.
            more = " or more" if acc.sampled else ""
            rows.append(
                (
                    0,
                    f"  ({pattern} also matches {_counted(also, 'element')} of arrays in "
                    f"other records{' walked whole' if more else ''}: "
                    f"{coll.count + also:,}{more} in all)",
                )
            )
        for outer, oversized in unwalked:
            if outer != pattern and pattern.startswith(outer):
                rows.append(
                    (
                        0,
                        f"  (more may be in the {_counted(oversized, 'record')} of {outer} "
                        "too large to outline)",
                    )
                )
        rows.extend(
            (0, note) for note in _nest_notes(acc, pattern, sampled=coll.walked < coll.count)
        )
        if coll.oversized:
            rows.append((1, f"  ({_counted(coll.oversized, 'record')} too large to outline)"))
        if coll.walked < coll.count:
            rows.append(
                (
                    1,
                    f"  (fields below: from {_counted(coll.walked, 'record')} walked whole, "
                    "the first "
                    f"{min(coll.walked, SAMPLE_RECORDS):,} and those of a new shape; all "
                    f"{coll.count:,} counted and checked for failure signs and rare values)",
                )
            )
        nested = sum(nest.entries for nest in acc.nests.values() if nest.target == pattern)
        total, listed, norms = _anomalies(coll, nested)
        failure_total += total
        rows.extend((1, note) for note in norms)
        for path, text, why in listed:
            seen_failure_paths.add(path)
            rank = 1 if len(failures) < 3 else 3
            failures.append((rank, f"{path}: {text}  <- {why}"))
        if coll.first is not None:
            # A few strings or objects beside the records (a document's keywords) are
            # shown by the envelope; their first element goes first when room is short.
            rank = 1 if coll.count >= _SMALL else 3
            samples.append((rank, f"{coll.first[0]}: {coll.first[1]}"))
        samples.extend((4, f"{path}: {text}  (other fields)") for path, text in coll.different)
    rows.extend((1, note) for note in _nest_notes(acc, None, sampled=acc.sampled))
    field_rows: list[tuple[int, str]] = []
    # Fields named by a map's keys before the map was known to be one (its entries are
    # under ``map[]``) are not fields.
    named = tuple(m + sep for m in acc.maps for sep in (".", '["'))
    for path in acc.order:
        field = acc.fields[path]
        if field.parent is None:
            continue  # a collection's records themselves: counted above
        if named and path.startswith(named):
            continue
        parent = acc.fields.get(field.parent)
        whole = parent.count if parent is not None else field.count
        share = field.count / whole if whole else 1.0
        depth = path.count(".") + path.count("[")
        rank = 2 if depth <= 5 else 3
        if share < 0.01:
            rank = 4
        unit = "entry" if field.parent in acc.maps else "item"
        amount = _counted(field.count, unit) if path.endswith("[]") else _share(field.count, whole)
        if path.endswith("[]") and acc.sampled:
            amount += " in those"
        line = f"  {path}  {_types(field)}  {amount}"
        values = field.values
        if values is not None and len(values) == 1:
            ((only, entry),) = values.items()
            if entry[0] >= field.count + field.tallied:  # (not with nulls beside it)
                line += f"  always {_value_text(only)}"
                values = None
        if values is not None and 1 <= len(values) <= 12:
            top = sorted(values.items(), key=lambda kv: -kv[1][0])
            line += "  values: " + ", ".join(f"{_value_text(v)} ×{e[0]:,}" for v, e in top)
        field_rows.append((rank, line))
        for value, count, rpath, rtext in _rare_values(field, field.count + field.tallied):
            if rpath in seen_failure_paths:
                continue
            seen_failure_paths.add(rpath)
            rare_rows.append(
                (
                    1,
                    f"{rpath}: {rtext}  <- rare {path.rsplit('.', 1)[-1]}="
                    f"{_value_text(value)} (×{count})",
                )
            )
    if field_rows:
        header = (2, "fields (path, types, share of records that have it):")
        if not _fits([*rows, header, *field_rows], budget):
            # The table cannot show every field: the paths alone, grouped, come first.
            field_rows = [(max(rank, 3), text) for rank, text in field_rows]
            tree = _tree_rows(acc, named)
            if tree:
                # The paths name the fields: a record's shape keeps only its first ones.
                for at, head, pattern in shapes:
                    rows[at] = (0, f"{head} {_shape(acc, pattern, limit=_SHORT_SHAPE)}")
                rows.append((2, _TREE_HEADER))
                rows.extend((2, row) for row in tree)
        rows.append(header)
        rows.extend(field_rows)
    for note in acc.notes:
        rows.append((1, note))
    if acc.fields_dropped:
        rows.append((2, f"  (more than {_MAX_FIELDS} field paths; the rest are not listed)"))
    anomalies = failures + rare_rows
    if anomalies:
        total = failure_total + len(rare_rows)
        # (Only rare ones: no failure is listed, and the pointer gives the failure lines
        # the text scan found their room: see ``hints.lists_failures``.)
        heading = "records that look like failures or are rare" if failures else RARE_HEADING
        rows.append((0, f"{heading} ({total:,}):"))
        rows.extend(anomalies)
    if samples:
        rows.append((1, "sample records:"))
        rows.extend(samples)
    return _fit(rows, budget)


def _nest_notes(acc: _Accumulator, target: str | None, *, sampled: bool) -> list[str]:
    """What the trees whose entries are walked as ``target`` hold, and the jq that lists
    all of their entries (``target`` None: the trees under fields, not collections)."""
    notes = []
    for where, nest in acc.nests.items():
        if (nest.target != target) if target is not None else nest.target in acc.collections:
            continue
        key = where[len(nest.target) :]
        step = key if key.startswith(".") else "." + key
        total = acc.fields[nest.target].count if nest.target in acc.fields else nest.entries
        walked = " in the records walked whole" if sampled else ""
        whose = "their" if target is not None else f"the entries of {nest.target}:"
        notes.append(
            f"  ({whose} {key.lstrip('.')} hold objects like them, nested up to "
            f"{nest.deepest} deep: {nest.entries:,} more{walked}; the fields below count all "
            f"{total:,} entries; list every one: [{_tolerant_path(nest.target)} | "
            f"recurse({step}? | .[]? | objects)])"
        )
    return notes


_SMALL = 20
"""A collection this small is a detail of the document, not its records."""

_SHORT_SHAPE = 280
"""A record's shape beside the list of its field paths (which name the rest)."""

_TREE_HEADER = (
    "field paths in at least 1% of records ({.a, .b} groups the fields under one path; "
    "↻ holds entries nested like their parent):"
)


_TREE_ROW = 480
"""Bytes a row of the field paths holds at most (a longer group goes on more rows)."""


def _tree_rows(acc: _Accumulator, skip: tuple[str, ...]) -> list[str]:
    """Every field path that at least 1% of a collection's records have, grouped under its
    parent as ``.deps[]{.name, .author{.email, .url}}`` (brace expansion spells each path
    in full): rows for the record's fields that have none below them, then rows for each
    field that has, each row at most about ``_TREE_ROW`` bytes."""
    kids: dict[str, list[str]] = {}
    for path in acc.order:
        parent = acc.fields[path].parent
        if parent is not None and not (skip and path.startswith(skip)):
            kids.setdefault(parent, []).append(path)

    def parts(path: str, least: float) -> list[str]:
        """The groups below ``path``, as brace expansion's alternatives."""
        # Fields with the same fields below them share them: {.import, .require}{.a, .b}
        same: dict[str, list[str]] = {}
        for child in kids.get(path, ()):
            if acc.fields[child].count >= least:
                same.setdefault(below(child, least), []).append(child[len(path) :])
        return [
            (names[0] if len(names) == 1 else "{" + ", ".join(names) + "}") + rest
            for rest, names in same.items()
            for names in ([names] if rest else [[name] for name in names])
        ]

    def below(path: str, least: float) -> str:
        if path in acc.nests:
            return "↻"
        found = parts(path, least)
        return _group(found) if found else ""

    rows: list[str] = []
    for root, coll in acc.collections.items():
        if coll.count == 0 or root not in kids:
            continue
        least = acc.fields[root].count / 100 if root in acc.fields else 0
        leaves: list[str] = []
        inner: list[str] = []
        for child in kids[root]:
            if acc.fields[child].count < least:
                continue
            found = [] if child in acc.nests else parts(child, least)
            if found:
                inner.extend(_packed(f"  {child}", found))
            else:
                leaves.append(child[len(root) :] + ("↻" if child in acc.nests else ""))
        rows.extend(_packed(f"  {root}", leaves))
        rows.extend(inner)
    return rows


def _group(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else "{" + ", ".join(parts) + "}"


def _packed(prefix: str, parts: list[str]) -> list[str]:
    """``prefix{a, b, ...}`` over as many rows as keep each under ``_TREE_ROW`` bytes."""
    rows: list[str] = []
    group: list[str] = []
    size = len(prefix) + 2
    for part in parts:
        if group and size + len(part) + 2 > _TREE_ROW:
            rows.append(prefix + _group(group))
            group, size = [], len(prefix) + 2
        group.append(part)
        size += len(part) + 2
    if group:
        rows.append(prefix + _group(group))
    return rows


def _fits(rows: list[tuple[int, str]], budget: int) -> bool:
    return sum(len(_utf8_text(text).encode()) + 1 for _, text in rows) <= budget


def _fit(rows: list[tuple[int, str]], budget: int) -> str:
    """Drop the least important rows (the last of the highest rank first) until it fits."""
    rows = [(rank, _utf8_text(text)) for rank, text in rows]
    keep = [True] * len(rows)
    cost = sum(len(text.encode()) + 1 for _, text in rows)
    note = "(+{} outline lines not shown for room: query the artifact)"
    order = sorted(range(len(rows)), key=lambda i: (-rows[i][0], -i))
    dropped = 0
    for i in order:
        if cost + (len(note) + 8 if dropped else 0) <= budget:
            break
        if rows[i][0] == 0 and cost - len(rows[i][1].encode()) - 1 < 0:
            break
        keep[i] = False
        cost -= len(rows[i][1].encode()) + 1
        dropped += 1
    lines = [text for (_, text), k in zip(rows, keep, strict=True) if k]
    if dropped:
        lines.append(note.format(dropped))
    text = "\n".join(lines) + "\n"
    raw = text.encode()
    if len(raw) > budget:
        cut = raw[: max(budget - 2, 0)].decode("utf-8", "ignore")
        text = cut[: cut.rfind("\n") + 1] if "\n" in cut else ""
    return text


def _example(acc: _Accumulator) -> str:
    for pattern, coll in acc.collections.items():
        nested = sum(nest.entries for nest in acc.nests.values() if nest.target == pattern)
        listed = _anomalies(coll, nested)[1]
        if listed:
            return _utf8_text(listed[0][0])
    for coll in acc.collections.values():
        if coll.first is not None:
            return _utf8_text(coll.first[0])
    return "."
