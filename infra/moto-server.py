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

Usage: the same arguments as `moto_server` (-H host -p port).
"""

import copy
import sys
import threading

from moto import server
from moto.dynamodb.models.table import StreamShard
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

if __name__ == "__main__":
    server.main(sys.argv[1:])
