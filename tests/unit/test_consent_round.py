"""The consent round as the client sees it: the URL-mode question, the answers, the errors, and
the pages the browser gets (escaped, no script, never cached or framed)."""

from __future__ import annotations

import json

from mcp_edge.core import mrtr
from mcp_edge.core.errors import RpcError
from mcp_edge.identity import consent_pages as pages
from mcp_edge.identity import consent_round as cr

URL = "https://edge.example/.mcp-edge/consent/start?t=mcpecs1.k.abc"


def question(target="create_issue", again=False):
    return cr.consent_question(
        url=URL,
        member="tickets",
        authority="login.tickets.example",
        method="tools/call",
        target=target,
        again=again,
    )


def test_the_question_is_one_url_mode_elicitation():
    q = question()
    assert q["resultType"] == "input_required"
    assert list(q["inputRequests"]) == [cr.CONSENT_KEY]
    request = q["inputRequests"][cr.CONSENT_KEY]
    assert request["method"] == "elicitation/create"
    assert request["params"]["mode"] == "url" and request["params"]["url"] == URL
    assert "login.tickets.example" in request["params"]["message"]
    # Valid MRTR for a client that declared URL mode, and refused with -32021 for one that did not.
    mrtr.check_input_required({**q, "requestState": "s"}, {"elicitation": {"url": {}}})
    try:
        mrtr.check_input_required({**q, "requestState": "s"}, {"elicitation": {"form": {}}})
    except RpcError as err:
        assert err.code == -32021 and err.data == {
            "requiredCapabilities": {"elicitation": {"url": {}}}
        }
    else:
        raise AssertionError("a form-only client was asked a URL-mode question")


def test_a_hostile_tool_name_is_quoted_in_the_message():
    message = question(target='x"\n\u202eevil')["inputRequests"][cr.CONSENT_KEY]["params"][
        "message"
    ]
    assert "\n" not in message and "\u202e" not in message
    assert json.dumps('x"\n\u202eevil') in message
    long = question(target="a" * 5000)["inputRequests"][cr.CONSENT_KEY]["params"]["message"]
    assert "5000 characters long" in long and len(long) < 600


def test_asking_again_says_so():
    first = question()["inputRequests"][cr.CONSENT_KEY]["params"]["message"]
    again = question(again=True)["inputRequests"][cr.CONSENT_KEY]["params"]["message"]
    assert "not complete yet" in again and "not complete yet" not in first


def test_can_ask_needs_url_mode():
    assert cr.can_ask({"elicitation": {"url": {}}})
    assert cr.can_ask({"elicitation": {"form": {}, "url": {}}})
    assert not cr.can_ask({"elicitation": {}})
    assert not cr.can_ask({"elicitation": {"form": {}}})
    assert not cr.can_ask({})


def test_reading_answers():
    key = cr.CONSENT_KEY
    assert cr.read_answer({key: {"action": "accept"}}) == cr.ACCEPTED
    assert cr.read_answer({key: {"action": "decline"}}) == cr.DECLINED
    assert cr.read_answer({key: {"action": "cancel"}}) == cr.CANCELLED
    for junk in (None, [], {}, {key: "accept"}, {key: {"action": "yes"}}, {"other": {}}):
        assert cr.read_answer(junk) == cr.MISSING


def test_the_answer_never_reaches_the_upstream():
    params = {"name": "t", "inputResponses": {cr.CONSENT_KEY: {"action": "accept"}, "q": 1}}
    cr.without_answer(params)
    assert params["inputResponses"] == {"q": 1}
    params = {"name": "t", "inputResponses": {cr.CONSENT_KEY: {"action": "accept"}}}
    cr.without_answer(params)
    assert "inputResponses" not in params
    params = {"name": "t", "inputResponses": "junk"}
    cr.without_answer(params)
    assert "inputResponses" not in params


def test_errors_name_what_happened():
    err = cr.needs_url_mode("tools/call", "create_issue", "tickets")
    assert err.code == -32021 and err.http_status == 400
    assert err.data == {"requiredCapabilities": {"elicitation": {"url": {}}}}
    assert "elicitation.url" in err.message
    assert cr.consent_declined("t", cr.DECLINED).data == {"reason": "consent_declined"}
    assert cr.consent_declined("t", cr.CANCELLED).data == {"reason": "consent_cancelled"}
    for outcome, reason in (("denied", "consent_denied"), ("other_user", "consent_other_user")):
        err = cr.consent_outcome_error("t", outcome)
        assert err.data == {"reason": reason} and err.http_status == 400
    assert cr.needs_user("t").data == {"reason": "consent_needs_user"}
    down = cr.unavailable("t", "the grant store")
    assert down.http_status == 503 and down.headers == {"Retry-After": "1"}
    listed = cr.list_needs_grant("t", "https://edge/.mcp-edge/consent/")
    assert listed.data == {"reason": "consent_required", "url": "https://edge/.mcp-edge/consent/"}


# ---------------------------------------------------------------------------- pages


def _headers(page: pages.Page) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in page.headers}


def test_every_page_is_uncached_unframed_and_runs_nothing():
    for page in (
        pages.refusal("other_user"),
        pages.granted("tickets", "login.example"),
        pages.redirect("https://as.example/authorize?x=1"),
        pages.method_not_allowed(["GET"]),
    ):
        headers = _headers(page)
        assert headers["cache-control"] == "no-store"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["x-frame-options"] == "DENY"
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        assert "script" not in csp and "unsafe" not in csp
        assert b"<script" not in page.body


def test_each_refusal_has_its_status():
    assert pages.refusal("other_user").status == 403
    assert pages.refusal("bad_request").status == 400
    assert pages.refusal("unavailable").status == 503
    assert pages.method_not_allowed(["GET"]).status == 405
    from mcp_edge.identity.consent_seals import REFUSALS

    for reason in REFUSALS:
        assert pages.refusal(reason).body.startswith(b"<!doctype html>")


def test_what_is_shown_is_escaped():
    page = pages.granted('<img src=x onerror="alert(1)">', "as")
    assert b"<img" not in page.body and b"&lt;img" in page.body
    rows = [
        pages.GrantRow('"><script>x</script>', True, scope="<b>", granted_at="now"),
        pages.GrantRow("a&b", False),
    ]
    page = pages.grants_page("<u>", rows, csrf='"x', action="/a", connect="/c")
    assert b"<script>" not in page.body and b"<u>" not in page.body and b"<b>" not in page.body
    assert b'name="member" value="a&amp;b"' in page.body
