"""The L2 continual-learning baseline as a jumplora method plugin (see `method`)."""
