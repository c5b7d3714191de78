"""`aworld-train view`: a local web page over run folders (steps, GRPO groups, episodes token by
token, drift against a fresh render, two evaluations side by side). It reads what the engines wrote
(`rollout/samples/token_log.py`, metrics, trajectories) and sits at the top beside the CLI: nothing below it
imports it."""
