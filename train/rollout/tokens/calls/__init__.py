"""Tool calls in a model's own text: one parser per format (parsers/, registry), the format a run
reads resolved from its template (resolution), the derived parser's frame and value syntax read off
the template (derivation, frame, values), the tool block that teaches the format (tool_block), and
a forced call's opening text (forcing)."""
