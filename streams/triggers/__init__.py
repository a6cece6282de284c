"""The trigger processor (`cronstream triggers`): jobs run on the records of any Kafka
topic (``on:``); ``processor`` is the process and its commit procedure."""
