"""What one run shares: its context (settings, data, grid, history, folder), the recording grid,
the history and the results on disk, and the seeds."""
