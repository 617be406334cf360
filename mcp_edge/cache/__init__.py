"""The edge cache for results the upstream marks cacheable (see ``layer`` and ``rules``)."""
