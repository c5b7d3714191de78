"""The run's inputs: config, dataset, reward, engine names and the run an engine gets."""
