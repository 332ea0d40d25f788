"""Metrics and structured logs shared by the gRPC and HTTP edges."""
