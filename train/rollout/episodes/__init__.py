"""Episodes: the agent driver seam, one episode, batches, workers, trajectories."""
