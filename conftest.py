"""Root conftest: load the project's pytest fixtures for tests/ and integration_tests/."""

pytest_plugins = ["walstream.testing.fixtures"]
