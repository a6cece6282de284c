"""The flows coordinator (`cronstream flows-coordinator`): flow runs decided from their
nodes' outcomes (``coordinator``, pure of faust), kept in a faust table (``app``)."""
