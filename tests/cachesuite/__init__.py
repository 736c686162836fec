"""The public HTTP cache test suite (http-cache-tests) run against read-through."""
