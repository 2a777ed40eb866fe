"""moto's DynamoDB server with its requests serialised.

moto runs each request on its own thread, and a TransactWriteItems that fails restores a
snapshot of the whole table taken when it started, undoing any write other threads made
meanwhile. DynamoDB isolates transactions per item, so that lost write is an emulator artefact
that concurrent tests (ten requests with one payment) would hit. One lock around every request
gives DynamoDB's isolation back; the API served is moto's, unchanged.

Usage: the same arguments as `moto_server` (-H host -p port).
"""

import sys
import threading

from moto import server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication

_lock = threading.Lock()
_dispatch = DomainDispatcherApplication.__call__


def _serialised(self, environ, start_response):
    with _lock:
        return list(_dispatch(self, environ, start_response))


DomainDispatcherApplication.__call__ = _serialised

if __name__ == "__main__":
    server.main(sys.argv[1:])
