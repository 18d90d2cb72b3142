"""An OTLP/HTTP trace receiver for the end-to-end tests.

Accepts `POST /v1/traces` with an `application/x-protobuf` ExportTraceServiceRequest, decodes it
with the official OpenTelemetry protobuf definitions (opentelemetry-proto), and keeps every span.
A body that does not decode is answered 400 and kept nowhere, so a gateway that sends anything
but real OTLP fails the test. `GET /spans` returns what it kept as JSON:

    [{"service": "...", "scope": "...", "name": "...", "kind": "SPAN_KIND_SERVER",
      "trace_id": "<32 hex>", "span_id": "<16 hex>", "parent_span_id": "<16 hex or empty>",
      "status": {"code": "...", "message": "..."}, "attributes": {"key": value, ...}}, ...]

Usage: otlp_receiver.py --port N   (prints READY once listening on 127.0.0.1:N)
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

SPANS = []
LOCK = threading.Lock()


def any_value(value):
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "double_value":
        return value.double_value
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return None


def attributes(pairs):
    return {kv.key: any_value(kv.value) for kv in pairs}


def decoded(request):
    spans = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    {
                        "service": resource.get("service.name"),
                        "scope": scope_spans.scope.name,
                        "name": span.name,
                        "kind": Span.SpanKind.Name(span.kind),
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "status": {
                            "code": Status.StatusCode.Name(span.status.code),
                            "message": span.status.message,
                        },
                        "attributes": attributes(span.attributes),
                    }
                )
    return spans


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path != "/v1/traces":
            return self.answer(404, b"", "text/plain")
        if self.headers.get("Content-Type") != "application/x-protobuf":
            return self.answer(415, b"", "text/plain")
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except DecodeError as error:
            print(f"otlp receiver: undecodable export: {error}", file=sys.stderr)
            return self.answer(400, b"", "text/plain")
        with LOCK:
            SPANS.extend(decoded(request))
        self.answer(
            200,
            ExportTraceServiceResponse().SerializeToString(),
            "application/x-protobuf",
        )

    def do_GET(self):
        if self.path != "/spans":
            return self.answer(404, b"", "text/plain")
        with LOCK:
            body = json.dumps(SPANS).encode()
        self.answer(200, body, "application/json")

    def answer(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print("READY", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
