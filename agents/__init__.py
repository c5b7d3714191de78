"""Ready AWorld agent builders."""
