"""The decision log: every policy decision (id, time, kind, input with secrets redacted, result, policy
revision, engine, latency in µs), written in batches off the hot path by the audit log's loop
(gateway/runtime/batches.py). A tool call's history entries are stored once each and referenced from the rows
(`history_refs`; the format: gateway/store/decisions.py).

`record()` only appends to a list (no copy, no JSON, no redaction: those happen on the store's thread when
the batch is written, or, with the writer process (gateway/store/offload.py, `SANDGATE_WRITER=process`), in that
process) and never raises. Past `max_pending` unwritten rows, or `max_pending_chars` of what they
hold (weight(): a tool call's arguments of up to 256 KiB each would otherwise let 100,000 waiting rows keep
~25 GiB), the oldest are dropped and counted, so a slow or dead store costs decision-log rows, never request
latency or memory. `close()` flushes.
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import math
from math import isfinite
from operator import attrgetter, itemgetter
import time
from typing import Any

from gateway.policy.cache import Shared, Stamped
from gateway.runtime.batches import BatchWriter
from gateway.store import Store
from gateway.store.decisions import DecisionStore, RawJSON
from gateway.store.offload import WriterProcess, encode_decisions
from gateway.store.redact import (REDACTED, _SCALARS, _maybe_sensitive, _redact_all, _redact_short,  # noqa: F401
                                  _sensitive_key, redact_input, redact_text)

log = logging.getLogger("sandgate.policy")


def redacted_json(value: Any, skip: str | None = None) -> str:
    """json.dumps(redact_input(value)), without walking `value` in Python when nothing in it needs redacting.
    A top-level object's Shared and Stamped parts (a tool call's facts, history entries) are serialised and
    checked once per object; its other values are checked together, in one search. Redaction works value by
    value at the top level, so only a value that may hold a credential is walked (not the whole input).
    `skip`: a top-level key left out (a tool call's history, stored apart: history_refs)."""
    if value.__class__ is dict:
        parts, plain = [], []
        for key, item in value.items():
            if key == skip:
                continue
            if key.__class__ is not str:
                return _redacted_json({k: v for k, v in value.items() if k != skip} if skip else value)
            cls = item.__class__
            if _sensitive_key_text(key):
                text = _redacted_item(key, item)
            elif cls is Shared or cls is Stamped or (cls is list and item and item[0].__class__ is Stamped):
                text, flagged = _fragment(item)
                if flagged:
                    text = _redacted_item(key, item)
            else:
                text = json.dumps(item)
                plain.append((len(parts), key, item, text))
            parts.append([key, text])
        if plain and _maybe_sensitive(" ".join(p[3] for p in plain)):  # a match across two values: no matter
            for at, key, item, text in plain:
                if _maybe_sensitive(text):
                    parts[at][1] = _redacted_item(key, item)
        return "{" + ", ".join(_key_text(key) + text for key, text in parts) + "}"
    return _redacted_json(value)


def _redacted_item(key: str, item: Any) -> str:
    """The JSON of what redact_input makes of one top-level value."""
    if _sensitive_key(key):
        return json.dumps(_redact_all(item))
    if item is None or item.__class__ in _SCALARS:
        return json.dumps(item)
    return json.dumps(redact_input(item))


def _redacted_json(value: Any) -> str:
    text = json.dumps(value)
    return json.dumps(redact_input(value)) if _maybe_sensitive(text) else text


@functools.lru_cache(maxsize=1024)
def _key_text(key: str) -> str:
    return json.dumps(key) + ": "


@functools.lru_cache(maxsize=1024)
def _sensitive_key_text(key: str) -> bool:
    return _maybe_sensitive("{" + _key_text(key) + "0}")


def _fragment(item: Any) -> tuple[str, bool]:
    """(JSON text, whether redaction might change it) of one value."""
    cls = item.__class__
    if cls is Shared:
        return _shared(item, None)[0]
    if cls is Stamped:
        return _stamped(item)
    if cls is list and item and item[0].__class__ is Stamped:
        texts, sensitive = [], False
        for entry in item:
            text, flagged = _stamped(entry) if entry.__class__ is Stamped else _fragment(entry)
            texts.append(text)
            sensitive = sensitive or flagged
        return "[" + ", ".join(texts) + "]", sensitive
    text = json.dumps(item)
    return text, _maybe_sensitive(text)


def _stamped(item: Stamped) -> tuple[str, bool]:
    value, base = item[item.field], item.base
    if base.__class__ is not Shared or len(item) != len(base):
        text = json.dumps(item)
        return text, _maybe_sensitive(text)
    if value.__class__ is float and math.isfinite(value):
        number = float.__repr__(value)                    # what json.dumps writes for a finite float
    elif value.__class__ is int:
        number = int.__repr__(value)
    else:
        text = json.dumps(item)
        return text, _maybe_sensitive(text)
    hit = getattr(base, "log_memo", None)
    if hit is None or hit[0] != item.field:
        _shared(base, item.field)
        hit = base.log_memo
    (before, after), sensitive = hit[1]
    return before + number + after, sensitive


def _shared(item: Shared, field: str | None) -> tuple:
    """A Shared object's JSON text (field None), or its text before and after `field`'s value, once: kept on
    the object (`log_memo`)."""
    hit = getattr(item, "log_memo", None)
    if hit is not None and hit[0] == field:
        return hit[1]
    if field is None:
        text = json.dumps(item)
        out = ((text, _maybe_sensitive(text)),)
    else:
        out = _split_at(item, field)
        out = (out, _maybe_sensitive(out[0] + "0" + out[1]))
    item.log_memo = (field, out)
    return out


# A string no input holds (the API refuses NUL): its JSON spelling, quotes included, marks where the stamped field's
# value goes. Inside any other JSON string a quote is escaped, so the spelling occurs once unless another value of
# the object is this very string (then the slow way below).
_MARK = "\x00sandgate-stamp\x00"
_MARK_JSON = json.dumps(_MARK)


def _split_at(item: Shared, field: str) -> tuple[str, str]:
    """(the JSON text before `field`'s value, the text after it) of `item`: one json.dumps, the key order kept
    (one new history entry per tool call)."""
    text = json.dumps({**item, field: _MARK})
    if text.count(_MARK_JSON) == 1:
        before, _, after = text.partition(_MARK_JSON)
        return before, after
    pieces = [(k, json.dumps(v)) for k, v in item.items()]
    at = [k for k, _ in pieces].index(field)
    before = "{" + "".join(json.dumps(k) + ": " + t + ", " for k, t in pieces[:at]) + json.dumps(field) + ": "
    after = "".join(", " + json.dumps(k) + ": " + t for k, t in pieces[at + 1:]) + "}"
    return before, after


def history_refs(doc: Any) -> tuple[str | None, list[tuple[str, str, str, int]]]:
    """(the JSON text of the input's history as references, `[[KEY, AGE_S], ...]`, and each entry as _entry_ref
    gives it) when the input's history is a list of stamped
    entries (gateway/toolcalls/history.py); else (None, []): the row keeps its input whole. An entry's text is its
    redacted JSON with `age_s` 0.0 (what redacting the whole input gives for it, age aside), and its KEY the 32
    hex digits of that text's BLAKE2b-128: computed once for each entry (kept on its shared part, `log_ref`)."""
    if doc.__class__ is not dict:
        return None, []
    history = doc.get("history")
    if history.__class__ is not list or not history:
        return None, []
    refs, entries = [], []
    for item in history:
        if item.__class__ is not Stamped or item.field != "age_s":
            return None, []
        known = getattr(item.base, "log_ref", None)
        if known is None:
            known = _entry_ref(item)
            if known is None:
                return None, []
        age = item["age_s"]
        if age.__class__ is not float or not isfinite(age) or len(item) != known[3]:
            return None, []
        refs.append(known[2] + float.__repr__(age) + "]")       # what json.dumps writes for a finite float
        entries.append(known)
    return "[" + ", ".join(refs) + "]", entries


def _entry_ref(item: Stamped) -> tuple[str, str, str, int] | None:
    """(KEY, redacted JSON text, the reference's text up to the age, the entry's length) of a history entry's
    shared part, kept on it; None for an entry of another shape (its row then keeps its input whole)."""
    base = item.base
    if item.field != "age_s" or base.__class__ is not Shared or len(item) != len(base) or base.get("age_s") != 0.0:
        return None
    text = json.dumps(base)
    if _maybe_sensitive(text):
        text = json.dumps(redact_input(base))
    key = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    known = base.log_ref = (key, text, '["' + key + '", ', len(base))
    return known


_ages, _refs, _fields = itemgetter("age_s"), attrgetter("base.log_ref"), attrgetter("field")


def wire_history(doc: Any) -> tuple[tuple | None, list | None]:
    """(each history entry's `log_ref` (_entry_ref), their ages) when history_refs would give references for this
    input; else (None, None): the row keeps its input whole. The same conditions as history_refs, checked with
    C-level maps (20 entries a row: 5-9 µs against history_refs' 19-26)."""
    history = doc.get("history") if doc.__class__ is dict else None
    if history.__class__ is not list or not history:
        return None, None
    try:
        known: tuple | None = tuple(map(_refs, history))
    except AttributeError:                          # an entry seen for the first time (or not a Stamped entry)
        known = None
    if known is None or None in known:
        for item in history:
            if item.__class__ is not Stamped:
                return None, None
            if getattr(item.base, "log_ref", None) is None and _entry_ref(item) is None:
                return None, None
        try:
            known = tuple(map(_refs, history))
        except AttributeError:
            return None, None
    ages = list(map(_ages, history))
    if set(map(type, history)) != {Stamped} or set(map(_fields, history)) != {"age_s"} \
            or set(map(type, ages)) != {float} or not all(map(isfinite, ages)) \
            or list(map(len, history)) != list(map(_lengths, known)):
        return None, None
    return known, ages


_lengths = itemgetter(3)


MAX_WRITTEN_REFS = 65536      # history entries known to be stored (past it the set starts over: rewritten, no harm)
MAX_PENDING_CHARS = 256 * 1024 * 1024     # what the rows waiting to be written may hold (weight())
_ROW_WEIGHT = 4096                        # a row besides its arguments: the session, the history, the result


def weight(doc: Any) -> int:
    """About what a decision's input keeps alive while it waits: a fixed part and the characters of the strings
    in its tool call's arguments (up to the gate's 256 KiB; the rest of an input is bounded by its own caps)."""
    tool = doc.get("tool") if doc.__class__ is dict else None
    args = tool.get("args") if tool.__class__ is dict else None
    if not args:
        return _ROW_WEIGHT
    n, todo = _ROW_WEIGHT, [args]
    while todo:
        value = todo.pop()
        cls = value.__class__
        if cls is str:
            n += len(value)
        elif cls is dict:
            for k, v in value.items():
                n += len(k) if k.__class__ is str else 0
                todo.append(v)
        elif cls is list:
            todo.extend(value)
    return n


class DecisionLog(BatchWriter[tuple[list[tuple], list[dict]]]):
    """Rows are written in batches of up to `max_batch`, each one a hop to a thread (redaction) and one to the
    store's writer. On a busy loop a hop takes milliseconds: with 32-row batches the log fell behind at about
    1,600 decisions/s, and the thousands of inputs it held were walked by every full garbage collection."""

    def __init__(self, store: Store, flush_interval_s: float = 0.1, max_batch: int = 500,
                 max_pending: int = 100_000, max_pending_chars: int = MAX_PENDING_CHARS,
                 offload: WriterProcess | None = None):
        super().__init__("sandgate-decision-log", flush_interval_s, max_batch)
        self.store = DecisionStore(store)
        self._offload = offload                 # the writer process (gateway/store/offload.py), when given
        self._max_pending, self._max_chars = max_pending, max_pending_chars
        self.pending_chars = 0                  # the weight() of the rows waiting (not of those being written)
        self._decisions: list[tuple] = []
        self._divergences: list[dict] = []
        self._written_refs: set[str] = set()     # history entries stored already (read and added off the loop)
        self.dropped = 0

    def record(self, kind: str, input_doc: Any, result: dict, rev: str, engine: str, latency_us: int,
               decision_id: str, ts: float | None = None, request_id: str | None = None) -> None:
        w = weight(input_doc)
        self._decisions.append((decision_id, ts or time.time(), kind, input_doc, result, rev, engine, latency_us,
                                request_id, w))
        self.pending_chars += w
        if len(self._decisions) > self._max_pending or self.pending_chars > self._max_chars:
            self._drop_oldest()
        if len(self._decisions) >= self._max_batch:
            self._wake()

    def _drop_oldest(self) -> None:
        """Past either bound (the store is not keeping up, or is down) the oldest rows go, counted in `dropped`."""
        decisions, n, chars = self._decisions, 0, self.pending_chars
        while n < len(decisions) - 1 and (len(decisions) - n > self._max_pending or chars > self._max_chars):
            chars -= decisions[n][9]
            n += 1
        del decisions[:n]
        self.pending_chars = chars
        self.dropped += n

    def record_divergence(self, decision_id: str, kind: str, input_doc: Any, live: dict, shadow: dict,
                          live_rev: str, shadow_rev: str) -> None:
        self._divergences.append({"decision_id": decision_id, "ts": time.time(), "kind": kind,
                                  "input": input_doc, "live": live, "shadow": shadow, "live_rev": live_rev,
                                  "shadow_rev": shadow_rev})
        if len(self._divergences) > self._max_pending:
            del self._divergences[0]
            self.dropped += 1

    @staticmethod
    def _session_of(doc: Any) -> str | None:
        session = doc.get("session") if isinstance(doc, dict) else None
        sid = session.get("id") if isinstance(session, dict) else None
        return sid if isinstance(sid, str) else None

    def _rows(self, decisions: list[tuple], divergences: list[dict]
              ) -> tuple[list[dict], list[dict], list[tuple[str, str]]]:
        """Off the loop, before the store's writer thread: redact and serialise; the history entries not stored
        yet (each once)."""
        rows, new, written = [], {}, self._written_refs
        for did, ts, kind, doc, result, rev, engine, latency, request_id, _ in decisions:
            refs, entries = history_refs(doc)
            for key, text, _, _ in entries:
                if key not in written:
                    new[key] = text
            rows.append({"id": did, "ts": ts, "kind": kind, "session": self._session_of(doc),
                         "input": RawJSON(redacted_json(doc, "history" if refs is not None else None)),
                         "result": result, "policy_rev": rev, "engine": engine, "latency_us": int(latency),
                         "request_id": request_id, "history": RawJSON(refs) if refs is not None else None})
        return rows, [{**d, "session": self._session_of(d["input"]), "input": redact_input(d["input"])}
                      for d in divergences], list(new.items())

    def _wire(self, decisions: list[tuple], divergences: list[dict]) -> tuple[list[tuple], list[tuple]]:
        """The batch for the writer process (gateway/store/offload.py), built on a thread as cheaply as it can be:
        each row's input without its history, as it is (a Shared or Patched part as a plain dict: marshal carries
        only plain types), its result as it is, and its history as the entries' `log_ref`s and ages
        (wire_history). The process serialises, redacts (redacted_text: the text redacted_json gives) and makes
        the references' text (the text history_refs gives); it keeps which entries it has stored. Divergences
        (rare) go redacted."""
        rows = []
        for did, ts, kind, doc, result, rev, engine, latency, request_id, _ in decisions:
            known, ages = wire_history(doc)
            if doc.__class__ is dict:
                doc = {k: (v if v.__class__ is dict or not isinstance(v, dict) else dict(v)) for k, v in doc.items()
                       if k != "history" or known is None}
            rows.append((did, ts, kind, self._session_of(doc), doc, result, rev, engine, int(latency), request_id,
                         known, ages))
        dumps = json.dumps
        return rows, [
            (d["decision_id"], d["ts"], d["kind"], self._session_of(d["input"]), dumps(redact_input(d["input"])),
             dumps(d["live"]), dumps(d["shadow"]), d["live_rev"], d["shadow_rev"]) for d in divergences]

    def _message(self, batch: tuple[list[tuple], list[dict]]) -> bytes:
        assert self._offload is not None
        return encode_decisions(*self._wire(*batch), counts=self._offload.counts)

    def _insert(self, rows: list[dict], divergences: list[dict], entries: list[tuple[str, str]]) -> None:
        """On the store's writer thread: only the inserts (an approval or audit write waits behind no more)."""
        self.store.append_decisions_sync(rows, entries)
        self.store.append_divergences_sync(divergences)
        if len(self._written_refs) + len(entries) > MAX_WRITTEN_REFS:
            self._written_refs.clear()
        self._written_refs.update(key for key, _ in entries)

    # -- the batched writer (gateway/runtime/batches.py) ----------------------------------------------------
    def _has_pending(self) -> bool:
        return bool(self._decisions or self._divergences)

    def _full(self) -> bool:
        return len(self._decisions) >= self._max_batch

    def _take(self) -> tuple[list[tuple], list[dict]]:
        decisions, self._decisions = self._decisions[: self._max_batch], self._decisions[self._max_batch:]
        self.pending_chars -= sum(d[9] for d in decisions)
        divergences, self._divergences = self._divergences, []
        return decisions, divergences

    async def _write(self, batch: tuple[list[tuple], list[dict]]) -> None:
        if self._offload is not None:        # the message made on a thread: the loop only sends it
            await self._offload.send(await asyncio.to_thread(self._message, batch))
            return
        rows = await asyncio.to_thread(self._rows, *batch)
        await self.store.store.run_bulk(self._insert, *rows)

    def _put_back(self, batch: tuple[list[tuple], list[dict]]) -> None:
        self._decisions[:0] = batch[0]
        self.pending_chars += sum(d[9] for d in batch[0])
        self._divergences[:0] = batch[1]

    def _failed(self, batch: tuple[list[tuple], list[dict]], exc: Exception) -> None:
        # kept for retry at the next flush; never raised into decide()
        log.error("decision log write failed (%d rows kept): %s", len(batch[0]), exc)
