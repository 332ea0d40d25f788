"""Backend conformance kit: pytest checks any MemorySource/FeedbackSink implementation can run."""
