"""The workers' pure logic: retry backoff and contiguous offset tracking (no Kafka)."""
