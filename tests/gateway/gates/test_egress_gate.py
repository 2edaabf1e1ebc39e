"""The egress gate in process (gateway/gates/egress.py), on a real SQLite store and the embedded engine: with the
shipped policies, and with a small policy that decides by host. What the outcome is, what the policy saw, and when
the addresses are vetted."""
from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from gateway.config import EgressSettings, PolicySettings
from gateway.gates.egress import EgressGate, EgressRequest
from gateway.net.addresses import AddressVerdict
from gateway.packages.firewall import PackageFirewall
from gateway.policy.factory import make_engine
from tests.support.services import open_services

BY_HOST = """package sandgate.egress
import rego.v1

verdicts := {"ask.test": "ask", "deny.test": "deny"}

decision := {"action": object.get(verdicts, input.request.host, "allow"), "reasons": ["by host"],
             "codes": [concat(".", ["site", object.get(verdicts, input.request.host, "allow")])]}
"""


class Addresses:
    """A check_address that records what it was asked and answers one verdict."""

    def __init__(self, allowed: bool = True):
        self.asked: list[tuple[str, int]] = []
        self.allowed = allowed

    async def __call__(self, host: str, port: int) -> AddressVerdict:
        self.asked.append((host, port))
        if self.allowed:
            return AddressVerdict(True, "127.0.0.1", "", "", ("127.0.0.1",))
        return AddressVerdict(False, "", "address.private", "a private address", ())


async def gate_on(stack: AsyncExitStack, tmp_path, policy: str = "") -> tuple:
    svc = await open_services(stack, tmp_path)
    policy_dir = ""
    if policy:
        (tmp_path / "pol").mkdir()
        (tmp_path / "pol" / "egress.rego").write_text(policy)
        policy_dir = str(tmp_path / "pol")
    engine = make_engine(PolicySettings(dir=policy_dir, isolation="thread", workers=1, decision_log=False))
    stack.push_async_callback(engine.close)
    await engine.start()
    gate = EgressGate(settings=EgressSettings(), engine=engine, sessions=svc.sessions,
                      packages=PackageFirewall(None, {}, 1 << 20))
    return svc, gate


def request(session, method: str = "GET", host: str = "allowed.test", **fields) -> EgressRequest:
    return EgressRequest(session=session, method=method, host=host,
                         port=443 if method == "CONNECT" else 80, scheme="" if method == "CONNECT" else "http",
                         path="" if method == "CONNECT" else "/x", **fields)


async def test_the_shipped_policy_allows_a_listed_host_and_denies_another(tmp_path):
    async with AsyncExitStack() as stack:
        svc, gate = await gate_on(stack, tmp_path)
        session, _ = await svc.session(allow=["allowed.test"])
        addresses = Addresses()
        allowed = await gate.decide(request(session), addresses)
        assert allowed.action == "allow" and allowed.decision is not None
        assert addresses.asked == [("allowed.test", 80)]          # vetted after the policy allowed it
        denied = await gate.decide(request(session, host="other.test"), addresses)
        assert denied.action == "deny" and denied.code == denied.decision.code
        assert addresses.asked == [("allowed.test", 80)]          # a denied host is never resolved
        asked = await gate.decide(request(session, method="DELETE"), addresses)
        assert asked.action == "ask" and asked.code == "egress.method_ask"


@pytest.mark.parametrize("method, host, action, code", [
    ("GET", "ask.test", "ask", "site.ask"),
    ("CONNECT", "ask.test", "deny", "site.ask"),          # a tunnel cannot be held: an ask is a deny
    ("CONNECT", "fine.test", "allow", "site.allow"),
    ("GET", "deny.test", "deny", "site.deny"),
])
async def test_outcomes_by_host(tmp_path, method, host, action, code):
    async with AsyncExitStack() as stack:
        svc, gate = await gate_on(stack, tmp_path, BY_HOST)
        session, _ = await svc.session(allow=[host])
        outcome = await gate.decide(request(session, method=method, host=host), Addresses())
        assert (outcome.action, outcome.code) == (action, code)


async def test_a_refused_address_denies_what_the_policy_allowed(tmp_path):
    async with AsyncExitStack() as stack:
        svc, gate = await gate_on(stack, tmp_path, BY_HOST)
        session, _ = await svc.session(allow=["fine.test"])
        outcome = await gate.decide(request(session, host="fine.test"), Addresses(allowed=False))
        assert (outcome.action, outcome.code) == ("deny", "address.private")
        assert outcome.decision is not None and outcome.decision.action == "allow"     # the policy's, kept


async def test_an_ambiguous_aws_call_is_refused_before_the_policy(tmp_path):
    async with AsyncExitStack() as stack:
        svc, gate = await gate_on(stack, tmp_path, BY_HOST)
        session, _ = await svc.session(allow=["fine.test"])
        addresses = Addresses()
        outcome = await gate.decide(request(session, host="fine.test", aws_ambiguous=True), addresses)
        assert (outcome.action, outcome.code, outcome.decision) == ("deny", "aws.ambiguous_operation", None)
        assert addresses.asked == []
