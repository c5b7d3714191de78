"""A minimal stand-in for the `areal` package (AReaL 1.0.4), for tests on machines where AReaL
cannot be installed. Only the names AWorldWorkflow uses; tests/test_areal_backend.py checks
them against areal_fields.json, which scripts/areal_fields.py reads from AReaL's source."""
