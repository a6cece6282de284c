"""Executors for each target type: http, kafka, python, shell (see ``base``)."""
