"""Where an assistant turn ends: the template's turn-end text (ends) and the ids sampling stops on
(stops)."""
