"""One run's state, by concern: the fleet and its profiles, the facts collected, the pods, the
measurements and the results ledger. `conformance.session.Run` composes them."""
