"""What one run shares: its context (settings, data, grid, history, folder), the recording grid,
the reply checks, the history, checkpoints and resume, and how the run ended."""
