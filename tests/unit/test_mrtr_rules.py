"""Response-side MRTR rules and capability gating."""

import pytest

from mcp_edge.core import capabilities as caps
from mcp_edge.core import mrtr
from mcp_edge.core.errors import RpcError

ELICIT_FORM = {
    "method": "elicitation/create",
    "params": {"message": "?", "requestedSchema": {"type": "object"}},
}
ELICIT_URL = {
    "method": "elicitation/create",
    "params": {"mode": "url", "message": "?", "url": "https://x"},
}
SAMPLE = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
SAMPLE_TOOLS = {
    "method": "sampling/createMessage",
    "params": {"messages": [], "maxTokens": 5, "tools": []},
}
ROOTS = {"method": "roots/list"}


def check(result, declared):
    mrtr.check_input_required({"resultType": "input_required", **result}, declared)


def err_of(result, declared):
    with pytest.raises(RpcError) as info:
        check(result, declared)
    return info.value


@pytest.mark.parametrize(
    "request_,declared",
    [
        (ELICIT_FORM, {"elicitation": {}}),
        (ELICIT_FORM, {"elicitation": {"form": {}}}),
        (ELICIT_FORM, {"elicitation": {"form": {}, "url": {}}}),
        (ELICIT_URL, {"elicitation": {"url": {}}}),
        (SAMPLE, {"sampling": {}}),
        (SAMPLE_TOOLS, {"sampling": {"tools": {}}}),
        (ROOTS, {"roots": {"listChanged": True}}),
        (ROOTS, {"roots": {}}),
    ],
)
def test_declared_capability_passes(request_, declared):
    check({"inputRequests": {"k": request_}}, declared)


@pytest.mark.parametrize(
    "request_,declared,required",
    [
        (ELICIT_FORM, {}, {"elicitation": {"form": {}}}),
        (ELICIT_FORM, {"elicitation": {"url": {}}}, {"elicitation": {"form": {}}}),
        (ELICIT_URL, {"elicitation": {}}, {"elicitation": {"url": {}}}),
        (ELICIT_URL, {"elicitation": {"form": {}}}, {"elicitation": {"url": {}}}),
        (SAMPLE, {"elicitation": {}}, {"sampling": {}}),
        (SAMPLE_TOOLS, {"sampling": {}}, {"sampling": {"tools": {}}}),
        (ROOTS, {"sampling": {}}, {"roots": {}}),
    ],
)
def test_undeclared_capability_is_32021(request_, declared, required):
    err = err_of({"inputRequests": {"k": request_}}, declared)
    assert (err.code, err.http_status) == (-32021, 400)
    assert err.data == {"requiredCapabilities": required}


def test_several_missing_capabilities_are_merged():
    err = err_of({"inputRequests": {"a": ELICIT_FORM, "b": ROOTS, "c": SAMPLE}}, {"sampling": {}})
    assert err.data == {"requiredCapabilities": {"elicitation": {"form": {}}, "roots": {}}}


@pytest.mark.parametrize(
    "result,kind",
    [
        ({}, "empty"),
        ({"inputRequests": {}}, "empty"),
        ({"inputRequests": []}, "bad_input_requests"),
        ({"requestState": 5}, "bad_request_state"),
        ({"inputRequests": {"k": {"method": "tools/call", "params": {}}}}, "unknown_input_request"),
        ({"inputRequests": {"k": {"method": "ping"}}}, "unknown_input_request"),
        ({"inputRequests": {"k": "elicitation/create"}}, "bad_input_request"),
        (
            {"inputRequests": {"k": {"method": "elicitation/create", "params": []}}},
            "bad_input_request",
        ),
    ],
)
def test_malformed_input_required_is_32603(result, kind):
    err = err_of(result, {"elicitation": {}, "sampling": {}, "roots": {}})
    assert (err.code, err.http_status) == (-32603, 200)
    assert err.data["violation"] == kind


def test_state_only_result_is_legal():
    check({"requestState": "opaque"}, {})


def test_wrong_method_violation_names_the_method():
    err = mrtr.wrong_method_violation("tools/list")
    assert err.code == -32603 and "tools/list" in err.message and err.http_status == 200


def test_strip_retry_fields():
    params = {"cursor": "c", "inputResponses": {}, "requestState": "s"}
    assert mrtr.strip_retry_fields(params) and params == {"cursor": "c"}
    assert not mrtr.strip_retry_fields(params)


def test_required_for_rejects_other_methods():
    with pytest.raises(ValueError):
        caps.required_for("tools/list", {})


@pytest.mark.parametrize(
    "doc,found",
    [
        ({"method": "tools/call", "params": {"name": "t", "requestState": "s"}}, ["requestState"]),
        ({"method": "tools/list", "params": {"inputResponses": {}}}, ["inputResponses"]),
        (
            [
                {"method": "ping"},
                {"method": "x", "params": {"requestState": 1, "inputResponses": None}},
            ],
            ["inputResponses", "requestState"],
        ),
        ({"method": "tools/call", "params": {"arguments": {"requestState": "an argument"}}}, []),
        ({"jsonrpc": "2.0", "id": 0, "result": {"requestState": "s"}}, []),
        ([1, "x", None], []),
        ("text", []),
    ],
)
def test_legacy_retry_fields_found_in_any_request(doc, found):
    assert mrtr.legacy_retry_fields(doc) == found


def test_legacy_retry_fields_error_is_invalid_params():
    err = mrtr.legacy_retry_fields_error(["requestState"])
    assert err.code == -32602 and err.http_status == 400
    assert err.data == {"reason": "legacy_retry_fields", "fields": ["requestState"]}
