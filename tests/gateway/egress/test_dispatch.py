"""HookTable (gateway/egress/dispatch.py) calls exactly what mitmproxy's own dispatch calls, in the same order.

Each scenario runs twice, once on mitmproxy's AddonManager and once on a HookTable, and the two call logs must be
equal: sub-addons, sync and async handlers, an exception (logged; the raising addon's later sub-addons skipped,
the next addons still run), AddonHalt, addons added and removed after the table was built, sub-addons reordered
on an option change (as mitmproxy's ScriptLoader does), rebound handlers, and a handler attribute that is not
callable. Plus: on sandgate's real master, every hook finds the same handlers as mitmproxy's own lookup.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from mitmproxy import exceptions, hooks
from mitmproxy.addonmanager import AddonManager, traverse
from mitmproxy.http import HTTPFlow
from mitmproxy.master import Master
from mitmproxy.options import Options
from mitmproxy.proxy.server_hooks import ServerConnectionHookData
from mitmproxy.test import tflow

from gateway.egress.dispatch import HookTable, HookTableMaster
from gateway.egress.proxy import MasterSettings, build_master


class Rec:
    """An addon that logs its calls (and optionally raises, halts or awaits)."""

    def __init__(self, log: list, name: str, *, raises: str = "", halts: str = "", sub: list | None = None):
        self.name = name
        self._log = log
        self._raises = raises
        self._halts = halts
        if sub is not None:
            self.addons = sub

    def _hit(self, hook: str, arg: object) -> None:
        self._log.append((self.name, hook, getattr(arg, "id", None)))
        if self._raises == hook:
            raise RuntimeError(f"{self.name} fails in {hook}")
        if self._halts == hook:
            raise exceptions.AddonHalt()

    def requestheaders(self, flow: HTTPFlow) -> None:
        self._hit("requestheaders", flow)

    async def request(self, flow: HTTPFlow) -> None:
        await asyncio.sleep(0)
        self._hit("request", flow)

    def response(self, flow: HTTPFlow) -> None:
        self._hit("response", flow)


class Only:
    """An addon with one hook only (so that most hooks skip it)."""

    def __init__(self, log: list, name: str, hook: str):
        self.name = name
        setattr(self, hook, lambda *args: log.append((name, hook, getattr(args[0], "id", None))))


EVENTS = ("requestheaders", "request", "response", "update", "server_connect", "error")


async def fire(master: Master, flow: HTTPFlow) -> None:
    for name in EVENTS:
        if name == "requestheaders":
            await master.addons.handle_lifecycle(hooks.all_hooks[name](flow))   # and its `update`
        elif name == "update":
            await master.addons.trigger_event(hooks.UpdateHook([flow]))
        elif name == "server_connect":
            await master.addons.trigger_event(
                hooks.all_hooks[name](ServerConnectionHookData(flow.server_conn, flow.client_conn)))
        else:
            await master.addons.trigger_event(hooks.all_hooks[name](flow))


async def both(scenario) -> tuple[list, list]:
    """The call log of `scenario(master, log, flow)` on mitmproxy's manager, then on a HookTable."""
    logs = []
    for table in (False, True):
        master = HookTableMaster(Options()) if table else Master(Options())
        try:
            assert type(master.addons) is (HookTable if table else AddonManager)
            log: list = []
            flow = tflow.tflow(resp=True)
            flow.id = "f1"
            await scenario(master, log, flow)
            logs.append(log)
        finally:
            master._legacy_log_events.uninstall()
    return logs[0], logs[1]


async def test_same_calls_in_the_same_order_with_sub_addons():
    async def scenario(master, log, flow):
        inner = Rec(log, "inner", sub=[Rec(log, "innermost")])
        master.addons.add(Rec(log, "a"), Only(log, "only-update", "update"), Rec(log, "b", sub=[inner, Rec(log, "c")]),
                          Only(log, "only-error", "error"), Rec(log, "d"))
        await fire(master, flow)
    plain, table = await both(scenario)
    assert plain == table
    assert ("innermost", "request", "f1") in table and ("only-update", "update", None) in table


async def test_an_exception_is_logged_and_skips_the_rest_of_that_addon_only(caplog):
    async def scenario(master, log, flow):
        master.addons.add(Rec(log, "a", raises="request", sub=[Rec(log, "a-child")]), Rec(log, "b"))
        with caplog.at_level(logging.ERROR):
            await fire(master, flow)
    plain, table = await both(scenario)
    assert plain == table
    assert ("a-child", "request", "f1") not in table and ("b", "request", "f1") in table
    errors = [r for r in caplog.records if "a fails in request" in r.getMessage()]
    assert len(errors) == 2         # once per manager: logged the same way


async def test_addon_halt_stops_the_event():
    async def scenario(master, log, flow):
        master.addons.add(Rec(log, "a"), Rec(log, "b", halts="response"), Rec(log, "c"))
        await fire(master, flow)
    plain, table = await both(scenario)
    assert plain == table
    assert ("c", "response", "f1") not in table and ("c", "request", "f1") in table


async def test_an_options_error_propagates():
    async def scenario(master, log, flow):
        bad = Only(log, "bad", "request")
        bad.request = lambda flow: (_ for _ in ()).throw(exceptions.OptionsError("nope"))
        master.addons.add(bad, Rec(log, "after"))
        with pytest.raises(exceptions.OptionsError):
            await master.addons.trigger_event(hooks.all_hooks["request"](flow))
        log.append("raised")
    plain, table = await both(scenario)
    assert plain == table == ["raised"]


async def test_chain_changes_after_the_table_was_built():
    async def scenario(master, log, flow):
        a, b = Rec(log, "a"), Rec(log, "b")
        master.addons.add(a, b)
        await fire(master, flow)
        log.append("--")
        master.addons.remove(a)
        master.addons.add(Rec(log, "c", sub=[Rec(log, "c-child")]))
        await fire(master, flow)
        log.append("--")
        master.addons.clear()
        await fire(master, flow)
    plain, table = await both(scenario)
    assert plain == table
    assert table[-1] == "--"            # after clear(), nothing is called


async def test_sub_addons_reordered_on_an_option_change():
    """mitmproxy's ScriptLoader reorders its `addons` in `configure` without registering anything."""
    class Loader:
        name = "loader"

        def __init__(self, log):
            self.addons = [Rec(log, "s1"), Rec(log, "s2")]

        def configure(self, updated):
            if "showhost" in updated:
                self.addons = list(reversed(self.addons))

    async def scenario(master, log, flow):
        master.addons.add(Loader(log), Rec(log, "after"))
        await fire(master, flow)
        log.append("--")
        master.options.update(showhost=True)
        await fire(master, flow)
    plain, table = await both(scenario)
    assert plain == table
    assert table.index(("s2", "request", "f1"), table.index("--")) < table.index(("s1", "request", "f1"),
                                                                                 table.index("--"))


async def test_rebound_and_refused_handlers(caplog):
    async def scenario(master, log, flow):
        a = Only(log, "a", "request")
        master.addons.add(a, Rec(log, "b"))
        await fire(master, flow)
        a.request = lambda flow: log.append(("a-rebound", "request", flow.id))
        await fire(master, flow)
        weird = Only(log, "weird", "response")
        weird.response = 42                 # mitmproxy refuses (and logs) a handler that is not callable
        master.addons.add(weird)
        with caplog.at_level(logging.ERROR):
            await fire(master, flow)
    plain, table = await both(scenario)
    assert plain == table
    assert ("a-rebound", "request", "f1") in table
    assert sum("not callable" in r.getMessage() for r in caplog.records) == 2


async def test_the_table_is_made_at_construction_and_no_class_is_swapped():
    master = HookTableMaster(Options())
    try:
        assert type(master.addons) is HookTable and AddonManager.trigger_event is not HookTable.trigger_event
        plain = Master(Options())                  # mitmproxy's own manager stays what it was
        assert type(plain.addons) is AddonManager
        plain._legacy_log_events.uninstall()
        seen: list = []

        class Configured:
            def configure(self, updated):
                seen.append(set(updated))

        master.addons.add(Configured())
        master.options.update(listen_port=1)       # option changes reach the table's addons, once each
        assert seen.count({"listen_port"}) == 1
    finally:
        master._legacy_log_events.uninstall()
    with pytest.raises(TypeError):                 # a manager that already holds addons is not replaced
        HookTableMaster(Options(), with_termlog=True)._legacy_log_events.uninstall()


async def test_sandgates_master_finds_the_handlers_mitmproxy_would(tmp_path: Path):
    class Probe:
        def requestheaders(self, flow):
            pass

        async def request(self, flow):
            pass

    master, _ready = build_master([Probe()], MasterSettings(listen=("127.0.0.1", 0), confdir=tmp_path))
    try:
        assert type(master.addons) is HookTable
        for name in hooks.all_hooks:
            expected = [(top, a) for top in master.addons.chain for a, _f in AddonManager._iter_hooks(
                master.addons, top, hooks.all_hooks[name].__new__(hooks.all_hooks[name]))]
            entries = master.addons._entries(name)
            assert entries is not None
            got = [(top, a) for top, owners in entries for a in owners]
            assert got == expected, name
        assert [type(top).__name__ for top, _ in master.addons._entries("requestheaders")][-1] == "Probe"
        assert master.addons._entries("update") == ()
        assert all(a in list(traverse(master.addons.chain)) for _, owners in master.addons._entries("request")
                   for a in owners)
    finally:
        master._legacy_log_events.uninstall()


async def test_sandgates_master_runs_without_the_addons_that_could_not_act(tmp_path: Path):
    from gateway.egress.proxy import INERT_ADDONS, INERT_UNLESS_REVERSE, drop_inert_addons
    master, _ready = build_master([], MasterSettings(listen=("127.0.0.1", 0), confdir=tmp_path,
                                                     transparent=("127.0.0.2", 0)))
    try:
        for name, option in INERT_ADDONS.items():
            assert master.addons.get(name) is None and not getattr(master.options, option)
        assert master.addons.get(INERT_UNLESS_REVERSE) is None
        assert not any(spec.startswith("reverse") for spec in master.options.mode)
        for kept in ("disableh2c", "tlsconfig", "proxyserver", "dnsresolver", "core", "block", "errorcheck",
                     "stripdnshttpsrecords"):
            assert master.addons.get(kept) is not None, kept
    finally:
        master._legacy_log_events.uninstall()
    from mitmproxy.tools.dump import DumpMaster
    fresh = DumpMaster(Options(), with_termlog=False, with_dumper=False)
    try:
        fresh.options.update(map_local=["|~q|/tmp"])
        with pytest.raises(RuntimeError, match="map_local"):
            drop_inert_addons(fresh)
    finally:
        fresh._legacy_log_events.uninstall()


async def test_lifecycle_events_without_an_update_handler():
    """handle_lifecycle on every flow hook: the same calls; HookTable builds no `update` event nobody handles, and
    builds it when one addon handles it (the first scenario above)."""
    async def scenario(master, log, flow):
        master.addons.add(Rec(log, "a"), Rec(log, "b", sub=[Rec(log, "b-child")]))
        for name in ("requestheaders", "request", "response"):
            await master.addons.handle_lifecycle(hooks.all_hooks[name](flow))
    plain, table = await both(scenario)
    assert plain == table and len(table) == 9
    built = []
    original = hooks.UpdateHook.__init__

    def counting(self, *args, **kwargs):
        built.append(args)
        original(self, *args, **kwargs)
    hooks.UpdateHook.__init__ = counting
    try:
        await both(scenario)
    finally:
        hooks.UpdateHook.__init__ = original
    assert len(built) == 3          # mitmproxy's manager's three; none from the HookTable


def test_hook_args_are_mitmproxys():
    from gateway.egress.dispatch import hook_args
    flow = tflow.tflow(resp=True)
    for event in (hooks.all_hooks["request"](flow), hooks.UpdateHook([flow]),
                  hooks.all_hooks["server_connect"](ServerConnectionHookData(flow.server_conn, flow.client_conn))):
        assert hook_args(event) == event.args() and hook_args(event) == event.args()
