"""exl3_gateway: an OpenAI-compatible HTTP API in front of the EXL3 runtime's public gRPC API."""
