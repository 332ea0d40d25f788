"""grpc_api edge package."""
