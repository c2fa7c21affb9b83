"""The test suite; a package so that ``tests.helpers`` imports like any module."""
