"""Helpers shared by the test files, imported as ``tests.helpers.<module>``
(see docs/testing.md)."""
