"""What one run shares: its context (settings, data, grid, history, folder), the recording grid,
the reply checks, the history, checkpoints and resume (the server's, and the clients' mod keeping
their state on disk), and how the run ended."""
