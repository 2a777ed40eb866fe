"""moto's DynamoDB server with its requests serialised.

moto runs each request on its own thread, and a TransactWriteItems that fails restores a
snapshot of the whole table taken when it started, undoing any write other threads made
meanwhile. DynamoDB isolates transactions per item, so that lost write is an emulator artefact
that concurrent tests (ten requests with one payment) would hit. One lock around every request
gives DynamoDB's isolation back; the API served is moto's, unchanged.

That snapshot was a deep copy of the whole table, its stream included (every record ever
written), taken once per item of the transaction: its cost grew with the table (73 % of moto's
time in a conformance run, 20 % under `make hostile`'s flood, py-spy). Requests are serialised,
so the only writes a failed transaction must undo are its own: the snapshot is now the items it
names (each one's copy, or its absence) and the length of each table's stream, and a
transaction that fails puts them back — the same rollback, in time that does not grow with the
table.

The seeded simulation (`make soak`) makes thousands of short-lived tables in one moto; Python's
full collections, which walk the whole heap, then came often enough to slow every request. The
heap of moto's own modules is frozen once loaded and collections run less often.

moto's SQS (the webhook delivery queue, on the same server) counted every message of a queue on
each message sent or received; the counts are made only where GetQueueAttributes asks for them.

It is served by waitress, whose connections stay open between requests (werkzeug's development
server closed each one), without the request log.

Usage: -H host -p port, as `moto_server`.
"""

import copy
import datetime
import gc
import json
import logging
import os
import sys
import threading
import types

from moto import backends, server
from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoHandler
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
from moto.sqs import models as sqs_models
from moto.core.utils import camelcase_to_underscores
from moto.moto_server.werkzeug_app import DomainDispatcherApplication

_lock = threading.Lock()
_dispatch = DomainDispatcherApplication.__call__


def _serialised(self, environ, start_response):
    with _lock:
        return list(_dispatch(self, environ, start_response))


DomainDispatcherApplication.__call__ = _serialised


_in_transaction = threading.local()
_transact = dynamodb_models.DynamoDBBackend.transact_write_items


def _deepcopy(value, memo=None):
    """`copy.deepcopy` as moto's DynamoDB models see it: inside a transaction a table is not
    copied (moto's own rollback then puts the same table back; [`_transact_once`] undoes the
    transaction's writes itself)."""
    if getattr(_in_transaction, "on", False) and isinstance(value, Table):
        return value
    return copy.deepcopy(value, memo)


def _named_items(backend, transact_items):
    """What a transaction can change: (table, key, a copy of the item or None) for each item it
    names, and each table's stream length."""
    items, streams = [], {}
    for entry in transact_items:
        for op in entry.values():
            table = backend.tables.get(op.get("TableName"))
            if table is None:
                continue
            names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
            source = op.get("Key") or op.get("Item") or {}
            key = {name: source[name] for name in names if name in source}
            if len(key) != len(names):
                continue
            try:
                current = backend.get_item(table.name, key)
            except Exception:  # a malformed key: moto refuses the transaction before any write
                continue
            items.append((table, key, copy.deepcopy(current)))
            if table.stream_shard is not None:
                streams.setdefault(id(table), (table, len(table.stream_shard.items)))
    return items, streams.values()


def _put_back(items, streams):
    """Undoes a failed transaction: each item it named as it was, each stream as long."""
    for table, key, before in reversed(items):
        hash_value = dynamodb_models.DynamoType(key[table.hash_key_attr])
        if table.range_key_attr:
            range_value = dynamodb_models.DynamoType(key[table.range_key_attr])
            if before is None:
                table.items[hash_value].pop(range_value, None)
            else:
                table.items[hash_value][range_value] = before
        elif before is None:
            table.items.pop(hash_value, None)
        else:
            table.items[hash_value] = before
    for table, length in streams:
        del table.stream_shard.items[length:]


def _transact_once(self, transact_items):
    items, streams = _named_items(self, transact_items)
    _in_transaction.on = True
    try:
        return _transact(self, transact_items)
    except Exception:
        _put_back(items, streams)
        raise
    finally:
        _in_transaction.on = False


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

# The table's stream records (GetRecords, the local feed's every poll) are wire-shaped already,
# but for their creation time; botocore's serializer walked each record's images (11 % of
# moto's time under a flood, py-spy). They go out as JSON directly, the time as epoch seconds.
_streams = DynamoDBStreamsHandler.get_records


def _records_as_json(self):
    result = _streams(self).result

    def epoch(value):
        if hasattr(value, "timestamp"):
            return value.replace(tzinfo=value.tzinfo or datetime.timezone.utc).timestamp()
        raise TypeError(f"{type(value)} is not JSON")

    return json.dumps(result, default=epoch)


DynamoDBStreamsHandler.get_records = _records_as_json

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


def _serve(argv):
    """Serves moto's application with waitress: werkzeug's development server closes every
    connection after one answer (http.server cannot drain a request's stream), so every AWS SDK
    call opened a TCP connection and a thread (11 % of moto's time under a flood, py-spy);
    waitress keeps HTTP/1.1 connections alive and answers from a pool of threads."""
    import argparse

    import waitress

    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = DomainDispatcherApplication(server.create_backend_app)
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    waitress.serve(app, host=args.host, port=args.port, threads=8, connection_limit=1000,
                   channel_timeout=300, ident="moto", _quiet=True)


if __name__ == "__main__":
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    _serve(sys.argv[1:])
