"""Named one-shot knowledge-transfer methods: what a student does in the exchange phase."""
