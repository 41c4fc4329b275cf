"""The checks, one file per family. Each test function is one check of CHECKS.md."""
