"""A model's chat template: rendering messages and tools to token ids (renderer), recognising the
template's family (families), and where a rendered prompt's turns start and end (prompt_bounds)."""
