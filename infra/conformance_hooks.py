"""Schemathesis hooks of the conformance run (infra/conformance.sh loads them).

cargo lambda watch, the local stack's stand-in for API Gateway, answers 500 by itself, without
invoking any function, when a request body is not valid UTF-8 under a text media type such as
application/json. Such a body is sent here as its lossy UTF-8 text instead (invalid bytes become
U+FFFD), which still tests the function's refusal of a body that is not JSON. The functions'
answer to raw non-UTF-8 bytes (a base64-encoded event body) is tested in
tests/tests/e2e/errors.rs.

It does the same for a header or cookie value that is not valid UTF-8 (it cannot write the
event's JSON), and Python's HTTP client sends a header's text as Latin-1 bytes: a generated
value such as `Bearer é` left as the single byte 0xE9. Such a value is sent here as its UTF-8
bytes, which is the text API Gateway hands the function (`é`), so the function's own refusal of
the credential is what is checked.

It also answers 500 by itself to a `multipart/*` Content-Type without a `boundary` parameter
(it cannot split the body), where API Gateway passes the request on: such a header gets a
boundary here, so that the function's own answer is what is checked.

A long poll's `timeout` (whole seconds, up to 20, and 20 when left out) is held to 1 s here: the
answer's shape does not depend on how long it was held (tests/tests/e2e/waiting.rs times the
holds), and 20 s holds took the sandboxes' run from about a minute to three.
"""

import schemathesis


def utf8_on_the_wire(value):
    """The text whose Latin-1 bytes (what the client sends) are `value`'s UTF-8 bytes."""
    if isinstance(value, str) and not value.isascii():
        return value.encode("utf-8").decode("latin-1")
    return value


@schemathesis.hook
def before_call(context, case, kwargs):
    query = case.query or {}
    if isinstance(query.get("timeout"), int) and query["timeout"] > 1:
        query["timeout"] = 1
    if "waitFor" in query and "timeout" not in query:
        query["timeout"] = 1
    headers = case.headers or {}
    for name, value in list(headers.items()):
        value = utf8_on_the_wire(value)
        if (
            name.lower() == "content-type"
            and isinstance(value, str)
            and value.lower().startswith("multipart/")
            and "boundary=" not in value.lower()
        ):
            value += "; boundary=conformance"
        headers[name] = value
    cookies = case.cookies or {}
    for name, value in list(cookies.items()):
        cookies[name] = utf8_on_the_wire(value)
    body = case.body
    if isinstance(body, (bytes, bytearray)):
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            case.body = body.decode("utf-8", "replace")
