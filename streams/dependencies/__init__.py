"""The dependency processor (`cronstream dependencies`): jobs that run once the jobs they
come after (``after:``) succeeded for the day; ``processor`` is the process."""
