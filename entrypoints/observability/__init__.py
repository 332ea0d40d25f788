"""Metrics, structured logs and tracing shared by the gRPC and HTTP edges."""
