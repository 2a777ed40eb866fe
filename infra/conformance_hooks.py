"""Schemathesis hooks of the conformance run (infra/conformance.sh loads them).

cargo lambda watch, the local stack's stand-in for API Gateway, answers 500 by itself, without
invoking any function, when a request body is not valid UTF-8 under a text media type such as
application/json. Such a body is sent here as its lossy UTF-8 text instead (invalid bytes become
U+FFFD), which still tests the function's refusal of a body that is not JSON. The functions'
answer to raw non-UTF-8 bytes (a base64-encoded event body) is tested in
tests/tests/e2e/errors.rs.

It also answers 500 by itself to a `multipart/*` Content-Type without a `boundary` parameter
(it cannot split the body), where API Gateway passes the request on: such a header gets a
boundary here, so that the function's own answer is what is checked.
"""

import schemathesis


@schemathesis.hook
def before_call(context, case, kwargs):
    headers = case.headers or {}
    for name, value in list(headers.items()):
        if (
            name.lower() == "content-type"
            and isinstance(value, str)
            and value.lower().startswith("multipart/")
            and "boundary=" not in value.lower()
        ):
            headers[name] = value + "; boundary=conformance"
    body = case.body
    if isinstance(body, (bytes, bytearray)):
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            case.body = body.decode("utf-8", "replace")
