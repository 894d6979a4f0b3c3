"""A small OTLP/HTTP trace receiver for tests: decodes each POST /v1/traces with the
opentelemetry-proto package and keeps the spans (ids as lowercase hex)."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self, fail_first: int = 0) -> None:
        self.spans: list[dict[str, Any]] = []
        self.requests = 0
        self.fail_first = fail_first
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                    ExportTraceServiceRequest, ExportTraceServiceResponse)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.requests += 1
                if outer.requests <= outer.fail_first:
                    self.send_response(400)  # not retried by the exporter: a lost batch
                    self.end_headers()
                    return
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                for rs in req.resource_spans:
                    service = {a.key: a.value.string_value for a in rs.resource.attributes}.get("service.name")
                    for ss in rs.scope_spans:
                        for s in ss.spans:
                            outer.spans.append({
                                "path": self.path, "service": service, "traceId": s.trace_id.hex(),
                                "spanId": s.span_id.hex(), "parentSpanId": s.parent_span_id.hex() or None,
                                "name": s.name, "start": s.start_time_unix_nano, "end": s.end_time_unix_nano,
                                "status": s.status.code,
                                "attributes": {a.key: (a.value.string_value or a.value.int_value)
                                               for a in s.attributes}})
                data = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "Receiver":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
