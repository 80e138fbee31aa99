"""The test suite; a package so that ``tests.support`` imports by one name everywhere."""
