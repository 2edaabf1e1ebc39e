"""oauth_retry's helpers: which minted tokens a request carried, whether it can be replayed, swapping the token."""
from __future__ import annotations

from mitmproxy.test import tflow

from gateway.egress.flows import FlowState
from gateway.store.records import Session
from gateway.egress.oauth_retry import replayable, swap, used_tokens


class Tokens:
    specs = {"crm": object()}

    def recent(self, name):
        return ["at-old", "at-older"] if name == "crm" else []


def test_used_tokens_are_the_minted_ones_the_request_left_with():
    flow = tflow.tflow()
    flow.request.headers["authorization"] = "Bearer at-old"
    st = FlowState(session=Session(id="s", workload="ephemeral", created_at=0.0, expires_at=0.0),
                   secrets_used=("crm@header", "static@header"))
    assert used_tokens(Tokens(), st, flow.request) == [("crm", "at-old")]
    st.secrets_used = ("static@header",)
    assert used_tokens(Tokens(), st, flow.request) == []


def test_swap_replaces_the_token_everywhere_it_went():
    flow = tflow.tflow()
    req = flow.request
    req.headers["authorization"] = "Bearer at-old"
    req.path = "/x?access_token=at-old"
    req.content = b'{"t": "at-old"}'
    req.headers["content-length"] = str(len(req.content))
    swap(req, "at-old", "at-newer-token")
    assert req.headers["authorization"] == "Bearer at-newer-token"
    assert req.path == "/x?access_token=at-newer-token"
    assert req.raw_content == b'{"t": "at-newer-token"}' and req.headers["content-length"] == str(len(req.raw_content))


def test_a_streamed_request_is_not_replayable():
    flow = tflow.tflow()
    assert replayable(flow.request)
    flow.request.stream = True
    assert not replayable(flow.request)
