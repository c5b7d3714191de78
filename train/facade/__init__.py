"""The top: AgentTrainer, the command line and SFT."""
