"""The token-exact rollout core: ledger, chat rendering, tool parsing, the episode, the policy seam."""
