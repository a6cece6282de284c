"""The scheduler (`cronstream scheduler`): partitioned by job id, a timing wheel per owned
jobs partition, run requests emitted to ``runs.<priority>``; ``processor`` wires it."""
