"""Tokens: chat templates, tool-call formats and parsers, the token ledger."""
