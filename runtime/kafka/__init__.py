"""The one Kafka layer: client factories (``clients``), publishing with latched delivery
errors (``publisher``), checking consumed records and dead-lettering them
(``records``), and where a consumer stands on its partitions (``offsets``)."""
