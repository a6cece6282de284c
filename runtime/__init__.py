"""What every cronstream process runs on: settings, metrics, health checks, and the one
layer of Kafka and Cassandra clients. Imports ``schemas`` and nothing else of ours."""
