"""Standard Webhooks signatures: the specification's vector, docs/protocol.md §13, refusals."""

from __future__ import annotations

import pytest

from converge_provider._signature import (
    InvalidTimestamp,
    MissingHeaders,
    NoMatchingSignature,
    Secret,
    TimestampOutOfTolerance,
    generate_secret,
    parse_secrets,
    sign,
    verify,
)

SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
ROTATED = "whsec_c2Vjb25kLXNlY3JldC0yNC1ieXRlcy1sb25n"
DOC_BODY = (
    b'{"type":"task","task_id":"0b7f6a0e-3c1d-4a55-9f43-2f6f2c1f9a10","claim_epoch":7,"attempt":2,'
    b'"task_type":"reconcile","reaction":"work","trigger":"specChange","kind":"vpc","kind_version":1,'
    b'"resource":{"id":"5d0c2b1e-8f3a-4c7e-b1d2-9a6e4f3c2b10","kind":"vpc","kind_version":1,'
    b'"name":"team-blue","labels":{"team":"blue"},"spec":{"cidr":"10.0.0.0/16","region":"eu-west-1"},'
    b'"generation":3,"phase":"Reconciling"},"config":{"endpoint":"https://cloud.internal","pool_size":8},'
    b'"bundle":"UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==","deadline":"2026-01-01T00:05:00Z",'
    b'"callback":{"url":"https://dispatch.internal:8080/v1/tasks/0b7f6a0e-3c1d-4a55-9f43-2f6f2c1f9a10/outcome",'
    b'"token":"cbt_3q2-Jd0x8VvYb1kq7n0"}}'
)
DOC_ID = "msg_0b7f6a0e-3c1d-4a55-9f43-2f6f2c1f9a10_7"


def test_specification_vector() -> None:
    got = sign([SPEC_SECRET], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}')
    assert got == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_protocol_worked_example_and_rotation() -> None:
    assert len(DOC_BODY) == 685
    assert sign([SPEC_SECRET], DOC_ID, 1767225600, DOC_BODY) == "v1,Bcu9ssivLBauEDV1Wrila5VrLHQclcU3QhCQ/G+x18E="
    both = sign([SPEC_SECRET, ROTATED], DOC_ID, 1767225600, DOC_BODY)
    assert both == ("v1,Bcu9ssivLBauEDV1Wrila5VrLHQclcU3QhCQ/G+x18E= "
                    "v1,oFHEXwfp+GlfJwkA2txWibLabAuqksqs3jKjIHPhj2I=")
    headers = {"webhook-id": DOC_ID, "webhook-timestamp": "1767225600", "webhook-signature": both}
    # A provider holding either secret accepts a rotation's two signatures.
    verify(parse_secrets([ROTATED]), headers, DOC_BODY, 1767225600)
    verify(parse_secrets([SPEC_SECRET]), headers, DOC_BODY, 1767225600)


def _headers(ts: str = "1767225600", sig: str | None = None) -> dict[str, str]:
    return {"webhook-id": DOC_ID, "webhook-timestamp": ts,
            "webhook-signature": sig if sig is not None else sign([SPEC_SECRET], DOC_ID, 1767225600, DOC_BODY)}


@pytest.mark.parametrize(("headers", "now", "err"), [
    ({"webhook-id": DOC_ID, "webhook-timestamp": "1767225600"}, 1767225600, MissingHeaders),
    (_headers(ts="12x"), 1767225600, InvalidTimestamp),
    (_headers(ts="+1767225600"), 1767225600, InvalidTimestamp),
    (_headers(ts="01767225600"), 1767225600, InvalidTimestamp),
    (_headers(), 1767225600 + 301, TimestampOutOfTolerance),
    (_headers(), 1767225600 - 301, TimestampOutOfTolerance),
    (_headers(sig="v1,AAAA"), 1767225600, NoMatchingSignature),
    (_headers(sig="v2," + sign([SPEC_SECRET], DOC_ID, 1767225600, DOC_BODY)[3:]), 1767225600, NoMatchingSignature),
])
def test_refusals(headers: dict[str, str], now: int, err: type[Exception]) -> None:
    with pytest.raises(err):
        verify(parse_secrets([SPEC_SECRET]), headers, DOC_BODY, now)


def test_tolerance_edge_and_unknown_versions_ignored() -> None:
    sig = sign([SPEC_SECRET], DOC_ID, 1767225600, DOC_BODY)
    verify(parse_secrets([SPEC_SECRET]), _headers(sig="v2,xyz " + sig), DOC_BODY, 1767225600 + 300)


def test_tampered_body_refused() -> None:
    with pytest.raises(NoMatchingSignature):
        verify(parse_secrets([SPEC_SECRET]), _headers(), DOC_BODY + b" ", 1767225600)


def test_secrets() -> None:
    assert "Mf" not in repr(Secret(SPEC_SECRET))
    Secret(generate_secret())
    for bad in ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_!!!", "whsec_AAAA"):
        with pytest.raises(ValueError):
            Secret(bad)
