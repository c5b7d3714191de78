"""What finished episodes become: training samples, SFT data, token files, metrics."""
