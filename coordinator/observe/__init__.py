"""Operating dome: live traces (OpenTelemetry SDK), Prometheus metrics, JSON logs and the
configuration table. Every signal is a projection of the ledger (`ledger.otel.Projector`);
a telemetry failure is counted and never fails a run."""
