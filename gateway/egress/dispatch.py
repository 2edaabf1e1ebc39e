"""mitmproxy's hook dispatch, with each hook's handlers looked up once instead of on every event.

mitmproxy's `AddonManager.trigger_event` visits every addon of the chain (about forty here, mitmproxy's own
included) for every event, and every flow event is followed by an `update` event: a plain GET costs eight
full walks of the chain (a safecall context, a coroutine, a traversal and a getattr per addon), most of them
finding nothing to call. That was about 0.9 ms of CPU per request, more than sandgate's own hooks.

`HookTable` keeps, per hook name, what `trigger_event` would call: for each top-level addon of the chain that has
a handler (itself or a sub-addon), its handlers in traversal order. Dispatch then runs exactly those, in the same
order, with the same guards: per top-level addon, an exception is logged by mitmproxy's `safecall` and stops that
addon's remaining sub-addons (as in `invoke_addon`), `AddonHalt` stops the event, `OptionsError` propagates,
awaitables are awaited. Handlers are looked up (getattr) on every call, so a rebound attribute is seen.

The table is dropped whenever the chain can change: `register` (scripts load through it), `remove`, `clear`, and
every `configure` event (an option change: mitmproxy's ScriptLoader reorders its scripts there without registering
anything). A hook attribute that mitmproxy would refuse (neither callable nor a module) leaves that hook on
mitmproxy's own dispatch, which logs the error as before. One difference: an addon added by a handler while an
event is being dispatched gets the next event, not the current one (sandgate's addons never add addons).

A master gets its HookTable at construction (`HookTableMaster`, before any addon is added): mitmproxy's
AddonManager is subclassed, never patched, and no object changes its class.
"""
from __future__ import annotations

import dataclasses
import inspect
import types
from typing import Any

from mitmproxy import exceptions, flow, hooks
from mitmproxy.addonmanager import AddonManager, safecall, traverse
from mitmproxy.master import Master

# per hook name: ((top-level addon, (handler owners...)), ...), or None to use mitmproxy's dispatch
Entries = tuple[tuple[Any, tuple[Any, ...]], ...] | None

_ARG_NAMES: dict[type, tuple[str, ...]] = {}


def hook_args(event: hooks.Hook) -> list[Any]:
    """`event.args()` (its dataclass fields' values, in order), with the field names looked up once per hook class
    instead of through `dataclasses.fields` on every event."""
    names = _ARG_NAMES.get(type(event))
    if names is None:
        names = _ARG_NAMES[type(event)] = tuple(f.name for f in dataclasses.fields(event))
    return [getattr(event, name) for name in names]


class HookTable(AddonManager):
    """An AddonManager whose `trigger_event` dispatches from a per-hook table (see the module's docstring)."""

    def __init__(self, master: Master):
        super().__init__(master)
        self._hook_table: dict[str, Entries] = {}

    # -- the table, dropped whenever the chain may have changed ------------------------------------
    def _entries(self, name: str) -> Entries:
        try:
            return self._hook_table[name]
        except KeyError:
            pass
        entries: list[tuple[Any, tuple[Any, ...]]] = []
        for top in self.chain:
            owners = []
            for a in traverse([top]):
                func = getattr(a, name, None)
                if not func or isinstance(func, types.ModuleType):
                    continue
                if not callable(func):
                    self._hook_table[name] = None       # mitmproxy raises (and logs) this one: let it
                    return None
                owners.append(a)
            if owners:
                entries.append((top, tuple(owners)))
        table = self._hook_table[name] = tuple(entries)
        return table

    def _invalidate(self) -> None:
        self._hook_table = {}

    def register(self, addon):  # type: ignore[no-untyped-def]
        self._invalidate()
        try:
            return super().register(addon)
        finally:
            self._invalidate()

    def remove(self, addon):  # type: ignore[no-untyped-def]
        self._invalidate()
        try:
            return super().remove(addon)
        finally:
            self._invalidate()

    def clear(self):  # type: ignore[no-untyped-def]
        self._invalidate()
        try:
            return super().clear()
        finally:
            self._invalidate()

    def trigger(self, event: hooks.Hook) -> None:
        """mitmproxy's synchronous dispatch (option changes come through here: `_configure_all`)."""
        if not isinstance(event, hooks.ConfigureHook):
            return super().trigger(event)
        self._invalidate()
        try:
            return super().trigger(event)
        finally:
            self._invalidate()

    def invoke_addon_sync(self, addon, event: hooks.Hook) -> None:  # type: ignore[no-untyped-def]
        """A script's `configure` right after it is loaded comes through here."""
        if not isinstance(event, hooks.ConfigureHook):
            return super().invoke_addon_sync(addon, event)
        self._invalidate()
        try:
            return super().invoke_addon_sync(addon, event)
        finally:
            self._invalidate()

    # -- dispatch ---------------------------------------------------------------------------------
    async def handle_lifecycle(self, event: hooks.Hook) -> None:
        """mitmproxy's: the event, then an `update` event for its flow; the `update` event is not even built when
        no addon handles it (the table says so: its dispatch would call nothing)."""
        message = hook_args(event)[0]
        await self.trigger_event(event)
        if isinstance(message, flow.Flow) and self._entries("update") != ():
            await self.trigger_event(hooks.UpdateHook([message]))

    async def trigger_event(self, event: hooks.Hook) -> None:
        name = event.name
        entries = self._entries(name)
        if entries is None:
            return await super().trigger_event(event)
        if not entries:
            return
        args = hook_args(event)
        for _top, owners in entries:
            try:
                for owner in owners:
                    func = getattr(owner, name, None)
                    if not func or isinstance(func, types.ModuleType):
                        continue
                    if not callable(func):
                        raise exceptions.AddonManagerError(f"Addon handler {name} ({owner}) not callable")
                    res = func(*args)
                    if res is not None and inspect.isawaitable(res):
                        await res
            except exceptions.AddonHalt:
                return
            except exceptions.OptionsError:
                raise
            except Exception as exc:  # noqa: BLE001 - what mitmproxy's safecall() does: log it, go on
                _log_addon_error(exc)


def _log_addon_error(exc: Exception) -> None:
    """mitmproxy's own report of an addon's exception (safecall logs it; the context manager only runs when
    something was raised: on the usual path a try block costs nothing)."""
    with safecall():
        raise exc


class HookTableMaster(Master):
    """A mitmproxy Master whose addons are a HookTable from its construction on. Put it after mitmproxy's own
    master class in the bases (`class M(DumpMaster, HookTableMaster)`): that class's addons are then added to
    the HookTable. Master's own manager is replaced while it is still empty, and unhooked from option changes."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        plain = self.addons
        if plain.chain:
            raise TypeError("addons were added before the HookTable (with_termlog?): construct with none")
        self.options.changed.disconnect(plain._configure_all)
        self.addons = HookTable(self)
