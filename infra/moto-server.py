"""moto's DynamoDB server with its requests serialised.

moto runs each request on its own thread, and a TransactWriteItems that fails restores a
snapshot of the whole table taken when it started, undoing any write other threads made
meanwhile. DynamoDB isolates transactions per item, so that lost write is an emulator artefact
that concurrent tests (ten requests with one payment) would hit. One lock around every request
gives DynamoDB's isolation back; the API served is moto's, unchanged.

That snapshot is a deep copy of the table, its stream included: every record ever written, each
with the item's old and new images. A conformance run writes thousands of them, and the copy came
to take 73 % of moto's time (py-spy), pegging a core and stalling every request behind it for
seconds (a paid request once answered 202 after 19 s). A stream record never changes once
written, so the snapshot shares the records and copies only their list: the same rollback, in
time that does not grow with the stream.

A transaction's snapshot is also taken once per item, not once per table: a transaction of
four items on one table copied that table four times (nothing writes between the copies, so
the four were equal). One copy per table per transaction is the same rollback.

The seeded simulation (`make soak`) makes thousands of short-lived tables in one moto; Python's
full collections, which walk the whole heap, then came often enough to slow every request. The
heap of moto's own modules is frozen once loaded and collections run less often.

moto's SQS (the webhook delivery queue, on the same server) counted every message of a queue on
each message sent or received; the counts are made only where GetQueueAttributes asks for them.

Usage: the same arguments as `moto_server` (-H host -p port).
"""

import copy
import gc
import json
import sys
import threading
import types

from moto import backends, server
from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.models.table import StreamShard, Table
from moto.dynamodb.responses import DynamoHandler
from moto.sqs import models as sqs_models
from moto.core.utils import camelcase_to_underscores
from moto.moto_server.werkzeug_app import DomainDispatcherApplication

_lock = threading.Lock()
_dispatch = DomainDispatcherApplication.__call__


def _serialised(self, environ, start_response):
    with _lock:
        return list(_dispatch(self, environ, start_response))


DomainDispatcherApplication.__call__ = _serialised


def _snapshot(self, memo):
    """A copy of the stream shard for a transaction's snapshot: its records shared, not copied."""
    clone = copy.copy(self)
    memo[id(self)] = clone
    clone.items = list(self.items)
    clone.table = memo.get(id(self.table), self.table)
    return clone


StreamShard.__deepcopy__ = _snapshot

_copies = threading.local()
_transact = dynamodb_models.DynamoDBBackend.transact_write_items


def _deepcopy(value, memo=None):
    """`copy.deepcopy` as moto's DynamoDB models see it: inside a transaction, a table already
    copied for its snapshot is not copied again."""
    taken = getattr(_copies, "tables", None)
    if taken is None or not isinstance(value, Table):
        return copy.deepcopy(value, memo)
    if id(value) not in taken:
        taken[id(value)] = copy.deepcopy(value, memo)
    return taken[id(value)]


def _transact_once(self, transact_items):
    _copies.tables = {}
    try:
        return _transact(self, transact_items)
    finally:
        _copies.tables = None


dynamodb_models.copy = types.SimpleNamespace(deepcopy=_deepcopy, copy=copy.copy)

# moto serialises every answer through botocore's model of the operation, walking each item's
# attributes (38 % of its time in the seeded simulation). The data-plane operations' results
# are already in DynamoDB's wire shape (items as `{"S": …}` maps, counts, keys), as moto wrote
# them as plain JSON before 5.x: those go out as JSON directly. Errors and the control plane
# keep the serializer.
_PLAIN_JSON = {
    "GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem",
    "BatchWriteItem", "TransactWriteItems", "TransactGetItems",
}
_serialized = DynamoHandler.serialized


def _as_json(self, action_result):
    result = action_result.result
    if isinstance(result, dict) and self._get_action() in _PLAIN_JSON:
        headers = {"Content-Type": "application/x-amz-json-1.0"}
        headers.update(self.response_headers)
        return 200, headers, json.dumps(result)
    return _serialized(self, action_result)


DynamoHandler.serialized = _as_json

# moto lists its own package directory on every request (`list_of_moto_modules`, 7 % of its
# time here): it does not change while the server runs.
_modules = list(backends.list_of_moto_modules())
backends.list_of_moto_modules = lambda: iter(_modules)
dynamodb_models.DynamoDBBackend.transact_write_items = _transact_once

# moto's SQS reads a queue's attributes on every message it sends or receives (whether the
# queue deduplicates by content; its retention), and every read counts the messages visible,
# delayed and in flight by walking them all: sending n messages cost O(n^2), and the webhook
# benchmark's 10,000 deliveries spent half of moto's time there (py-spy). The counts are what
# GetQueueAttributes answers: they are computed there, when asked for, and nowhere else.
_counts = [a for a in sqs_models.Queue.BASE_ATTRIBUTES if a.startswith("ApproximateNumberOf")]
_settings = [a for a in sqs_models.Queue.BASE_ATTRIBUTES if a not in _counts]
_all_attributes = sqs_models.Queue.attributes.fget


def _settings_only(self):
    cls = type(self)
    cls.BASE_ATTRIBUTES, full = _settings, cls.BASE_ATTRIBUTES
    try:
        return _all_attributes(self)
    finally:
        cls.BASE_ATTRIBUTES = full


_get_queue_attributes = sqs_models.SQSBackend.get_queue_attributes


def _with_counts(self, queue_name, attribute_names):
    attributes = dict(_get_queue_attributes(self, queue_name, attribute_names))
    queue = self.get_queue(queue_name)
    for name in _counts:
        if "All" in attribute_names or name in attribute_names:
            attributes[name] = getattr(queue, camelcase_to_underscores(name))
    return attributes


sqs_models.Queue.attributes = property(_settings_only)
sqs_models.SQSBackend.get_queue_attributes = _with_counts

if __name__ == "__main__":
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    server.main(sys.argv[1:])
