"""The search: generators (agents) propose candidates; the study loop measures, promotes and records them."""
