"""Tokens (pure): they always expire; the verifier re-checks expiry and revocation on every cached use."""
from __future__ import annotations

import time

import jwt
import pytest
from hypothesis import given, strategies as st

from gateway.auth.tokens import (DEFAULT_TTL_S, AuthError, Principal, Revocations, TokenSigner, TokenVerifier)
from gateway.store.records import Revocation

KEY = b"k" * 64


def claims(token: str) -> dict:
    return jwt.decode(token, options={"verify_signature": False})


def test_every_minted_token_expires():
    signer = TokenSigner(KEY)
    now = 1_900_000_000.0
    assert claims(signer.mint("harness", "h", now=now))["exp"] == int(now + DEFAULT_TTL_S)
    assert claims(signer.mint("approver", "a", 60, now=now))["exp"] == int(now + 60)
    assert claims(signer.mint("session", "s", 5, session_id="s_1", workload="ephemeral", now=now))["jti"]


@pytest.mark.parametrize("drop", ["exp", "jti"])
def test_a_token_without_exp_or_jti_is_refused(drop):
    payload = {"iss": "sandgate", "role": "admin", "sub": "root", "iat": int(time.time()),
               "exp": int(time.time()) + 600, "jti": "j1"}
    del payload[drop]
    with pytest.raises(AuthError):
        TokenSigner(KEY).verify(jwt.encode(payload, KEY, algorithm="HS256"))


def test_verifier_rechecks_expiry_of_a_cached_token():
    signer = TokenSigner(KEY)
    verifier = TokenVerifier(signer, Revocations())
    now = time.time()
    token = signer.mint("harness", "h", 100, now=now)
    assert verifier.verify(token, now=now + 50).name == "h"       # verified and cached
    with pytest.raises(AuthError, match="expired"):
        verifier.verify(token, now=now + 101)                      # the cache does not outlive exp


def test_verifier_honours_revocation_of_cached_tokens_and_page_cookies():
    signer = TokenSigner(KEY)
    revoked = Revocations()
    verifier = TokenVerifier(signer, revoked)
    token = signer.mint("approver", "alice", 600)
    principal = verifier.verify(token)
    cookie = signer.mint("approver", "alice", 600, purpose="page", source_jti=principal.jti)
    assert verifier.verify(cookie).source_jti == principal.jti
    revoked.merge([Revocation(id=7, jti=principal.jti, revoked_at=0.0)])
    assert revoked.last_id == 7
    for t in (token, cookie):
        with pytest.raises(AuthError, match="revoked"):
            verifier.verify(t)
    with pytest.raises(AuthError):
        verifier.check(principal)


def test_verifier_cache_is_bounded():
    signer = TokenSigner(KEY)
    verifier = TokenVerifier(signer, Revocations(), cache_size=8)
    for i in range(50):
        verifier.verify(signer.mint("harness", f"h{i}", 600))
    assert len(verifier._cache) == 8


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), st.floats(min_value=0, max_value=2e6))
def test_check_accepts_exactly_the_unexpired(exp_offset, now_offset):
    now = 1_900_000_000.0 + now_offset
    principal = Principal("harness", "h", jti="j", exp=1_900_000_000.0 + exp_offset)
    verifier = TokenVerifier(TokenSigner(KEY), Revocations())
    if principal.exp > now:
        verifier.check(principal, now)
    else:
        with pytest.raises(AuthError):
            verifier.check(principal, now)
